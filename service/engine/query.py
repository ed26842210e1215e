"""The streaming query of a pipeline: where it starts, starting it, waiting on it, and
starting it again from the store's offsets where that helps (a checkpoint Spark cannot
resume from, input Spark finds lost under it). Whatever stops it ends in one line naming
the cause."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from restorer.changelog import ChangelogWriter
from restorer.store import Store, StoreGone
from service.engine.checkpoint_dir import drop_checkpoint, forget_unfinished_batches
from service.engine.defaults import BATCH_MAX_DELAY_S, BATCH_MIN_RECORDS
from service.engine.input_guard import check_input
from service.engine.outage import query_failed_on_kafka, refusal_causes
from service.engine.sink import SinkClosed
from service.engine.start_point import StartPoint, checkpoint_problem, checkpoint_resume_offsets, choose_start
from service.ops.metrics import Metrics
from topics.auth import from_java
from topics.errors import BrewError, KafkaUnavailable, disk_problem
from topics.kafka import REQUEST_TIMEOUT_S, KafkaConnection, end_offsets, partitions_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from service.engine.contract import BatchSink, InputStage, Pipeline, RunConfig

log = logging.getLogger("brewstream")

# Logged once the store is open, fenced and caught up and Spark's session is up with its
# Python workers, just before the query starts.
READY_LINE = "%s: input=%s changelog=%s state=%s checkpoint=%s; %s"
READY_PATTERN = re.compile(r"(?P<pipeline>[\w-]+): input=(?P<input>\S+) changelog=")
# How many times one run starts its query again from the store's offsets (a damaged
# checkpoint, input lost under it) before it gives up.
QUERY_RESTARTS = 3


def run_query(p: Pipeline, cfg: RunConfig, spark: SparkSession, sink: BatchSink, store: Store,
              changelog: ChangelogWriter, metrics: Metrics, input_partitions: list[int], stop: threading.Event,
              lost: Callable[[], str | None], on_started: Callable[[StreamingQuery], None],
              beside: InputStage | None = None) -> str | None:
    """Start the query and wait for it, until ``stop`` or an available-now run's end; start
    it again from the store's offsets where a restart can help. ``lost`` says why this
    instance no longer holds the lease (its sink is then fenced). ``beside``: a shuffle's
    input stage, started first (with available-now, run to its end first: the pipeline's
    query then reads all it handed on); what stops it stops this query (``InputStage.check``)."""
    if beside is not None:
        beside.start(spark, store, metrics)
        if cfg.available_now:
            beside.run_to_end(stop)
    for attempt in range(QUERY_RESTARTS + 1):
        start = start_point(cfg.conn, store.next_offsets(p.input_topic), p.input_topic, cfg.checkpoint_dir,
                            input_partitions)
        log.info(READY_LINE, p.name, p.input_topic, p.changelog_topic, cfg.state_dir, cfg.checkpoint_dir,
                 start.reason)
        committed = sink.seq
        # Behind a shuffle, each record of its input is a part holding a whole batch's share:
        # waiting for more of them would only delay the counts.
        query = start_query(spark, p.input_topic, cfg, sink, start, cfg.checkpoint_dir, p.name, p.reader_options,
                            gather=p.shuffled is None)
        on_started(query)
        try:
            failure = wait(query, sink, store, stop, lost, beside)
        except BaseException:
            sink.close(STOP_WAIT_S)
            stop_quietly(query.stop)
            raise
        if stop.is_set() and not sink.close(STOP_WAIT_S):
            log.warning("the batch in flight did not finish within %.0fs; stopping it (the next start does it "
                        "again)", STOP_WAIT_S)
        stop_quietly(query.stop)
        if failure is None:
            return None
        if isinstance(sink.failure, BrewError):
            raise sink.failure  # our own refusal: it says what happened and what to do
        line = failure_line(failure)
        if query_failed_on_kafka(failure):
            raise KafkaUnavailable(f"Spark's Kafka source failed: {line}")  # the runner waits it out
        if attempt == QUERY_RESTARTS:
            return line
        if is_data_loss(failure):
            # Spark compares with its checkpoint; the store decides whether anything it
            # still has to count is gone (check_input refuses then, unless told).
            check_input(cfg.conn, store, changelog, p.input_topic, cfg.accept_input_loss, metrics)
            log.warning("Spark found input missing (%s); starting the query again from the store's offsets", line)
        elif start.use_checkpoint and sink.seq == committed:
            log.warning("the query failed before its first batch on the checkpoint in %s (%s); dropping the "
                        "checkpoint and starting from the store's offsets", cfg.checkpoint_dir, line)
        else:
            return line
        drop_checkpoint(cfg.checkpoint_dir)
        sink.retry()
    return None


def start_point(conn: KafkaConnection, applied: Mapping[int, int], topic: str, checkpoint_dir: Path,
                partitions: list[int], earliest: Mapping[int, int] | None = None, what: str = "") -> StartPoint:
    """Where a query over ``topic`` starts, given what its state has ``applied`` (the next
    offset per partition): its checkpoint, unless damaged, lost, made for another input or
    ahead of the state. ``earliest``: each partition's first offset, when just read;
    ``what``: the query's name in the lines said, for a query other than the pipeline's."""
    problem = checkpoint_problem(checkpoint_dir, topic)
    if problem is not None:
        log.warning("the Spark checkpoint in %s %s; dropping it: the store's offsets say where to start",
                    checkpoint_dir, problem.verdict)
        drop_checkpoint(checkpoint_dir)
    if earliest is None:
        consumer = conn.consumer()
        try:
            earliest = {p: low for p, (low, _) in end_offsets(consumer, topic, partitions).items()}
        finally:
            consumer.close()
    checkpoint = checkpoint_resume_offsets(checkpoint_dir, topic)
    start = choose_start(topic, partitions, applied, earliest, checkpoint)
    if checkpoint is not None and not start.use_checkpoint:
        log.warning(start.reason)
        drop_checkpoint(checkpoint_dir)
    elif start.use_checkpoint:
        forgotten = forget_unfinished_batches(checkpoint_dir)
        if forgotten:
            log.info("%sbatch %s was planned but not committed by the last run; planning it again up to the input's "
                     "end", f"{what} " if what else "", ", ".join(map(str, forgotten)))
    return start


def source_options(topic: str, cfg: RunConfig, extra: Mapping[str, str]) -> dict[str, str]:
    """Spark's Kafka source for ``topic``, for the queries and a standby's warm-up alike:
    brewstream's settings, then the connection's (--kafka-config's win), then ``extra``
    (the pipeline's own)."""
    return {**SOURCE_DEFAULTS, **cfg.conn.spark_options(), "subscribe": topic, **extra}


# One attempt of the driver's admin client (listing the latest offsets): the request
# timeout and a few seconds more for the metadata it asks first.
ADMIN_ATTEMPT_S = REQUEST_TIMEOUT_S + 5.0
POLL_TIMEOUT_S = 3 * REQUEST_TIMEOUT_S

# Settings of Spark's Kafka source; a `java.<setting>` line in --kafka-config overrides any but
# isolation.level (topics.kafka_config.OWNED_SETTINGS).
SOURCE_DEFAULTS = {
    # A task's last poll leaves a fetch for the next offsets in flight, which the broker
    # holds for fetch.max.wait.ms (500 ms by default) when nothing new has arrived; the
    # next batch's task on that partition then waits for it. At a low input rate that made
    # every other batch half a second slower.
    "kafka.fetch.max.wait.ms": "20",
    # Spark's consumer asks the broker for the partition's offset range on every poll:
    # with Kafka's default of 500 records a poll, a 1M backlog took thousands of blocking
    # round trips. Bigger polls and fetches (docs/performance-notes.md, "Changes kept, before and after").
    "kafka.max.poll.records": "20000",
    "kafka.max.partition.fetch.bytes": str(8 * 1024 * 1024),
    "kafka.receive.buffer.bytes": str(1024 * 1024),
    # Only committed input counts (invariant 7): an aborted upstream transaction is skipped.
    "kafka.isolation.level": "read_committed",
    # A broker that died, froze or cannot be reached. The driver's admin client asks the
    # partition leaders for the latest offsets of every batch; once a leader died it kept
    # asking that broker until default.api.timeout.ms (60 s) ran out, whatever the cluster
    # had elected meanwhile, and only Spark's next attempt, on a new admin client, found the
    # new leader. A request to a broker that stopped answering waited request.timeout.ms
    # (30 s). With these, an attempt gives up within the client timeout and the next one
    # (fetchOffset.retryIntervalMs later, 1 s) asks the leaders the cluster has now.
    "kafka.request.timeout.ms": str(int(REQUEST_TIMEOUT_S * 1000)),
    "kafka.default.api.timeout.ms": str(int(ADMIN_ATTEMPT_S * 1000)),
    # An executor's poll for a batch's records waits this long for them (spark.network.timeout,
    # 120 s, by default) before the task, and so the query, fails; the runner then starts it
    # again once Kafka serves (``engine.outage``). The consumer itself moves to a new leader
    # within the timeouts above.
    "kafkaConsumer.pollTimeoutMs": str(int(POLL_TIMEOUT_S * 1000)),
}


def batch_limits(cfg: RunConfig, gather: bool = True) -> dict[str, str]:
    """The Kafka source's bounds on a batch: at most ``--max-offsets-per-trigger`` records;
    and a daemon's waits for ``BATCH_MIN_RECORDS`` until ``BATCH_MAX_DELAY_S`` has passed
    (engine.defaults), unless told not to ``gather``. The minimum is never above the cap,
    which Spark refuses; a backlog's batches (``--available-now``) are as big as they may
    be anyway."""
    limits: dict[str, str] = {}
    if cfg.max_offsets_per_trigger:
        limits["maxOffsetsPerTrigger"] = str(cfg.max_offsets_per_trigger)
    if gather and not cfg.available_now:
        least = min(BATCH_MIN_RECORDS, cfg.max_offsets_per_trigger or BATCH_MIN_RECORDS)
        limits |= {"minOffsetsPerTrigger": str(least), "maxTriggerDelay": f"{round(BATCH_MAX_DELAY_S * 1000)}ms"}
    return limits


def start_query(spark: SparkSession, topic: str, cfg: RunConfig, sink: Callable[[DataFrame, int], None],
                start: StartPoint, checkpoint_dir: Path, name: str,
                extra: Mapping[str, str] = MappingProxyType({}), gather: bool = True) -> StreamingQuery:
    """A query over ``topic`` into ``sink`` (a foreachBatch function), from ``start``, with
    its checkpoint in ``checkpoint_dir``, its batches bounded and triggered as ``cfg`` says
    (``batch_limits``)."""
    reader = spark.readStream.format("kafka").options(**source_options(topic, cfg, extra))
    offsets = start.starting_offsets_json()
    if offsets is not None:
        reader = reader.option("startingOffsets", offsets)
    reader = reader.options(**batch_limits(cfg, gather))
    if cfg.min_partitions:
        # More tasks than Kafka partitions: Spark splits each partition's offset range.
        # Each task still returns partial rows for its own range only, so the merge on
        # the driver is the same (and as exact) whatever the split.
        reader = reader.option("minPartitions", str(cfg.min_partitions))
    writer = (reader.load().writeStream.queryName(name).foreachBatch(sink)
              .option("checkpointLocation", str(checkpoint_dir)))
    if cfg.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{int(cfg.trigger_s * 1000)} milliseconds")
    return writer.start()


WARM_RECORDS = 300  # per partition: enough to load every class and path a batch takes
WARM_TIMEOUT_S = 120.0
REWARM_EVERY_S = 2.0


def warm_query(spark: SparkSession, p: Pipeline, cfg: RunConfig, only_with_records: bool = False) -> int:
    """Run the pipeline's batch once over the last records of its source, committing nothing:
    a standby's Spark then has its Kafka source, planning and Python workers warm, and
    its first batch after a takeover takes a fraction of a cold one. Returns how many
    records it read.

    Over an empty input it warms the driver's side only: no task runs, and Spark caches the
    code it generates per class loader, so the tasks' own (the executors' loader) would
    still be compiled by the first batch after a takeover. ``only_with_records``: do
    nothing then (the standby's later attempts, ``Rewarm``)."""
    import json
    import tempfile

    consumer = cfg.conn.consumer()
    try:
        ends = end_offsets(consumer, p.source_topic, list(range(len(partitions_of(cfg.conn, p.source_topic)))))
    finally:
        consumer.close()
    starts = {q: max(low, high - WARM_RECORDS) for q, (low, high) in ends.items()}
    records = sum(ends[q][1] - start for q, start in starts.items())
    if only_with_records and records == 0:
        return 0
    start = {p.source_topic: {str(q): o for q, o in starts.items()}}

    def dry_run(df: DataFrame, _batch_id: int) -> None:
        p.dry_run(df)

    with tempfile.TemporaryDirectory(prefix="brewstream-warm-") as checkpoint:
        # It commits nothing, so records aged out under it are no loss: it must not fail on them.
        query = (spark.readStream.format("kafka").options(**source_options(p.source_topic, cfg, p.reader_options))
                 .option("startingOffsets", json.dumps(start)).option("failOnDataLoss", "false").load()
                 .writeStream.foreachBatch(dry_run)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        finished = query.awaitTermination(int(WARM_TIMEOUT_S))
        if not finished:
            query.stop()
    return records


class Rewarm:
    """A standby's warm-up again, on a thread of its own, until one reads records: a standby
    started over an empty input ran no task (``warm_query``). An attempt asks Kafka, so it
    runs only once ``progress`` (the store's input offsets, which the standby follows from
    the changelog: the engine keeps them for every pipeline) has moved since the last one,
    looked at every ``every_s``: an input that stays empty costs no connection.
    ``stop`` ends the attempts; one under way finishes beside whatever runs next."""

    def __init__(self, attempt: Callable[[], int], progress: Callable[[], object],
                 every_s: float = REWARM_EVERY_S) -> None:
        self._attempt, self._progress, self._every_s = attempt, progress, every_s
        self._seen = self._look()  # what the warm-up that read nothing saw
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="spark-rewarm", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._halt.set()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _look(self) -> object:
        try:
            return self._progress()
        except Exception as exc:  # the store reopened under it, say: the next look tells
            log.debug("the standby's input offsets: %s: %s", type(exc).__name__, exc)
            return None

    def _loop(self) -> None:
        while not self._halt.wait(self._every_s):
            try:
                now = self._look()
                if now == self._seen:
                    continue
                records = self._attempt()
            except Exception as exc:  # Kafka away, Spark stopping: the next look
                log.debug("warming Spark's tasks: %s: %s", type(exc).__name__, exc)
                continue
            self._seen = now
            if records:
                log.debug("Spark's tasks warmed over %d records", records)
                return


# How long a stop waits for the batch in flight to commit before it interrupts it. Only
# then is the query stopped: stopping it interrupts a batch, and Spark then matches the
# Python error's whole text against a pattern that overflows the stack on a long one.
STOP_WAIT_S = 60.0


def wait(query: StreamingQuery, sink: BatchSink, store: Store, stop: threading.Event,
         lost: Callable[[], str | None], beside: InputStage | None = None) -> str | None:
    """Block until ``stop``, the end of an available-now run, a lost lease, a store deleted
    under the daemon (``StoreGone``, the runner opens it again) or a failure (its whole text);
    what stopped the query ``beside`` is raised (``InputStage.check``)."""
    from py4j.protocol import Py4JError
    from pyspark.errors import StreamingQueryException

    while not stop.is_set():
        if isinstance(sink.failure, BrewError):  # e.g. raised on the windows ticker's thread
            return str(sink.failure)
        if beside is not None:
            beside.check()
        reason = lost()
        if reason is not None:
            sink.fence(reason)
            return reason
        gone = store.gone()
        if gone is not None:
            sink.stop_with(StoreGone(f"{gone} while the daemon ran"))
            return gone
        try:
            if query.awaitTermination(0.25):  # type: ignore[arg-type] # pyspark takes seconds as a float
                return None
        except (Py4JError, ConnectionError) as exc:
            # Spark's JVM is gone: a SIGTERM to the whole process group reaches it first.
            if stop.is_set():
                break
            return f"Spark's JVM stopped answering ({type(exc).__name__})"
        except StreamingQueryException as exc:
            if sink.failure is not None:
                return str(sink.failure)
            if SinkClosed.__name__ in str(exc):
                return None
            return str(exc) + refusal_causes(exc)
    log.info("stopping: letting the batch in flight finish")
    return None


_ERROR_LINE = re.compile(r"^\s*(?:Caused by: |: )?([A-Za-z_][\w.$]*(?:Error|Exception|Exit|Interrupt)): (.+)$")
# Wrappers that say only that something below them failed.
_WRAPPERS = ("SparkException", "Py4JJavaError", "Py4JException", "StreamingQueryException",
             "ForeachBatchUserFuncException", "PythonException", "ExecutionException")


def failure_line(text: str) -> str:
    """The cause of a failed query in one line: a disk problem, the Python error a worker
    raised, the first telling Java exception, or else the first line that says something
    (never Spark's ``Traceback`` framing). Kafka refusing the source comes first, named
    with the settings to check (``topics.auth``)."""
    refusal = from_java(text)
    if refusal is not None:
        return refusal.line(java=True)
    hint = disk_problem(text)
    if hint:
        line = next((ln.strip() for ln in text.splitlines() if disk_problem(ln)), "")
        return f"{line[:200]}: {hint}"
    found = [(m.group(1), m.group(2).strip()) for ln in text.splitlines() if (m := _ERROR_LINE.match(ln))]
    telling = [(name, message) for name, message in found if name.rsplit(".", 1)[-1] not in _WRAPPERS]
    python = [(name, message) for name, message in telling if not name.startswith(("org.", "java.", "scala."))]
    # A wrapper's own message, when nothing below it is named ("Could not parse Master URL").
    wrapped = [(name, message) for name, message in found if not message.startswith("An error occurred while calling")]
    # A worker's own error comes last.
    pick = python[-1] if python else telling[0] if telling else wrapped[0] if wrapped else None
    if pick is not None:
        return f"{pick[0].rsplit('.', 1)[-1]}: {pick[1][:300]}"
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("Traceback", "Return Message", "===", "at ", "File ",
                                         "An error occurred while calling")):
            return line[:400]
    return "unknown error"


def stop_quietly(stop: Callable[[], object]) -> None:
    """Stop a Spark object whose JVM may already be gone (a SIGTERM to the process group
    reaches the JVM too): nothing is left to stop then, and nothing is lost."""
    from py4j.protocol import Py4JError

    try:
        stop()
    except (Py4JError, ConnectionError) as exc:
        log.debug("stopping: Spark's JVM is gone (%s)", exc)


def is_data_loss(failure: str) -> bool:
    lowered = failure.lower()
    return "data may have been lost" in lowered or "failondataloss" in lowered
