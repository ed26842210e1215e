"""The daemon around a pipeline's sink: start-up, the streaming query, clean shutdown.

Both pipelines (drink-count and windows) run here. Start-up order matters: lock the
state dir (a second process on it stops here), take the changelog's lease (a second live
instance on the changelog stops here, naming the first), fence older writers of the
changelog, bring the store up to date with the changelog (a full restore when the disk
was lost, refusing a changelog that cannot serve it), check that the input still holds
what the store has to count, pick the start point, and only then start Spark.

Whatever stops the query ends in one line naming the cause. A checkpoint Spark cannot
resume from, and input that Spark finds lost, are looked at again here: the query starts
over from the store's offsets, since progress lives in the store.
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from restorer.catchup import bring_store_up_to_date
from restorer.changelog import ChangelogWriter, Fenced
from restorer.codec import Entry, encode_u64, input_topic_id_name, local_key, offset_key
from restorer.commit import commit_batch
from restorer.faults import FaultPlan, kill_process_and
from restorer.reader import ValueCheck, check_count
from restorer.store import StateDir, Store
from service.health import ACTIVE, FENCED, RESTORING, STARTING, STOPPED, Health
from service.lease import LEASE_INTERVAL_S, TAKEOVER_TIMEOUT_S, Holder, Lease
from service.limits import MAX_NAME_BYTES
from service.metrics import Metrics, MetricsRefresher
from service.signals import stop_on_signals
from service.sink import SinkClosed, SinkOptions
from service.spark_session import build_session, warm_python_workers
from service.start_point import StartPoint, checkpoint_problem, checkpoint_resume_offsets, choose_start, input_gaps
from topics.catalog import DEFAULT_TOPICS, Topics
from topics.errors import BrewError, disk_problem
from topics.kafka import KafkaConnection, describe_topic, end_offsets, max_record_bytes, partitions_of, require_broker

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger("brewstream")

# Logged once the store is open, fenced and caught up, just before Spark starts the query.
READY_LINE = "%s: input=%s changelog=%s state=%s checkpoint=%s; %s"
READY_PATTERN = re.compile(r"(?P<pipeline>[\w-]+): input=(?P<input>\S+) changelog=")

# Default cap on records per micro-batch: with it, no backlog can make one batch too big
# for the driver (its bad records travel as positions once a task's budget is spent).
DEFAULT_MAX_OFFSETS_PER_TRIGGER = 1_000_000
# How many times one run starts its query again from the store's offsets (a damaged
# checkpoint, input lost under it) before it gives up.
QUERY_RESTARTS = 3


@dataclass(frozen=True)
class RunConfig:
    """The flags every pipeline shares."""

    conn: KafkaConnection
    state_dir: Path
    checkpoint_dir: Path
    trigger_s: float = 1.0
    max_offsets_per_trigger: int | None = DEFAULT_MAX_OFFSETS_PER_TRIGGER
    available_now: bool = False
    master: str = "local[*]"
    auto_restore: bool = True
    instance: str | None = None
    topics: Topics = DEFAULT_TOPICS
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None
    max_name_bytes: int = MAX_NAME_BYTES
    accept_changelog_loss: bool = False
    accept_input_loss: bool = False
    lease_interval_s: float = LEASE_INTERVAL_S
    takeover_timeout_s: float = TAKEOVER_TIMEOUT_S
    spark_conf: dict[str, str] = field(default_factory=dict)  # the user's --conf: wins over every other source
    min_partitions: int | None = None  # Spark's Kafka minPartitions: tasks per batch, at least


class BatchSink(Protocol):
    """A foreachBatch function that can be told to stop taking batches."""

    failure: BaseException | None
    seq: int

    def __call__(self, df: DataFrame, batch_id: int) -> None: ...

    def close(self) -> None: ...

    def retry(self) -> None: ...

    @property
    def fenced(self) -> bool: ...


class Reporter(Protocol):
    """What a pipeline shows while it runs (the top-N board, the windows table)."""

    def start(self) -> None: ...

    def stop(self, final_flush: bool = True) -> None: ...


@dataclass(frozen=True)
class Pipeline:
    name: str
    input_topic: str
    changelog_topic: str
    dlq_topic: str
    output_topics: tuple[str, ...]
    make_sink: Callable[[Store, ChangelogWriter, FaultPlan, Metrics, SinkOptions], BatchSink]
    make_reporter: Callable[[Store, BatchSink, Metrics], Reporter]
    start_when_empty: str = "earliest"  # or "latest": where a brand-new store starts reading
    reader_options: dict[str, str] = field(default_factory=dict)
    batch_module: str = "service.drink_count.aggregate"  # what the Python workers run; imported before the first batch
    check_value: ValueCheck = check_count


def run_pipeline(p: Pipeline, cfg: RunConfig, spark: SparkSession | None = None) -> int:
    """Run until SIGINT/SIGTERM (or the backlog is done with available-now); 0 on a clean stop."""
    conn = cfg.conn
    require_broker(conn)
    input_partitions = partitions_of(conn, p.input_topic)
    changelog_partitions = partitions_of(conn, p.changelog_topic)
    for topic in (p.dlq_topic, *p.output_topics, cfg.topics.instances):
        partitions_of(conn, topic)

    metrics = Metrics(p.name)
    health = Health()
    health.on_change(metrics.phase_changed)
    if cfg.metrics_port is not None:
        metrics.serve(cfg.metrics_host, cfg.metrics_port)
    try:
        failure = _run_locked(p, cfg, spark, metrics, health, input_partitions, changelog_partitions)
    except Fenced:
        health.set(FENCED, "another instance took over the changelog")
        raise
    finally:
        if health.phase.name != FENCED:
            health.set(STOPPED)
        metrics.stop_serving()
    if failure:
        raise BrewError(f"the {p.name} query failed: {failure}; progress is kept, start it again to continue "
                        f"(Spark's log: {spark_log(cfg)})")
    return 0


def _run_locked(p: Pipeline, cfg: RunConfig, spark: SparkSession | None, metrics: Metrics, health: Health,
                input_partitions: list[int], changelog_partitions: list[int]) -> str | None:
    conn = cfg.conn
    with StateDir(cfg.state_dir) as state_dir, Store(state_dir.store_path) as store:
        lease = Lease(conn, cfg.topics.instances, p.changelog_topic,
                      Holder.here(cfg.state_dir, cfg.instance, cfg.lease_interval_s),
                      cfg.lease_interval_s, cfg.takeover_timeout_s)
        lease.acquire()
        lease.start(seq=store.last_seq)
        still_held = True
        try:
            record_bytes = min(max_record_bytes(conn, t) for t in (p.dlq_topic, *p.output_topics))
            changelog = ChangelogWriter(conn, p.changelog_topic, changelog_partitions, record_bytes)
            changelog.start()
            try:
                health.set(RESTORING, "catching up with the changelog")
                applied = bring_store_up_to_date(conn, store, changelog, cfg.auto_restore, p.check_value,
                                                 cfg.accept_changelog_loss, on_progress=metrics.restore_progress)
                metrics.restore_records.labels(metrics.pipeline).inc(applied)
                check_input(conn, store, changelog, p.input_topic, cfg.accept_input_loss, metrics)
                if p.start_when_empty == "latest":
                    _pin_latest(conn, store, changelog, p.input_topic, input_partitions)
                health.set(STARTING, "starting Spark")
                failure = _run_spark(p, cfg, spark, metrics, health, store, changelog, input_partitions,
                                     record_bytes)
            finally:
                changelog.close()
        except Fenced:
            still_held = False  # another instance holds the lease now: leave its announcements alone
            raise
        finally:
            lease.release(still_held)
    return failure


def _run_spark(p: Pipeline, cfg: RunConfig, spark: SparkSession | None, metrics: Metrics, health: Health,
               store: Store, changelog: ChangelogWriter, input_partitions: list[int],
               record_bytes: int) -> str | None:
    """Spark, the sink and the query, until a stop; the failure, if the query failed."""
    conn = cfg.conn
    own_spark = spark is None
    if spark is None:
        spark = build_session(cfg.master, f"brewstream-{p.name}", conf=cfg.spark_conf, log_file=spark_log(cfg))
    try:
        _warm(spark, p.batch_module, cfg.master)
        options = SinkOptions(conn, cfg.checkpoint_dir, cfg.max_name_bytes, record_bytes)
        sink = p.make_sink(store, changelog, FaultPlan.from_env(kill_process_and(_jvm_pid(spark))), metrics, options)
        reporter = p.make_reporter(store, sink, metrics)
        last = store.last_batch_ms()
        if last is not None:
            metrics.last_batch_at(last / 1000)
        refresher = MetricsRefresher(metrics, conn, store, p.input_topic) if cfg.metrics_port is not None else None
        reporter.start()
        if refresher is not None:
            refresher.start()
        try:
            failure = _run_query(p, cfg, spark, sink, store, changelog, metrics, health, input_partitions)
        finally:
            sink.close()  # lets a batch in flight finish; later ones are refused
            reporter.stop(final_flush=not sink.fenced)
            if refresher is not None:
                refresher.stop()
        return failure
    finally:
        if own_spark:
            spark.stop()


def _warm(spark: SparkSession, module: str, master: str) -> None:
    """Start the Python workers; on a cluster this is where an executor's Python first
    shows whether it can run the batch code at all."""
    try:
        warm_python_workers(spark, module)
    except Exception as exc:
        hint = "" if master.startswith("local") else (
            "; executors need Python with pyspark, pyarrow and orjson: choose it with "
            "--conf spark.pyspark.python=PATH or PYSPARK_PYTHON")
        raise BrewError(f"the executors cannot run the batch code: {failure_line(str(exc))}{hint}") from None


def spark_log(cfg: RunConfig) -> Path:
    """Where Spark's own warnings and errors go, stack traces included."""
    return cfg.state_dir / "spark.log"


def _run_query(p: Pipeline, cfg: RunConfig, spark: SparkSession, sink: BatchSink, store: Store,
               changelog: ChangelogWriter, metrics: Metrics, health: Health, input_partitions: list[int]) -> str | None:
    """Start the query; start it again from the store's offsets where a restart can help."""
    for attempt in range(QUERY_RESTARTS + 1):
        start = _start_point(cfg.conn, store, p.input_topic, cfg.checkpoint_dir, input_partitions)
        log.info(READY_LINE, p.name, p.input_topic, p.changelog_topic, cfg.state_dir, cfg.checkpoint_dir,
                 start.reason)
        committed = sink.seq
        query = _start_query(spark, p, cfg, sink, start)
        health.set(ACTIVE)
        failure = _wait(query, sink)
        query.stop()
        if failure is None:
            return None
        if isinstance(sink.failure, BrewError):
            raise sink.failure  # our own refusal: it says what happened and what to do
        line = failure_line(failure)
        if attempt == QUERY_RESTARTS:
            return line
        if _is_data_loss(failure):
            # Spark compares with its checkpoint; the store decides whether anything it
            # still has to count is gone (check_input refuses then, unless told).
            check_input(cfg.conn, store, changelog, p.input_topic, cfg.accept_input_loss, metrics)
            log.warning("Spark found input missing (%s); starting the query again from the store's offsets", line)
        elif start.use_checkpoint and sink.seq == committed:
            log.warning("the query failed before its first batch on the checkpoint in %s (%s); dropping the "
                        "checkpoint and starting from the store's offsets", cfg.checkpoint_dir, line)
        else:
            return line
        _drop_checkpoint(cfg.checkpoint_dir)
        sink.retry()
    return None


def check_input(conn: KafkaConnection, store: Store, changelog: ChangelogWriter, topic: str, accept_loss: bool,
                metrics: Metrics | None = None) -> None:
    """Refuse to start when the input lost what the store has not counted yet (deleted by
    retention, or the topic re-created); with ``accept_loss``, skip it, say so and count it."""
    shape = describe_topic(conn.admin(), topic)
    recorded = store.local(input_topic_id_name(topic))
    consumer = conn.consumer()
    try:
        offsets = end_offsets(consumer, topic, list(range(shape.partitions)))
    finally:
        consumer.close()
    recreated = recorded is not None and recorded.decode() != shape.topic_id
    gaps = input_gaps(store.next_offsets(topic), offsets, recreated)
    identity: list[Entry] = [(local_key(input_topic_id_name(topic)), shape.topic_id.encode())]
    if not gaps:
        if recorded is None:
            store.commit(identity)
        return
    what = "; ".join(g.describe() for g in gaps)
    if not accept_loss:
        raise BrewError(f"input {topic} no longer holds records the store has not counted: {what}; pass "
                        "--accept-input-loss to skip them (logged, and counted in "
                        "brewstream_input_lost_records_total)")
    log.warning("skipping input lost from %s (--accept-input-loss): %s", topic, what)
    entries: list[Entry] = [(offset_key(topic, g.partition), encode_u64(g.low)) for g in gaps]
    commit_batch(store, changelog, entries, local=identity)
    if metrics is not None:
        for g in gaps:
            metrics.input_lost.labels(metrics.pipeline, str(g.partition)).inc(g.lost)


def _start_point(conn: KafkaConnection, store: Store, topic: str, checkpoint_dir: Path,
                 partitions: list[int]) -> StartPoint:
    problem = checkpoint_problem(checkpoint_dir, topic)
    if problem is not None:
        log.warning("the Spark checkpoint in %s is damaged (%s); dropping it: the store's offsets say where to "
                    "start", checkpoint_dir, problem)
        _drop_checkpoint(checkpoint_dir)
    consumer = conn.consumer()
    try:
        earliest = {p: low for p, (low, _) in end_offsets(consumer, topic, partitions).items()}
    finally:
        consumer.close()
    checkpoint = checkpoint_resume_offsets(checkpoint_dir, topic)
    start = choose_start(topic, partitions, store.next_offsets(topic), earliest, checkpoint)
    if checkpoint is not None and not start.use_checkpoint:
        log.warning(start.reason)
        _drop_checkpoint(checkpoint_dir)
    return start


def _drop_checkpoint(checkpoint_dir: Path) -> None:
    try:
        shutil.rmtree(checkpoint_dir)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise BrewError(f"cannot delete the checkpoint {checkpoint_dir}: {exc.strerror}; delete it by hand") from None


def _pin_latest(conn: KafkaConnection, store: Store, changelog: ChangelogWriter, topic: str,
                partitions: list[int]) -> None:
    """A brand-new store that starts at the latest offsets records them first, so that a
    partition without data until a restart is not read from its beginning then."""
    if store.next_offsets(topic):
        return
    consumer = conn.consumer()
    try:
        ends = {p: high for p, (_, high) in end_offsets(consumer, topic, partitions).items()}
    finally:
        consumer.close()
    commit_batch(store, changelog, [(offset_key(topic, p), encode_u64(o)) for p, o in sorted(ends.items())])
    log.info("new store: starting %s at its latest offsets %s", topic, ends)


# A task's last poll leaves a fetch for the next offsets in flight, which the broker holds
# for fetch.max.wait.ms (500 ms by default) when nothing new has arrived; the next batch's
# task on that partition then waits for it. At a low input rate that made every other
# batch half a second slower. A `java.fetch.max.wait.ms` line in --kafka-config overrides.
SOURCE_DEFAULTS = {
    "kafka.fetch.max.wait.ms": "20",
    # Only committed input counts (invariant 7): an aborted upstream transaction is skipped.
    "kafka.isolation.level": "read_committed",
}


def _start_query(spark: SparkSession, p: Pipeline, cfg: RunConfig, sink: BatchSink,
                 start: StartPoint) -> StreamingQuery:
    reader = (spark.readStream.format("kafka").options(**SOURCE_DEFAULTS).options(**cfg.conn.spark_options())
              .option("subscribe", p.input_topic).options(**p.reader_options))
    offsets = start.starting_offsets_json()
    if offsets is not None:
        reader = reader.option("startingOffsets", offsets)
    if cfg.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger))
    if cfg.min_partitions:
        # More tasks than Kafka partitions: Spark splits each partition's offset range.
        # Each task still returns partial rows for its own range only, so the merge on
        # the driver is the same (and as exact) whatever the split.
        reader = reader.option("minPartitions", str(cfg.min_partitions))
    writer = (reader.load().writeStream.queryName(p.name).foreachBatch(sink)
              .option("checkpointLocation", str(cfg.checkpoint_dir)))
    if cfg.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{int(cfg.trigger_s * 1000)} milliseconds")
    return writer.start()


def _wait(query: StreamingQuery, sink: BatchSink) -> str | None:
    """Block until a signal, the end of an available-now run, or a failure (its whole text)."""
    from pyspark.errors import StreamingQueryException

    with stop_on_signals() as stop:
        while not stop.is_set():
            if isinstance(sink.failure, BrewError):  # e.g. raised on the windows ticker's thread
                return str(sink.failure)
            try:
                if query.awaitTermination(1):
                    return None
            except StreamingQueryException as exc:
                if sink.failure is not None:
                    return str(sink.failure)
                if SinkClosed.__name__ in str(exc):
                    return None
                return str(exc)
        log.info("stopping: letting the batch in flight finish")
        return None


_ERROR_LINE = re.compile(r"^\s*(?:Caused by: |: )?([A-Za-z_][\w.$]*(?:Error|Exception|Exit|Interrupt)): (.+)$")
# Wrappers that say only that something below them failed.
_WRAPPERS = ("SparkException", "Py4JJavaError", "Py4JException", "StreamingQueryException",
             "ForeachBatchUserFuncException", "PythonException", "ExecutionException")


def failure_line(text: str) -> str:
    """The cause of a failed query in one line: a disk problem, the Python error a worker
    raised, the first telling Java exception, or else the first line that says something
    (never Spark's ``Traceback`` framing)."""
    hint = disk_problem(text)
    if hint:
        line = next((ln.strip() for ln in text.splitlines() if disk_problem(ln)), "")
        return f"{line[:200]}: {hint}"
    found = [(m.group(1), m.group(2).strip()) for ln in text.splitlines() if (m := _ERROR_LINE.match(ln))]
    telling = [(name, message) for name, message in found if name.rsplit(".", 1)[-1] not in _WRAPPERS]
    python = [(name, message) for name, message in telling if not name.startswith(("org.", "java.", "scala."))]
    pick = python[-1] if python else telling[0] if telling else None  # a worker's own error comes last
    if pick is not None:
        return f"{pick[0].rsplit('.', 1)[-1]}: {pick[1][:300]}"
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("Traceback", "Return Message", "===", "at ", "File ",
                                         "An error occurred while calling")):
            return line[:400]
    return "unknown error"


def _is_data_loss(failure: str) -> bool:
    lowered = failure.lower()
    return "data may have been lost" in lowered or "failondataloss" in lowered


def _jvm_pid(spark: SparkSession) -> int | None:
    proc = getattr(spark.sparkContext._gateway, "proc", None)
    return getattr(proc, "pid", None)
