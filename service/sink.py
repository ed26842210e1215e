"""The drink-count foreachBatch sink: one micro-batch, five steps, in the only safe order.

    1. keep only rows at or above the next offsets the store has applied
    2. parse and count them in Spark; only per-drink totals reach the driver
    3. one Kafka transaction: new absolute counts, offsets, counters, commit markers, DLQ
    4. one synced RocksDB WriteBatch with the same entries and the changelog positions
    5. return, and Spark commits its checkpoint

A crash between any two steps is repaired by the next start: the store catches up from
the changelog (3 done, 4 not), or the replayed batch is filtered away by step 1 (4
done, 5 not). Changelog values are absolute, so writing one twice is harmless.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from service.aggregate import BatchAggregate, aggregate_batch
from service.changelog import ChangelogWriter, OutputRecord, dlq_records
from service.codec import (
    BAD_ORDERS,
    LAST_BATCH_MS,
    PROCESSED_ORDERS,
    Entry,
    commit_prefix,
    decode_entries,
    drink_key,
    encode_u64,
    meta_key,
    offset_key,
    offset_prefix,
    position_key,
)
from service.errors import SinkClosed
from service.faults import FaultPlan
from service.store import Store

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass(frozen=True)
class PhaseTimes:
    """Seconds one batch spent counting in Spark, in the transaction and in the store."""

    aggregate_s: float
    changelog_s: float
    store_s: float

    def phases(self) -> dict[str, float]:
        return {"aggregate": self.aggregate_s, "changelog": self.changelog_s, "store": self.store_s}

    def fields(self) -> dict[str, float]:
        """For structured logs: ``aggregate_s``, ``changelog_s``, ``store_s``."""
        return {f"{phase}_s": round(seconds, 4) for phase, seconds in self.phases().items()}

    def __str__(self) -> str:
        return f"aggregate {self.aggregate_s:.2f}s changelog {self.changelog_s:.3f}s store {self.store_s:.3f}s"


@dataclass(frozen=True)
class BatchReport:
    batch_id: int
    seq: int
    orders: int
    bad_reasons: dict[str, int]
    drinks_changed: int
    changelog_records: int
    times: PhaseTimes

    @property
    def bad(self) -> int:
        return sum(self.bad_reasons.values())


class OrderedCommitSink:
    """What every pipeline's sink shares: one batch at a time, none after ``close``, and
    steps 3 and 4 in the only safe order, with the fault points between them."""

    def __init__(self, store: Store, changelog: ChangelogWriter, faults: FaultPlan) -> None:
        self.store = store
        self.changelog = changelog
        self.faults = faults
        self.seq = max(decode_entries(store.scan(commit_prefix())).commits.values(), default=0)
        self._lock = threading.Lock()
        self._closed = False

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        with self._lock:
            if self._closed:
                raise SinkClosed(f"shutting down; batch {batch_id} left for the next start")
            self._apply(df, batch_id)

    def close(self) -> None:
        """Wait for the batch in flight, then refuse new ones."""
        with self._lock:
            self._closed = True

    def _apply(self, df: DataFrame, batch_id: int) -> None:
        raise NotImplementedError

    def _commit(self, entries: list[Entry], outputs: list[OutputRecord],
                aggregate_s: float) -> tuple[list[Entry], PhaseTimes]:
        """3. + 4. for one batch: returns the entries committed and the time of each step."""
        t0 = time.monotonic()
        seq = self.seq + 1
        entries = [*entries, (meta_key(LAST_BATCH_MS), encode_u64(int(time.time() * 1000))),
                   *self.changelog.commit_markers(seq)]

        # 3. Changelog entries and output records: all visible together, or not at all.
        positions = self.changelog.publish(entries, outputs,
                                           before_commit=lambda: self.faults.reached("mid-transaction"))
        self.faults.reached("after-changelog-commit")
        t1 = time.monotonic()

        # 4. The same entries locally, with how far into the changelog they reach.
        self.store.commit(entries + [(position_key(p), encode_u64(o)) for p, o in positions.items()])
        self.faults.reached("after-store-commit")
        self.seq = seq
        return entries, PhaseTimes(aggregate_s, t1 - t0, time.monotonic() - t1)


class DrinkCountSink(OrderedCommitSink):
    def __init__(self, store: Store, changelog: ChangelogWriter, input_topic: str, dlq_topic: str,
                 faults: FaultPlan, on_batch: Callable[[BatchReport], None] | None = None) -> None:
        super().__init__(store, changelog, faults)
        self.input_topic = input_topic
        self.dlq_topic = dlq_topic
        self.on_batch = on_batch

    def _apply(self, df: DataFrame, batch_id: int) -> None:
        t0 = time.monotonic()
        # 1. + 2. Count only what the store has not applied yet.
        applied = decode_entries(self.store.scan(offset_prefix(self.input_topic))).next_offsets(self.input_topic)
        agg = aggregate_batch(df, applied)
        if agg.is_empty:
            return
        aggregate_s = time.monotonic() - t0

        # 3. + 4. One transaction, then one WriteBatch.
        entries, times = self._commit(
            self._entries(agg), dlq_records(self.dlq_topic, self.input_topic, agg.bad), aggregate_s)

        # 5. Returning lets Spark commit its checkpoint.
        if self.on_batch is not None:
            self.on_batch(BatchReport(batch_id, self.seq, agg.good_orders, Counter(b.reason for b in agg.bad),
                                      len(agg.deltas), len(entries), times))

    def _entries(self, agg: BatchAggregate) -> list[Entry]:
        """Absolute new values for everything the batch changes (the seed's overlay)."""
        keys = [drink_key(d) for d in agg.deltas]
        counters = [meta_key(PROCESSED_ORDERS), meta_key(BAD_ORDERS)]
        current = self.store.get_u64(keys + counters)
        entries: list[Entry] = [
            (key, encode_u64(current.get(key, 0) + delta)) for key, delta in zip(keys, agg.deltas.values(), strict=True)
        ]
        entries += [(offset_key(self.input_topic, p), encode_u64(o)) for p, o in sorted(agg.next_offsets.items())]
        entries += [
            (counters[0], encode_u64(current.get(counters[0], 0) + agg.good_orders)),
            (counters[1], encode_u64(current.get(counters[1], 0) + len(agg.bad))),
        ]
        return entries
