"""The task stage of a shuffle: a foreachBatch sink over the repartition topic that applies
each task's parts once (``restorer.shuffle``'s rule) and commits the tasks' new values in
the card's order (``restorer.commit``). One batch:

    1. keep only records at or above each task's next repartition offset (in its store)
    2. read them as parts, task by task, in their partition's order; a record that is no
       part (another producer's) goes to the DLQ with the reason, in its task's transaction
    3. admit each part by the task's cursor per input partition, and add up the admitted
       entries into absolute values (the wing's ``overlay``)
    4. one changelog transaction: the values, the cursors and the repartition offsets,
       each task's in its own changelog partition; then the store
    5. return, and Spark commits its checkpoint

The cursors and the repartition offsets are committed with the values (invariant 5 in
``restorer``): a store restored from the changelog knows which parts it holds, so a part
is applied once whether the task stage reads its partition again (a replayed batch, a lost
checkpoint) or the input stage wrote a share again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from restorer.changelog import ChangelogWriter, OutputRecord
from restorer.codec import Entry, encode_u64, task_offset_key, task_part_key
from restorer.faults import FaultPlan
from restorer.repartition import parts_of
from restorer.shuffle import Cursor, admit_all
from restorer.store import Store
from service.dlq.records import source_headers
from service.engine.sink import OrderedCommitSink, PhaseTimes, SinkOptions
from topics.records import fit_record

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("brewstream")

# The DLQ's reason for a record of the repartition topic that is no part (step 2).
NOT_A_PART = "not a part of the input stage"

# The wing's step 3: the store's new absolute values once the admitted entries (a state key
# and its delta, in the order applied) are added to what it holds.
Overlay = Callable[[Store, list[tuple[bytes, bytes]]], list[Entry]]


@dataclass(frozen=True)
class TaskBatch:
    """What one committed batch of the task stage applied."""

    batch_id: int
    seq: int
    parts: int  # admitted
    changes: list[tuple[bytes, bytes]]  # the admitted entries: a state key and its delta
    committed: int  # changelog records
    times: PhaseTimes
    strays: int = 0  # records that were no parts, now in the DLQ


class TaskStageSink(OrderedCommitSink):
    """The task stage's sink (see the module) for the tasks whose repartition partitions
    its query reads."""

    def __init__(self, store: Store, changelog: ChangelogWriter, faults: FaultPlan, options: SinkOptions,
                 repartition_topic: str, input_topic: str, overlay: Overlay, dlq_topic: str,
                 on_batch: Callable[[TaskBatch], None] | None = None) -> None:
        super().__init__(store, changelog, faults, options)
        self.repartition_topic, self.input_topic, self.overlay = repartition_topic, input_topic, overlay
        self.dlq_topic, self.on_batch = dlq_topic, on_batch

    def _apply(self, df: DataFrame, batch_id: int) -> None:
        from service.spark.session import unapplied

        t0 = time.monotonic()
        # 1. + 2. The records no task has applied, as parts per task.
        applied = self.store.next_offsets(self.repartition_topic)
        planned = self.planned(batch_id, self.repartition_topic)
        records: dict[int, list[tuple[int, bytes | None]]] = {}
        keys: dict[tuple[int, int], bytes | None] = {}
        if not planned.reads_nothing:
            rows = unapplied(df, planned.replay_filter(applied)).select("partition", "offset", "key", "value").collect()
            for row in rows:
                records.setdefault(row.partition, []).append((row.offset, row.value))
                keys[(row.partition, row.offset)] = row.key
        seen = {task: max(o for o, _ in rs) + 1 for task, rs in records.items()}
        ends = planned.ends(seen, applied)
        if not ends:
            return

        # 3. Each part admitted once, by the task's cursors.
        entries: list[Entry] = []
        changes: list[tuple[bytes, bytes]] = []
        admitted = 0
        strays: list[OutputRecord] = []
        for task, rs in sorted(records.items()):
            ordered = sorted(rs, key=lambda r: r[0])
            parts, passed = parts_of(ordered)
            values = dict(ordered)
            strays += [self._stray(task, s.offset, s.why, keys[(task, s.offset)], values[s.offset]) for s in passed]
            before = self._cursors(task, {p.partition for p in parts})
            done = admit_all(before, parts)
            admitted += len(done.parts)
            changes += [entry for p in done.parts for entry in p.entries]
            entries += _cursor_entries(self.input_topic, task, before, done.cursors)
        entries += self.overlay(self.store, changes)
        entries += [(task_offset_key(self.repartition_topic, t, t), encode_u64(o)) for t, o in sorted(ends.items())]

        # 4. One transaction, then one WriteBatch.
        committed, times = self._commit(entries, strays, time.monotonic() - t0)
        # 5. Returning lets Spark commit its checkpoint.
        if self.on_batch is not None:
            self.on_batch(TaskBatch(batch_id, self.seq, admitted, changes, len(committed), times, len(strays)))

    def _stray(self, task: int, offset: int, why: str, key: bytes | None, value: bytes | None) -> OutputRecord:
        """The DLQ record of a record on the task's partition that is no part."""
        log.warning("%s[%d] offset %d is no part of the input stage (%s): something else wrote there; it goes to "
                    "the DLQ and the task goes on", self.repartition_topic, task, offset, why)
        headers = source_headers(NOT_A_PART, self.repartition_topic, task, offset)
        key, value, headers = fit_record(key, value, headers, self.options.dlq_record_bytes if self.options else
                                         SinkOptions.dlq_record_bytes)
        return OutputRecord(self.dlq_topic, key, value, headers, task=task)

    def _cursors(self, task: int, partitions: Iterable[int]) -> dict[int, Cursor]:
        """The task's cursors on these input partitions, as its store holds them."""
        partitions = sorted(partitions)
        offsets = [task_offset_key(self.input_topic, p, task) for p in partitions]
        parts = [task_part_key(self.input_topic, p, task) for p in partitions]
        held = self.store.get_u64(offsets + parts)
        return {p: Cursor(held[o], held.get(k, 0))
                for p, o, k in zip(partitions, offsets, parts, strict=True) if o in held}


def _cursor_entries(topic: str, task: int, before: dict[int, Cursor], after: dict[int, Cursor]) -> list[Entry]:
    """The cursors a batch moved, as the task's keys (``restorer.codec``)."""
    return [e for p, c in sorted(after.items()) if before.get(p) != c
            for e in ((task_offset_key(topic, p, task), encode_u64(c.offset)),
                      (task_part_key(topic, p, task), encode_u64(c.part)))]
