"""drink-count's two sides of a shuffle: its count for the input stage
(``service.shuffle.input_stage``), a batch counted per input partition on Spark's executors
(``aggregate_batch``), each partition's share a (drink's store key, cups added) entry per
drink; and its overlay for the task stage (``service.shuffle.task_stage``), the cups added
to each drink's count."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from restorer.codec import U64_MAX, Entry, decode_u64, encode_u64, meta_key
from restorer.store import Store
from service.drink_count.aggregate import DEFAULT_DLQ_RECORD_BYTES, aggregate_batch
from service.drink_count.counts import BAD_ORDERS, PROCESSED_ORDERS, drink_key
from service.drink_count.sink import checked_sum
from service.records.limits import MAX_NAME_BYTES
from service.shuffle.input_stage import Count, StageBatch
from topics.errors import BrewError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def shares_counter(max_name_bytes: int = MAX_NAME_BYTES, dlq_record_bytes: int = DEFAULT_DLQ_RECORD_BYTES) -> Count:
    def count(df: DataFrame, applied: dict[int, int]) -> StageBatch:
        agg = aggregate_batch(df, applied, max_name_bytes, dlq_record_bytes, by_partition=True)
        shares = {p: [(drink_key(d), _delta(d, n)) for d, n in sorted(deltas.items())]
                  for p, deltas in agg.partition_deltas.items()}
        bad = Counter(b.partition for b in agg.bad)
        # The counters travel like drinks: each partition's good and bad orders, to the
        # counter's task.
        for p in sorted({*agg.partition_orders, *bad}):
            shares.setdefault(p, [])
            if agg.partition_orders.get(p):
                shares[p].append((meta_key(PROCESSED_ORDERS), encode_u64(agg.partition_orders[p])))
            if bad[p]:
                shares[p].append((meta_key(BAD_ORDERS), encode_u64(bad[p])))
        return StageBatch(shares, agg.next_offsets, agg.bad)
    return count


def _delta(drink: str, n: int) -> bytes:
    if n > U64_MAX:
        raise BrewError(f"one batch adds more than 2^64-1 to drink {drink[:40]!r}, the most a count holds; this "
                        "batch was not handed on")
    return encode_u64(n)


def add_shares(store: Store, changes: list[tuple[bytes, bytes]]) -> list[Entry]:
    """Each drink's and counter's absolute count once ``changes`` (its store key, the
    count added) are added."""
    added: dict[bytes, int] = {}
    for key, delta in changes:
        added[key] = added.get(key, 0) + decode_u64(delta)
    current = store.get_u64(list(added))
    out: list[Entry] = []
    for key, n in added.items():
        out.append((key, encode_u64(checked_sum(current.get(key, 0), n, f"{key[:40]!r}"))))
    return out
