"""The drink-count foreachBatch sink: one micro-batch, five steps, in the only safe order.

    1. keep only rows at or above the next offsets the store has applied
    2. parse and count them in Spark; only per-drink totals reach the driver
    3. one Kafka transaction: new absolute counts, offsets, counters, markers, DLQ
    4. one synced RocksDB WriteBatch with the same entries and the changelog positions
    5. return, and Spark commits its checkpoint

A crash between any two steps is repaired by the next start: the store catches up from
the changelog (3 done, 4 not), or the replayed batch is filtered away by step 1 (4
done, 5 not). Changelog values are absolute, so writing one twice is harmless. Why this
order is the only safe one: ``restorer``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from restorer.changelog import ChangelogWriter
from restorer.codec import U64_MAX, Entry, encode_u64, meta_key, offset_key
from restorer.faults import FaultPlan
from restorer.store import Store
from service.dlq.records import dlq_records
from service.drink_count.aggregate import BatchAggregate, aggregate_batch
from service.drink_count.counts import BAD_ORDERS, PROCESSED_ORDERS, drink_key
from service.engine.sink import OrderedCommitSink, PhaseTimes, SinkOptions
from topics.errors import BrewError
from topics.kafka import KafkaConnection

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


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


class DrinkCountSink(OrderedCommitSink):
    def __init__(self, store: Store, changelog: ChangelogWriter, input_topic: str, dlq_topic: str,
                 faults: FaultPlan, on_batch: Callable[[BatchReport], None] | None = None,
                 options: SinkOptions | None = None) -> None:
        super().__init__(store, changelog, faults, options)
        self.input_topic = input_topic
        self.dlq_topic = dlq_topic
        self.on_batch = on_batch

    def _apply(self, df: DataFrame, batch_id: int) -> None:
        t0 = time.monotonic()
        opts = self.options or SinkOptions(KafkaConnection())
        # 1. + 2. Count only what the store has not applied yet.
        applied = self.store.next_offsets(self.input_topic)
        planned = self.planned(batch_id, self.input_topic)
        if planned.reads_nothing:
            agg = BatchAggregate()  # its offsets, if new to the store, are still recorded below
        else:
            agg = aggregate_batch(df, planned.replay_filter(applied), opts.max_name_bytes, opts.dlq_record_bytes)
        agg.next_offsets = planned.ends(agg.next_offsets, applied)
        if agg.is_empty:
            return
        aggregate_s = time.monotonic() - t0

        # 3. + 4. One transaction, then one WriteBatch.
        bad = dlq_records(opts.conn, self.dlq_topic, self.input_topic, agg.bad, opts.dlq_record_bytes)
        entries, times = self._commit(self._entries(agg), bad, aggregate_s)

        # 5. Returning lets Spark commit its checkpoint.
        if self.on_batch is not None:
            self.on_batch(BatchReport(batch_id, self.seq, agg.good_orders, Counter(b.reason for b in agg.bad),
                                      len(agg.deltas), len(entries), times))

    def _entries(self, agg: BatchAggregate) -> list[Entry]:
        """Absolute new values for everything the batch changes (the seed's overlay)."""
        keys = [drink_key(d) for d in agg.deltas]
        counters = [meta_key(PROCESSED_ORDERS), meta_key(BAD_ORDERS)]
        current = self.store.get_u64(keys + counters)
        entries: list[Entry] = []
        for (drink, delta), key in zip(agg.deltas.items(), keys, strict=True):
            entries.append((key, encode_u64(checked_sum(current.get(key, 0), delta, f"drink {drink[:40]!r}"))))
        entries += [(offset_key(self.input_topic, p), encode_u64(o)) for p, o in sorted(agg.next_offsets.items())]
        entries += [
            (counters[0], encode_u64(checked_sum(current.get(counters[0], 0), agg.good_orders, "processed_orders"))),
            (counters[1], encode_u64(checked_sum(current.get(counters[1], 0), len(agg.bad), "bad_orders"))),
        ]
        return entries


def checked_sum(current: int, delta: int, what: str) -> int:
    total = current + delta
    if total > U64_MAX:
        raise BrewError(f"the count of {what} would pass 2^64-1, the most the store and the changelog hold; "
                        "this batch was not applied")
    return total
