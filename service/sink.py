"""The drink-count foreachBatch sink: one micro-batch, five steps, in the only safe order.

    1. keep only rows at or above the next offsets the store has applied
    2. parse and count them in Spark; only per-drink totals reach the driver
    3. one Kafka transaction: new absolute counts, offsets, counters, markers, DLQ
    4. one synced RocksDB WriteBatch with the same entries and the changelog positions
    5. return, and Spark commits its checkpoint

A crash between any two steps is repaired by the next start: the store catches up from
the changelog (3 done, 4 not), or the replayed batch is filtered away by step 1 (4
done, 5 not). Changelog values are absolute, so writing one twice is harmless.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from restorer.integrity import shape_message
from service.aggregate import BatchAggregate, aggregate_batch
from service.changelog import ChangelogWriter, OutputRecord
from service.codec import (
    BAD_ORDERS,
    CHANGELOG_PARTITIONS,
    CHANGELOG_TOPIC_ID,
    LAST_BATCH_MS,
    PROCESSED_ORDERS,
    U64_MAX,
    Entry,
    drink_key,
    encode_u64,
    is_local,
    local_key,
    meta_key,
    offset_key,
    position_key,
)
from service.dlq import dlq_records
from service.errors import BrewError, Fenced, SinkClosed
from service.faults import FaultPlan
from service.kafka import KafkaConnection
from service.limits import MAX_NAME_BYTES
from service.start_point import batch_end_offsets
from service.store import Store

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("brewstream")


class ChangelogShapeChanged(BrewError):
    """The changelog's partition count is not the one the store was built against."""


@dataclass(frozen=True)
class Committed:
    seq: int
    entries: list[Entry]  # the batch's entries with the markers
    changelog_s: float
    store_s: float


def commit_batch(store: Store, changelog: ChangelogWriter, entries: list[Entry],
                 outputs: Iterable[OutputRecord] = (), faults: FaultPlan | None = None,
                 republish: bool = False, local: Iterable[Entry] = ()) -> Committed:
    """3. + 4. for one batch, the only way anything reaches the changelog and the store.

    Before the transaction, the changelog's shape is checked against the one the store
    recorded: a partition count that changed stops here (``ChangelogShapeChanged``), and
    a topic id that changed (the changelog was deleted and re-created) makes this
    transaction carry the whole store, so the new changelog is complete again
    (``republish`` asks for that in any case). ``local`` entries go to the store only.
    """
    t0 = time.monotonic()
    shape = changelog.shape()
    built = store.local(CHANGELOG_PARTITIONS)
    if shape.partitions != len(changelog.partitions) or (built is not None and int(built) != shape.partitions):
        raise ChangelogShapeChanged(shape_message(changelog.topic, shape.partitions,
                                                  int(built) if built else len(changelog.partitions)))
    recorded = store.local(CHANGELOG_TOPIC_ID)
    seq = store.last_seq() + 1
    entries = [*entries, *changelog.markers(seq)]
    published = entries
    recreated = recorded is not None and recorded.decode() != shape.topic_id
    if recreated:
        log.warning("changelog %s was deleted and re-created (topic id %s, was %s): publishing the whole store "
                    "to it again", changelog.topic, shape.topic_id, recorded.decode() if recorded else "-")
    if recreated or republish:
        batch = dict(entries)
        published = [(k, v) for k, v in store.items() if not is_local(k) and k not in batch] + entries

    # 3. Changelog entries and output records: all visible together, or not at all.
    reached = faults.reached if faults is not None else (lambda _point: None)
    positions = changelog.publish(published, outputs, before_commit=lambda: reached("mid-transaction"))
    reached("after-changelog-commit")
    t1 = time.monotonic()

    # 4. The same entries locally, with how far into the changelog they reach and the
    # changelog's identity they were published to.
    store.commit(entries + [(position_key(p), encode_u64(o)) for p, o in positions.items()] + [
        (local_key(CHANGELOG_TOPIC_ID), shape.topic_id.encode()),
        (local_key(CHANGELOG_PARTITIONS), str(shape.partitions).encode()),
        *local,
    ])
    reached("after-store-commit")
    return Committed(seq, entries, t1 - t0, time.monotonic() - t1)


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


@dataclass(frozen=True)
class SinkOptions:
    """What a sink needs beyond the store and the changelog."""

    conn: KafkaConnection
    checkpoint_dir: Path | None = None  # where Spark logs each batch's planned end offsets
    max_name_bytes: int = MAX_NAME_BYTES
    dlq_record_bytes: int = 1_000_000


class OrderedCommitSink:
    """What every pipeline's sink shares: one batch at a time, none after ``close`` or a
    failure, and steps 3 and 4 in the only safe order, with the fault points between them."""

    def __init__(self, store: Store, changelog: ChangelogWriter, faults: FaultPlan,
                 options: SinkOptions | None = None) -> None:
        self.store = store
        self.changelog = changelog
        self.faults = faults
        self.options = options
        self.seq = store.last_seq()
        self.failure: BaseException | None = None  # what stopped this sink, for a one-line error
        self._lock = threading.Lock()
        self._closed = False

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        with self._lock:
            if self._closed:
                raise SinkClosed(f"shutting down; batch {batch_id} left for the next start")
            try:
                self._apply(df, batch_id)
            except BaseException as exc:
                self._failed(exc)
                raise

    def close(self) -> None:
        """Wait for the batch in flight, then refuse new ones."""
        with self._lock:
            self._closed = True

    @property
    def fenced(self) -> bool:
        return isinstance(self.failure, Fenced)

    def _failed(self, exc: BaseException) -> None:
        # A fenced instance never commits again, and none of our own refusals (a full disk,
        # a changed changelog) may let a later batch slip in before the query stops. A
        # Spark job that failed inside the batch fails the query by itself; the runner may
        # start it again (``retry``).
        if self.failure is None:
            self.failure = exc
        if isinstance(exc, BrewError):
            self._closed = True

    def retry(self) -> None:
        """Take batches again after a failure the runner decided to start over from."""
        with self._lock:
            if not isinstance(self.failure, BrewError):
                self.failure = None

    def _apply(self, df: DataFrame, batch_id: int) -> None:
        raise NotImplementedError

    def batch_ends(self, batch_id: int, topic: str, seen: Mapping[int, int],
                   applied: Mapping[int, int]) -> dict[int, int]:
        """The next offsets this batch brings each partition to, where it moves them.

        Spark planned the batch up to offsets it logged before running it; those can lie
        beyond the last row (transaction markers, aborted records), and recording them
        keeps the store's offsets equal to Spark's.
        """
        planned = (batch_end_offsets(self.options.checkpoint_dir, batch_id, topic)
                   if self.options is not None and self.options.checkpoint_dir is not None else None) or {}
        ends = {p: max(seen.get(p, 0), planned.get(p, 0)) for p in {*seen, *planned}}
        return {p: o for p, o in ends.items() if o > applied.get(p, -1)}

    def _commit(self, entries: list[Entry], outputs: Iterable[OutputRecord],
                aggregate_s: float) -> tuple[list[Entry], PhaseTimes]:
        """3. + 4. for one batch: returns the entries committed and the time of each step."""
        entries = [*entries, (meta_key(LAST_BATCH_MS), encode_u64(int(time.time() * 1000)))]
        done = commit_batch(self.store, self.changelog, entries, outputs, self.faults)
        self.seq = done.seq
        return done.entries, PhaseTimes(aggregate_s, done.changelog_s, done.store_s)


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
        agg = aggregate_batch(df, applied, opts.max_name_bytes, opts.dlq_record_bytes)
        agg.next_offsets = self.batch_ends(batch_id, self.input_topic, agg.next_offsets, applied)
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
            entries.append((key, encode_u64(_checked_sum(current.get(key, 0), delta, f"drink {drink[:40]!r}"))))
        entries += [(offset_key(self.input_topic, p), encode_u64(o)) for p, o in sorted(agg.next_offsets.items())]
        entries += [
            (counters[0], encode_u64(_checked_sum(current.get(counters[0], 0), agg.good_orders, "processed_orders"))),
            (counters[1], encode_u64(_checked_sum(current.get(counters[1], 0), len(agg.bad), "bad_orders"))),
        ]
        return entries


def _checked_sum(current: int, delta: int, what: str) -> int:
    total = current + delta
    if total > U64_MAX:
        raise BrewError(f"the count of {what} would pass 2^64-1, the most the store and the changelog hold; "
                        "this batch was not applied")
    return total
