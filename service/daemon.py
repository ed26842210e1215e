"""``brewstream run``: the drink-count daemon around the sink.

Start-up order matters: lock the state dir (a second instance stops here, before it can
fence the first), fence older writers of the changelog, bring the store up to date with
the changelog (a full restore when the disk was lost), pick the start point, and only
then start Spark.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from restorer.progress import RestoreProgress
from restorer.reader import ChangelogBehindStore, apply_changelog, pending
from service.board import BoardFlusher
from service.changelog import ChangelogWriter
from service.codec import decode_entries, encode_u64, is_local, offset_prefix, position_key
from service.errors import BrewError
from service.faults import FaultPlan, kill_process_and
from service.kafka import KafkaConnection, end_offsets, partitions_of, require_broker
from service.sink import BatchReport, DrinkCountSink, SinkClosed
from service.start_point import StartPoint, checkpoint_resume_offsets, choose_start
from service.store import StateDir, Store
from topics.catalog import DEFAULT_TOPICS, Topics

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger("brewstream")


@dataclass(frozen=True)
class RunConfig:
    conn: KafkaConnection
    state_dir: Path
    checkpoint_dir: Path
    flush_s: float = 5.0
    top_n: int = 10
    trigger_s: float = 1.0
    max_offsets_per_trigger: int | None = None
    available_now: bool = False
    master: str = "local[*]"
    auto_restore: bool = True
    instance: str | None = None
    topics: Topics = DEFAULT_TOPICS


def transactional_id(state_dir: Path, instance: str | None) -> str:
    """Stable per instance: by default the state dir's name plus a hash of its path."""
    if instance is None:
        path = str(state_dir.resolve())
        instance = f"{state_dir.resolve().name}-{hashlib.sha1(path.encode()).hexdigest()[:8]}"
    return f"brewstream.drink-count.{instance}"


def run(cfg: RunConfig, spark: SparkSession | None = None) -> int:
    """Run until SIGINT/SIGTERM (or the backlog is done with available-now); 0 on a clean stop."""
    conn, topics = cfg.conn, cfg.topics
    require_broker(conn)
    input_partitions = partitions_of(conn, topics.orders)
    changelog_partitions = partitions_of(conn, topics.changelog)
    for topic in (topics.dlq, topics.counts):
        partitions_of(conn, topic)

    with StateDir(cfg.state_dir) as state_dir, Store(state_dir.store_path) as store:
        changelog = ChangelogWriter(conn, topics.changelog, topics.dlq,
                                    transactional_id(cfg.state_dir, cfg.instance), changelog_partitions, topics.orders)
        changelog.start()
        bring_store_up_to_date(conn, store, changelog, cfg.auto_restore)
        start = _start_point(conn, store, topics.orders, cfg.checkpoint_dir, input_partitions)
        log.info("drink-count: input=%s changelog=%s state=%s checkpoint=%s; %s",
                 topics.orders, topics.changelog, cfg.state_dir, cfg.checkpoint_dir, start.reason)

        own_spark = spark is None
        if spark is None:
            from service.spark_session import build_session
            spark = build_session(cfg.master, "brewstream-drink-count")
        faults = FaultPlan.from_env(kill_process_and(_jvm_pid(spark)))
        sink = DrinkCountSink(store, changelog, topics.orders, faults, on_batch=_log_batch)
        board = BoardFlusher(store, conn, topics.counts, cfg.top_n, cfg.flush_s)
        try:
            query = _start_query(spark, cfg, sink, start)
            board.start()
            failure = _wait(query)
            sink.close()  # lets a batch in flight finish; later ones are refused
            query.stop()
            board.stop(final_flush=True)
        finally:
            changelog.close()
            if own_spark:
                spark.stop()
    if failure:
        raise BrewError(f"the drink-count query failed: {failure}; progress is kept, "
                        "run `brewstream run` again to continue")
    return 0


def bring_store_up_to_date(conn: KafkaConnection, store: Store, changelog: ChangelogWriter,
                           auto_restore: bool) -> None:
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
        result = apply_changelog(conn, topic, store)
        if result.records:
            log.info("caught up the store with %d changelog records its last run committed but did not "
                     "store", result.records)
        return
    if not auto_restore:
        raise BrewError(f"the store in {store.path} is empty but the changelog holds data; run "
                        "`brewstream restore` or drop --no-auto-restore")
    log.info("the store is empty: restoring it from %s (partition: (from, to) %s)", topic, todo)
    with RestoreProgress("restore") as progress:
        result = apply_changelog(conn, topic, store, on_progress=progress.update)
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


def _start_query(spark: SparkSession, cfg: RunConfig, sink: DrinkCountSink, start: StartPoint) -> StreamingQuery:
    reader = (spark.readStream.format("kafka").options(**cfg.conn.spark_options())
              .option("subscribe", cfg.topics.orders))
    offsets = start.starting_offsets_json()
    if offsets is not None:
        reader = reader.option("startingOffsets", offsets)
    if cfg.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger))
    writer = (reader.load().writeStream.queryName("drink-count").foreachBatch(sink)
              .option("checkpointLocation", str(cfg.checkpoint_dir)))
    if cfg.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{int(cfg.trigger_s * 1000)} milliseconds")
    return writer.start()


def _wait(query: StreamingQuery) -> str | None:
    """Block until a signal, the end of an available-now run, or a failure (returned)."""
    from pyspark.errors import StreamingQueryException

    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
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
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("Traceback"):
            return line[:400]
    return "unknown error"


def _jvm_pid(spark: SparkSession) -> int | None:
    proc = getattr(spark.sparkContext._gateway, "proc", None)
    return getattr(proc, "pid", None)


def _log_batch(r: BatchReport) -> None:
    log.info("batch %d (seq %d): orders=%d bad=%d drinks=%d | aggregate %.2fs changelog %.3fs store %.3fs",
             r.batch_id, r.seq, r.orders, r.bad, r.drinks_changed, r.aggregate_s, r.changelog_s, r.store_s)
