"""The input stage as the active instance runs it beside the pipeline's own query
(``engine.contract.InputStage``): a writer that fences the last one, the stage's sink, and
a query over the source topic with a checkpoint of its own.

Where it starts: its committed progress (``repartition.resume_offsets``: the parts it
handed on, or where the tasks' cursors reached). A store counted without the shuffle until
now holds every task's offsets alike (``codec.spread_offsets``), so its first shares start
exactly where each task's cursor stands, and nothing is counted twice or skipped across
the switch.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from functools import partial
from typing import TYPE_CHECKING

from restorer.repartition import PartWriter, purge
from restorer.store import Store
from restorer.tasks import BY_WHOLE_KEY, Routing
from service.engine.contract import RunConfig
from service.engine.input_guard import lost_input
from service.engine.outage import query_failed_on_kafka
from service.engine.query import failure_line, start_point, start_query, stop_quietly
from service.ops.metrics import Metrics
from service.shuffle.input_stage import Count, InputStageSink, StageBatch, StageOptions
from topics.errors import BrewError, KafkaUnavailable
from topics.kafka import KafkaConnection, partitions_of

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger("brewstream")

# The stage's Spark checkpoint, inside the pipeline's checkpoint dir (whose drops delete
# Spark's own entries only: ``engine.checkpoint_dir``).
STAGE_CHECKPOINT = "input-stage"
# How often the applied parts are purged: a batch's parts are a few records, so a
# delete request every few seconds keeps the topic short at no cost to the batches.
PURGE_EVERY_S = 5.0
STAGE_LINE = "input stage batch %d: %d entries handed on to %d tasks in %d parts, %d bad"


class InputStageRun:
    """One active spell's input stage (see the module)."""

    def __init__(self, cfg: RunConfig, source_topic: str, repartition_topic: str, dlq_topic: str, count: Count,
                 record_bytes: int, routing: Routing = BY_WHOLE_KEY) -> None:
        self.cfg, self.source_topic, self.repartition_topic = cfg, source_topic, repartition_topic
        self.dlq_topic, self.count, self.record_bytes, self.routing = dlq_topic, count, record_bytes, routing
        self.checkpoint = cfg.checkpoint_dir / STAGE_CHECKPOINT
        self._writer: PartWriter | None = None
        self._sink: InputStageSink | None = None
        self._query: StreamingQuery | None = None
        self._purger: Purger | None = None
        self._ended = False  # an available-now run handed on its whole backlog

    def start(self, spark: SparkSession, store: Store, metrics: Metrics | None = None) -> None:
        conn = self.cfg.conn
        partitions = partitions_of(conn, self.source_topic)
        self._writer = PartWriter(conn, self.repartition_topic, len(partitions_of(conn, self.repartition_topic)),
                                  self.record_bytes)
        self._writer.start()  # fences the last input stage; its open transaction is aborted
        options = StageOptions(conn, self.source_topic, self.dlq_topic, self.checkpoint, self.record_bytes,
                               self.routing)
        self._sink = InputStageSink(self._writer, self.count, options,
                                    on_batch=partial(_said, metrics),
                                    applied=store.furthest_offsets(self.source_topic))
        applied = dict(self._sink.progress)
        # Input lost before it was handed on: ``engine.input_guard``'s rule. Offsets that
        # restarted below the progress are refused either way: a task's cursor cannot
        # follow them back.
        checked = lost_input(conn, store, self.source_topic, applied, self.cfg.accept_input_loss, metrics,
                             pending="the input stage handed on",
                             reset_refusal="the tasks cannot count it again through the shuffle: count it under "
                                           "new topics (--topic-prefix)")
        for gap in checked.gaps:
            # What was lost is skipped: the next shares start at the first offset left, and
            # each task's cursor takes a share that starts past it (``shuffle.Cursor.admit``).
            applied[gap.partition] = self._sink.progress[gap.partition] = gap.low
        if checked.identity is not None:
            store.commit([checked.identity])
        start = start_point(conn, applied, self.source_topic, self.checkpoint, partitions,
                            earliest=checked.earliest, what="input stage")
        log.info("input stage: %s -> %s; %s", self.source_topic, self.repartition_topic, start.reason)
        self._query = start_query(spark, self.source_topic, self.cfg, self._sink, start, self.checkpoint,
                                  STAGE_CHECKPOINT)
        self._purger = Purger(conn, self.repartition_topic, store)
        self._purger.start()

    def run_to_end(self, stop: threading.Event) -> None:
        assert self._query is not None
        while not stop.is_set():
            self.check()
            if self._await(0.25):
                self.check()
                self._ended = True
                return

    def check(self) -> None:
        sink, query = self._sink, self._query
        assert sink is not None and query is not None
        if isinstance(sink.failure, BrewError):
            raise sink.failure  # its own refusal says what happened and what to do
        if self._ended or not self._ended_now():
            return
        text = str(query.exception() or "") or (str(sink.failure) if sink.failure is not None else "")
        if not text:
            if self.cfg.available_now:
                return
            raise BrewError("the input stage's query stopped by itself; start brewstream again to continue")
        line = failure_line(text)
        if query_failed_on_kafka(text):
            raise KafkaUnavailable(f"the input stage's Kafka source failed: {line}")
        raise BrewError(f"the input stage failed: {line}; progress is kept, start brewstream again to continue")

    def _ended_now(self) -> bool:
        from py4j.protocol import Py4JError

        assert self._query is not None
        try:
            return not self._query.isActive
        except (Py4JError, ConnectionError):
            raise BrewError("the input stage: Spark's JVM stopped answering") from None

    def _await(self, timeout_s: float) -> bool:
        """Whether its query has ended (with a failure or not) within ``timeout_s``."""
        from py4j.protocol import Py4JError
        from pyspark.errors import StreamingQueryException

        assert self._query is not None
        try:
            return bool(self._query.awaitTermination(timeout_s))  # type: ignore[arg-type] # seconds as a float
        except StreamingQueryException:
            return True
        except (Py4JError, ConnectionError):
            raise BrewError("the input stage: Spark's JVM stopped answering") from None

    def stop(self) -> None:
        """Stop its query, a batch in flight finishing first. What the tasks applied and no
        purge deleted yet is left to the next active's purges."""
        if self._purger is not None:
            self._purger.stop()
        if self._sink is not None:
            self._sink.close()
        if self._query is not None:
            stop_quietly(self._query.stop)
        if self._writer is not None:
            self._writer.close()


class Purger(threading.Thread):
    """Deletes from the repartition topic, every ``every_s``, the parts each task has
    applied: those below the task's repartition offset in the store, which is committed
    after the changelog (``restorer.commit``), so a restored store starts no lower. A purge
    that fails (Kafka's trouble) is tried again the next time; nothing waits on it."""

    def __init__(self, conn: KafkaConnection, topic: str, store: Store, every_s: float = PURGE_EVERY_S) -> None:
        super().__init__(name="repartition-purge", daemon=True)
        self.conn, self.topic, self.store, self.every_s = conn, topic, store, every_s
        self.purged: dict[int, int] = {}  # task -> the offset it was last purged below
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.every_s):
            self.once()

    def once(self) -> None:
        try:
            applied = self.store.next_offsets(self.topic)
            below = {t: o for t, o in applied.items() if o > self.purged.get(t, 0)}
            if below:
                purge(self.conn, self.topic, below)
                self.purged.update(below)
        except Exception as exc:  # Kafka away, the store closed under it: the next time
            log.debug("purging %s: %s: %s", self.topic, type(exc).__name__, exc)

    def stop(self) -> None:
        self._halt.set()



def _said(metrics: Metrics | None, batch_id: int, batch: StageBatch, tasks: int, parts: int) -> None:
    """A committed batch of the stage: its line, and its bad records by reason (the tasks'
    batches know only how many there were)."""
    entries = sum(len(share) for share in batch.shares.values())
    log.info(STAGE_LINE, batch_id, entries, tasks, parts, len(batch.bad))
    if metrics is not None:
        metrics.bad_records(Counter(b.reason for b in batch.bad))
