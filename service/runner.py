"""The daemon around a pipeline's sink: start-up, the streaming query, clean shutdown.

Both pipelines (drink-count and windows) run here. Start-up order matters: lock the
state dir (a second instance stops here, before it can fence the first), fence older
writers of the changelog, bring the store up to date with the changelog (a full restore
when the disk was lost), pick the start point, and only then start Spark.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from restorer.progress import RestoreProgress
from restorer.reader import ChangelogBehindStore, ValueCheck, apply_changelog, check_count, pending
from service.changelog import ChangelogWriter
from service.codec import (
    LAST_BATCH_MS,
    Entry,
    commit_prefix,
    decode_entries,
    encode_u64,
    is_local,
    meta_key,
    offset_key,
    offset_prefix,
    position_key,
)
from service.errors import BrewError, SinkClosed
from service.faults import FaultPlan, kill_process_and
from service.kafka import KafkaConnection, end_offsets, partitions_of, require_broker
from service.metrics import Metrics, MetricsRefresher
from service.signals import stop_on_signals
from service.spark_session import build_session, warm_python_workers
from service.start_point import StartPoint, checkpoint_resume_offsets, choose_start
from service.store import StateDir, Store
from topics.catalog import DEFAULT_TOPICS, Topics

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger("brewstream")


@dataclass(frozen=True)
class RunConfig:
    """The flags every pipeline shares."""

    conn: KafkaConnection
    state_dir: Path
    checkpoint_dir: Path
    trigger_s: float = 1.0
    max_offsets_per_trigger: int | None = None
    available_now: bool = False
    master: str = "local[*]"
    auto_restore: bool = True
    instance: str | None = None
    topics: Topics = DEFAULT_TOPICS
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None


class BatchSink(Protocol):
    """A foreachBatch function that can be told to stop taking batches."""

    def __call__(self, df: DataFrame, batch_id: int) -> None: ...

    def close(self) -> None: ...


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
    make_sink: Callable[[Store, ChangelogWriter, FaultPlan, Metrics], BatchSink]
    make_reporter: Callable[[Store, BatchSink, Metrics], Reporter]
    start_when_empty: str = "earliest"  # or "latest": where a brand-new store starts reading
    reader_options: dict[str, str] = field(default_factory=dict)
    batch_module: str = "service.aggregate"  # what the Python workers run; imported before the first batch
    check_value: ValueCheck = check_count


def transactional_id(pipeline: str, state_dir: Path, instance: str | None) -> str:
    """Stable per instance: by default the state dir's name plus a hash of its path."""
    if instance is None:
        path = str(state_dir.resolve())
        instance = f"{state_dir.resolve().name}-{hashlib.sha1(path.encode()).hexdigest()[:8]}"
    return f"brewstream.{pipeline}.{instance}"


def run_pipeline(p: Pipeline, cfg: RunConfig, spark: SparkSession | None = None) -> int:
    """Run until SIGINT/SIGTERM (or the backlog is done with available-now); 0 on a clean stop."""
    conn = cfg.conn
    require_broker(conn)
    input_partitions = partitions_of(conn, p.input_topic)
    changelog_partitions = partitions_of(conn, p.changelog_topic)
    for topic in (p.dlq_topic, *p.output_topics):
        partitions_of(conn, topic)

    metrics = Metrics(p.name)
    if cfg.metrics_port is not None:
        metrics.serve(cfg.metrics_host, cfg.metrics_port)
    try:
        failure = _run_locked(p, cfg, spark, metrics, input_partitions, changelog_partitions)
    finally:
        metrics.stop_serving()
    if failure:
        raise BrewError(f"the {p.name} query failed: {failure}; progress is kept, "
                        "start it again to continue")
    return 0


def _run_locked(p: Pipeline, cfg: RunConfig, spark: SparkSession | None, metrics: Metrics,
                input_partitions: list[int], changelog_partitions: list[int]) -> str | None:
    conn = cfg.conn
    with StateDir(cfg.state_dir) as state_dir, Store(state_dir.store_path) as store:
        changelog = ChangelogWriter(conn, p.changelog_topic, transactional_id(p.name, cfg.state_dir, cfg.instance),
                                    changelog_partitions)
        changelog.start()
        bring_store_up_to_date(conn, store, changelog, cfg.auto_restore, p.check_value, metrics)
        if p.start_when_empty == "latest":
            _pin_latest(conn, store, changelog, p.input_topic, input_partitions)
        start = _start_point(conn, store, p.input_topic, cfg.checkpoint_dir, input_partitions)
        log.info("%s: input=%s changelog=%s state=%s checkpoint=%s; %s", p.name,
                 p.input_topic, p.changelog_topic, cfg.state_dir, cfg.checkpoint_dir, start.reason)

        own_spark = spark is None
        if spark is None:
            spark = build_session(cfg.master, f"brewstream-{p.name}")
        try:
            warm_python_workers(spark, p.batch_module)
            sink = p.make_sink(store, changelog, FaultPlan.from_env(kill_process_and(_jvm_pid(spark))), metrics)
            reporter = p.make_reporter(store, sink, metrics)
            last = store.get_u64([meta_key(LAST_BATCH_MS)]).get(meta_key(LAST_BATCH_MS))
            if last is not None:
                metrics.last_batch_at(last / 1000)
            refresher = (MetricsRefresher(metrics, conn, store, p.input_topic)
                         if cfg.metrics_port is not None else None)
            query = _start_query(spark, p, cfg, sink, start)
            reporter.start()
            if refresher is not None:
                refresher.start()
            failure = _wait(query)
            sink.close()  # lets a batch in flight finish; later ones are refused
            query.stop()
            reporter.stop(final_flush=True)
            if refresher is not None:
                refresher.stop()
        finally:
            changelog.close()
            if own_spark:
                spark.stop()
    return failure


def bring_store_up_to_date(conn: KafkaConnection, store: Store, changelog: ChangelogWriter,
                           auto_restore: bool, check_value: ValueCheck = check_count,
                           metrics: Metrics | None = None) -> None:
    """Apply what the changelog holds beyond the store: everything after a disk loss, the
    last batch after a crash between the two commits, nothing in the common case."""
    topic = changelog.topic
    try:
        todo = pending(conn, topic, store)
    except ChangelogBehindStore as exc:
        log.warning("%s; publishing the whole store to it again", exc)
        _reseed_changelog(store, changelog)
        return
    if not todo:
        return
    if not store.is_empty():
        # Usually only the last transaction's commit marker lies beyond the store's
        # position; records here mean the last run stopped between the two commits.
        result = apply_changelog(conn, topic, store, check_value=check_value)
        if metrics is not None:
            metrics.restore_records.labels(metrics.pipeline).inc(result.records)
        if result.records:
            log.info("caught up the store with %d changelog records its last run committed but did not "
                     "store", result.records)
        return
    if not auto_restore:
        raise BrewError(f"the store in {store.path} is empty but the changelog holds data; run "
                        "`brewstream restore` or drop --no-auto-restore")
    log.info("the store is empty: restoring it from %s (partition: (from, to) %s)", topic, todo)
    with RestoreProgress("restore") as progress:
        def report(partition: int, start: int, position: int, end: int) -> None:
            progress.update(partition, start, position, end)
            if metrics is not None:
                metrics.restore_progress(partition, start, position, end)

        result = apply_changelog(conn, topic, store, on_progress=report, check_value=check_value)
    if metrics is not None:
        metrics.restore_records.labels(metrics.pipeline).inc(result.records)
    log.info(result.summary())


def _reseed_changelog(store: Store, changelog: ChangelogWriter) -> None:
    entries = [(k, v) for k, v in store.items() if not is_local(k)]
    positions = changelog.publish(entries)
    store.commit([(position_key(p), encode_u64(o)) for p, o in positions.items()])
    log.info("changelog re-seeded with %d entries", len(entries))


def _start_point(conn: KafkaConnection, store: Store, topic: str, checkpoint_dir: Path,
                 partitions: list[int]) -> StartPoint:
    consumer = conn.consumer()
    try:
        earliest = {p: low for p, (low, _) in end_offsets(consumer, topic, partitions).items()}
    finally:
        consumer.close()
    store_offsets = decode_entries(store.scan(offset_prefix(topic))).next_offsets(topic)
    checkpoint = checkpoint_resume_offsets(checkpoint_dir, topic)
    start = choose_start(topic, partitions, store_offsets, earliest, checkpoint)
    if checkpoint is not None and not start.use_checkpoint:
        log.warning(start.reason)
        shutil.rmtree(checkpoint_dir)
    return start


def _pin_latest(conn: KafkaConnection, store: Store, changelog: ChangelogWriter, topic: str,
                partitions: list[int]) -> None:
    """A brand-new store that starts at the latest offsets records them first, so that a
    partition without data until a restart is not read from its beginning then."""
    if decode_entries(store.scan(offset_prefix(topic))).next_offsets(topic):
        return
    consumer = conn.consumer()
    try:
        ends = {p: high for p, (_, high) in end_offsets(consumer, topic, partitions).items()}
    finally:
        consumer.close()
    seq = max(decode_entries(store.scan(commit_prefix())).commits.values(), default=0) + 1
    entries: list[Entry] = [(offset_key(topic, p), encode_u64(o)) for p, o in sorted(ends.items())]
    entries += changelog.commit_markers(seq)
    positions = changelog.publish(entries)
    store.commit(entries + [(position_key(p), encode_u64(o)) for p, o in positions.items()])
    log.info("new store: starting %s at its latest offsets %s", topic, ends)


# A task's last poll leaves a fetch for the next offsets in flight, which the broker holds
# for fetch.max.wait.ms (500 ms by default) when nothing new has arrived; the next batch's
# task on that partition then waits for it. At a low input rate that made every other
# batch half a second slower. A `java.fetch.max.wait.ms` line in --kafka-config overrides.
SOURCE_DEFAULTS = {"kafka.fetch.max.wait.ms": "20"}


def _start_query(spark: SparkSession, p: Pipeline, cfg: RunConfig, sink: BatchSink,
                 start: StartPoint) -> StreamingQuery:
    reader = (spark.readStream.format("kafka").options(**SOURCE_DEFAULTS).options(**cfg.conn.spark_options())
              .option("subscribe", p.input_topic).options(**p.reader_options))
    offsets = start.starting_offsets_json()
    if offsets is not None:
        reader = reader.option("startingOffsets", offsets)
    if cfg.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger))
    writer = (reader.load().writeStream.queryName(p.name).foreachBatch(sink)
              .option("checkpointLocation", str(cfg.checkpoint_dir)))
    if cfg.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{int(cfg.trigger_s * 1000)} milliseconds")
    return writer.start()


def _wait(query: StreamingQuery) -> str | None:
    """Block until a signal, the end of an available-now run, or a failure (returned)."""
    from pyspark.errors import StreamingQueryException

    with stop_on_signals() as stop:
        while not stop.is_set():
            try:
                if query.awaitTermination(1):
                    return None
            except StreamingQueryException as exc:
                if SinkClosed.__name__ in str(exc):
                    return None
                return _first_line(str(exc))
        log.info("stopping: letting the batch in flight finish")
        return None


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("Traceback"):
            return line[:400]
    return "unknown error"


def _jvm_pid(spark: SparkSession) -> int | None:
    proc = getattr(spark.sparkContext._gateway, "proc", None)
    return getattr(proc, "pid", None)
