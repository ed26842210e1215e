"""The input stage of a shuffle: a foreachBatch sink that counts a batch per input
partition and state key on Spark's executors (the wing's ``count``), and hands each task
its share of every input partition the batch read through the repartition topic, in one
transaction with the batch's DLQ records; the parts' input ranges are the stage's progress
(``restorer.repartition``). One batch, in the only safe order:

    1. keep only rows at or above the stage's committed progress
    2. count them per input partition and state key in Spark
    3. one transaction: every task's parts (so the progress), the DLQ records
    4. return, and Spark commits its checkpoint

A batch Spark runs again after its transaction committed (killed before its checkpoint
commit) is filtered away whole by step 1, so the repartition topic holds each input
offset's share once; the tasks' cursors (``restorer.shuffle``) would refuse a share written
twice over other cuts all the same. Each share's range starts where the last committed
share of its input partition ended (``share_ranges``): the shares of one partition follow
each other, as the tasks' rule needs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from restorer.faults import FaultPlan
from restorer.repartition import PartWriter, resume_offsets
from restorer.shuffle import split_batch
from restorer.tasks import BY_WHOLE_KEY, Routing
from service.dlq.records import dlq_records
from service.engine.sink import SinkClosed
from service.engine.start_point import PlannedBatch, planned_batch
from service.records.badrecords import BadRecord
from topics.errors import BrewError
from topics.kafka import KafkaConnection

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass
class StageBatch:
    """What the wing counted of a batch's rows."""

    shares: dict[int, list[tuple[bytes, bytes]]] = field(default_factory=dict)  # partition -> (state key, delta)
    seen: dict[int, int] = field(default_factory=dict)  # partition -> its highest offset among the rows + 1
    bad: list[BadRecord] = field(default_factory=list)


# The wing's count of a batch's rows above the given next offsets (a replay filter).
Count = Callable[["DataFrame", dict[int, int]], StageBatch]


class CheckpointSkipped(BrewError):
    """Spark's checkpoint starts a batch past the stage's committed progress: the offsets
    between were never handed to the tasks."""


def share_ranges(planned: PlannedBatch, progress: Mapping[int, int],
                 ends: Mapping[int, int]) -> dict[int, tuple[int, int]]:
    """Pure: each input partition's range ``[start, end)`` of a batch that moves it to
    ``ends``: from where the stage's last committed share of it ended (``progress``), or,
    for a partition it never handed on, from where Spark planned the batch to start it (0
    when its checkpoint cannot tell); none for a partition it read nothing of. A batch
    planned to start past the progress would skip the offsets between: ``CheckpointSkipped``."""
    starts = planned.start or {}
    out = {}
    for p, end in sorted(ends.items()):
        start = progress.get(p, min(starts.get(p, 0), end))
        if p in progress and starts.get(p, start) > start:
            raise CheckpointSkipped(f"Spark's checkpoint starts input partition {p} at offset {starts[p]}, past "
                                    f"offset {start} where the input stage's last committed batch ended; drop the "
                                    "checkpoint (the stage then starts from its committed progress)")
        if start == end:
            continue  # a partition the batch read nothing of (added under it, still empty): no share
        out[p] = (start, end)
    return out


@dataclass(frozen=True)
class StageOptions:
    conn: KafkaConnection
    input_topic: str
    dlq_topic: str
    checkpoint_dir: Path | None
    dlq_record_bytes: int = 1_000_000
    routing: Routing = BY_WHOLE_KEY
    part_bytes: int = 512 * 1024  # the entries' bytes a part holds at most (``shuffle.cut_share``)


class InputStageSink:
    """The input stage's sink (see the module): one batch at a time, none after ``close``
    or a failure."""

    def __init__(self, writer: PartWriter, count: Count, options: StageOptions, faults: FaultPlan | None = None,
                 on_batch: Callable[[int, StageBatch, int, int], None] | None = None,
                 applied: Mapping[int, int] = MappingProxyType({})) -> None:
        """``applied``: the furthest the tasks' cursors reached on each input partition
        (``repartition.resume_offsets``); ``writer`` started."""
        self.writer, self.count, self.options, self.faults = writer, count, options, faults
        self.on_batch = on_batch  # (batch id, what was counted, tasks, parts), once committed
        self.progress = resume_offsets(options.conn, writer.topic, applied)
        self.batches = 0  # batches committed by this sink
        self.failure: BaseException | None = None
        self._lock = threading.Lock()
        self._closed = False

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        with self._lock:
            if self._closed:
                raise SinkClosed(f"shutting down; batch {batch_id} left for the next start")
            try:
                self._apply(df, batch_id)
            except BaseException as exc:
                self.failure = self.failure or exc
                self._closed = isinstance(exc, BrewError)
                raise

    def close(self) -> None:
        with self._lock:
            self._closed = True

    def _apply(self, df: DataFrame, batch_id: int) -> None:
        o = self.options
        # 1. + 2. Count only what the stage has not handed on yet.
        planned = planned_batch(o.checkpoint_dir, batch_id, o.input_topic)
        batch = StageBatch() if planned.reads_nothing else self.count(df, planned.replay_filter(self.progress))
        ends = planned.ends(batch.seen, self.progress)
        if not ends:
            return
        parts = split_batch(batch.shares, share_ranges(planned, self.progress, ends), self.writer.tasks, o.routing,
                            o.part_bytes)

        # 3. One transaction: the parts (so the progress), the DLQ records.
        reached = self.faults.reached if self.faults is not None else (lambda _point: None)
        bad = dlq_records(o.conn, o.dlq_topic, o.input_topic, batch.bad, o.dlq_record_bytes)
        self.writer.publish(parts, bad, before_commit=lambda: reached("mid-transaction"))
        self.progress.update(ends)
        self.batches += 1
        if self.on_batch is not None:
            self.on_batch(batch_id, batch, self.writer.tasks, sum(map(len, parts.values())))
        reached("after-changelog-commit")
        # 4. Returning lets Spark commit its checkpoint.

