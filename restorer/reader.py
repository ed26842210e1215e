"""Apply the changelog to a store, from the store's positions up to the end offsets.

The reader joins no consumer group and reads with isolation.level=read_committed, so
it sees whole transactions only and the end offset of each partition is its last
stable offset. It stops on the consumer's *position* reaching the end, never on a
record at end-1: transaction markers and compaction leave gaps in the offsets.

From position 0 this is a full restore after disk loss; from the positions a store
already holds it is the catch-up that runs before every start. Either way the result
lands in one synced WriteBatch, together with the new positions, so a reader killed
half-way leaves the store as it was.

Every transaction writes a commit marker with its sequence number to every changelog
partition. The end offsets of different partitions are read at slightly different
moments, so while a writer is committing, a cut could hold half a transaction; equal
markers in every partition prove the cut is whole, and a short wait for fresh end
offsets fixes a cut that is not.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, TopicPartition

from service.codec import (
    U64_LEN,
    Entry,
    commit_prefix,
    decode_entries,
    encode_u64,
    is_local,
    position_key,
    position_prefix,
)
from service.errors import BrewError
from service.kafka import KafkaConnection, end_offsets, partitions_of
from service.store import Store

POLL_BATCH = 10_000
CONSISTENT_CUT_TIMEOUT_S = 30.0

# (partition, start, position, end) after each poll; the CLI turns it into progress bars.
ProgressFn = Callable[[int, int, int, int], None]
# Why a changelog value cannot belong to its key, or None; each store has its own.
ValueCheck = Callable[[bytes, bytes], "str | None"]


def check_count(key: bytes, value: bytes) -> str | None:
    """The drink-count store: every value is an 8-byte count."""
    return None if len(value) == U64_LEN else f"{len(value)}-byte value; expected {U64_LEN}"


class ChangelogBehindStore(BrewError):
    """The changelog ends before what the store has applied: it was deleted or recreated."""


@dataclass(frozen=True)
class RestoreResult:
    records: int
    keys: int
    partitions: int
    seconds: float
    start: dict[int, int]
    end: dict[int, int]

    def summary(self) -> str:
        return (f"restore done: records={self.records} keys={self.keys} "
                f"partitions={self.partitions} in {self.seconds:.1f} s")


def pending(conn: KafkaConnection, topic: str, store: Store) -> dict[int, tuple[int, int]]:
    """(position, end) of each changelog partition the store has not fully applied."""
    partitions = partitions_of(conn, topic)
    start = _positions(store)
    consumer = _reader(conn)
    try:
        ends = _ends(consumer, topic, partitions, start)
    finally:
        consumer.close()
    return {p: (start.get(p, 0), e) for p, e in ends.items() if start.get(p, 0) < e}


def apply_changelog(conn: KafkaConnection, topic: str, store: Store,
                    on_progress: ProgressFn | None = None, check_value: ValueCheck = check_count,
                    cut_timeout: float = CONSISTENT_CUT_TIMEOUT_S) -> RestoreResult:
    """Read every partition from the store's position to its end and apply it, atomically."""
    started = time.monotonic()
    partitions = partitions_of(conn, topic)
    positions = _positions(store)
    start = {p: positions.get(p, 0) for p in partitions}
    consumer = _reader(conn)
    latest: dict[bytes, bytes | None] = {}
    records = 0

    def report(partition: int, position: int, end: int) -> None:
        if on_progress is not None:
            on_progress(partition, start[partition], position, end)

    try:
        ends = _ends(consumer, topic, partitions, start)
        reached = dict(start)
        deadline = time.monotonic() + cut_timeout
        while True:
            records += _read_until(consumer, topic, reached, ends, latest, check_value, report)
            split = _split_transaction(store, latest)
            if split is None:
                break
            if time.monotonic() > deadline:
                raise BrewError(
                    f"changelog {topic} does not settle on one committed batch (commit markers per "
                    f"partition: {split}); is another writer committing to it? try again"
                )
            time.sleep(0.2)
            ends = _ends(consumer, topic, partitions, reached)
    finally:
        consumer.close()
    entries: list[Entry] = list(latest.items())
    entries += [(position_key(p), encode_u64(e)) for p, e in reached.items() if e > start[p]]
    store.commit(entries)
    return RestoreResult(records, len(latest), len(partitions), time.monotonic() - started, start, reached)


def _reader(conn: KafkaConnection) -> Consumer:
    return conn.consumer({
        "isolation.level": "read_committed",
        "fetch.max.bytes": 64 * 1024 * 1024,
        # librdkafka stops fetching a partition for this long whenever its local queue is
        # full; the 1 s default leaves a restore idle most of the time.
        "fetch.queue.backoff.ms": 10,
        "queued.min.messages": 500_000,
    })


def _positions(store: Store) -> dict[int, int]:
    return decode_entries(store.scan(position_prefix())).positions


def _ends(consumer: Consumer, topic: str, partitions: list[int], start: dict[int, int]) -> dict[int, int]:
    """End offsets (LSOs); a changelog that ends before the store's positions is an error."""
    ends = {p: high for p, (_, high) in end_offsets(consumer, topic, partitions).items()}
    behind = {p: (start.get(p, 0), e) for p, e in ends.items() if e < start.get(p, 0)}
    if behind:
        raise ChangelogBehindStore(
            f"changelog {topic} ends before what the store has applied (position, end: {behind}); "
            "it was deleted or recreated"
        )
    return ends


def _read_until(consumer: Consumer, topic: str, reached: dict[int, int], ends: dict[int, int],
                latest: dict[bytes, bytes | None], check_value: ValueCheck,
                report: Callable[[int, int, int], None]) -> int:
    """Consume each partition from ``reached`` to ``ends``; keep the last value per key."""
    todo = {p for p, e in ends.items() if reached[p] < e}
    if not todo:
        return 0
    consumer.assign([TopicPartition(topic, p, reached[p]) for p in sorted(todo)])
    records = 0
    while todo:
        try:
            messages = consumer.consume(num_messages=POLL_BATCH, timeout=0.5)
        except KafkaException as exc:
            raise BrewError(f"reading changelog {topic} failed: {exc.args[0].str()}") from None
        for msg in messages:
            err = msg.error()
            if err is not None:
                raise BrewError(f"reading changelog {topic} failed: {err.str()}")
            p, offset, key = msg.partition() or 0, msg.offset() or 0, msg.key()
            if offset >= ends[p]:
                continue  # newer than the cut; a later run applies it
            key = _checked_key(topic, p, offset, key, msg.value(), check_value)
            latest[key] = msg.value() or None
            records += 1
        done = []
        for tp in consumer.position([TopicPartition(topic, p) for p in sorted(todo)]):
            reached[tp.partition] = min(max(tp.offset, reached[tp.partition]), ends[tp.partition])
            if tp.offset >= ends[tp.partition]:
                reached[tp.partition] = ends[tp.partition]
                done.append(tp.partition)
            report(tp.partition, reached[tp.partition], ends[tp.partition])
        if done:
            consumer.pause([TopicPartition(topic, p) for p in done])
            todo.difference_update(done)
    consumer.unassign()
    return records


def _checked_key(topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
                 check_value: ValueCheck) -> bytes:
    if key is None:
        raise BrewError(f"changelog record {topic}[{partition}]@{offset} has no key; "
                        "the changelog is not brewstream's")
    if is_local(key):
        raise BrewError(f"changelog record {topic}[{partition}]@{offset} carries a store-local key {key!r}")
    problem = check_value(key, value) if value else None
    if problem:
        raise BrewError(f"changelog record {topic}[{partition}]@{offset} does not belong to this store: {problem}")
    return key


def _split_transaction(store: Store, latest: dict[bytes, bytes | None]) -> dict[int, int] | None:
    """The commit marker of each partition, when they do not all name the same batch."""
    commits = decode_entries(store.scan(commit_prefix())).commits
    commits.update(decode_entries(
        (k, v) for k, v in latest.items() if v is not None and k.startswith(commit_prefix())
    ).commits)
    return commits if len(set(commits.values())) > 1 else None
