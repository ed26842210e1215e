"""Apply the changelog to a store, from the store's positions up to the end offsets.

The reader joins no consumer group and reads with isolation.level=read_committed, so
it sees whole transactions only and the end offset of each partition is its last
stable offset. It stops on the consumer's *position* reaching the end, never on a
record at end-1: transaction markers and compaction leave gaps in the offsets.

From offset 0 this is a full restore after disk loss; from the positions a store
already holds it is the catch-up that runs before every start (``restorer.integrity``
decides which, and refuses a changelog that cannot serve the store). Either way the
result lands in one synced WriteBatch, together with the new positions and the
changelog's identity, so a reader killed half-way leaves the store as it was.

A read always ends: it is bounded by the end offsets taken when it starts, it begins at
the first offset the partition still holds, and a partition that makes no progress for
``STALL_TIMEOUT_S`` stops it with an error instead of a wait for records that
compaction or deletion removed.

Every transaction writes a commit marker with its sequence number to every changelog
partition. The end offsets of different partitions are read at slightly different
moments, so while a writer is committing, a cut could hold half a transaction; equal
markers in every partition prove the cut is whole, and a short wait for fresh end
offsets fixes a cut that is not.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from restorer.codec import (
    CHANGELOG_PARTITIONS,
    CHANGELOG_TOPIC,
    CHANGELOG_TOPIC_ID,
    U64_LEN,
    Entry,
    StoreState,
    commit_prefix,
    decode_entries,
    encode_u64,
    is_local,
    local_key,
    position_key,
    shape_prefix,
    tasked_prefix,
)
from restorer.integrity import ChangelogRefused, ChangelogView, StoreFacts, shape_message
from restorer.store import Store
from topics.errors import BrewError
from topics.kafka import (
    POLL_WAIT_S,
    KafkaConnection,
    cluster_trouble,
    deletion_risk,
    describe_topic,
    end_offsets,
    is_transient,
    unavailable,
)
from topics.retention import keep_records_fix

POLL_BATCH = 10_000
CONSISTENT_CUT_TIMEOUT_S = 30.0
STALL_TIMEOUT_S = 30.0

# (partition, start, position, end) after each poll; the CLI turns it into progress bars.
ProgressFn = Callable[[int, int, int, int], None]
# Why a changelog value cannot belong to its key, or None; each store has its own.
ValueCheck = Callable[[bytes, bytes], "str | None"]


@dataclass(frozen=True)
class RestoreResult:
    records: int
    keys: int
    partitions: int
    seconds: float
    start: dict[int, int]
    end: dict[int, int]

    def summary(self) -> str:
        """The line a restore ends with (``RESTORED`` reads it)."""
        return (f"restore done: records={self.records} keys={self.keys} "
                f"partitions={self.partitions} in {self.seconds:.2f} s")


RESTORED = re.compile(r"restore done: records=(?P<records>\d+) keys=(?P<keys>\d+) partitions=(?P<partitions>\d+) "
                      r"in (?P<seconds>[\d.]+) s")


class ReadStalled(BrewError):
    """A changelog read that stopped making progress, or cannot find one whole batch."""


def retention_risk(conn: KafkaConnection, topic: str) -> str | None:
    """Why the changelog may lose records by itself, in one line that says what to set; None
    when it keeps them, or when the broker does not say (``topics.kafka.deletion_risk``)."""
    how = deletion_risk(conn, topic)
    return None if how is None else retention_line(topic, how)


def retention_line(topic: str, how: str) -> str:
    """Pure: the line that says the changelog deletes records ``how``, what that costs and
    what to set."""
    return (f"changelog {topic} {how}: a restore after disk loss then lacks the keys only its deleted records "
            f"held; {keep_records_fix(topic)}")


def view_changelog(conn: KafkaConnection, topic: str, consumer: Consumer | None = None) -> ChangelogView:
    """The changelog's identity, and the first and end offset of each partition, now."""
    shape = describe_topic(conn, topic)
    reader = consumer or _reader(conn)
    try:
        offsets = end_offsets(reader, topic, list(range(shape.partitions)))
    finally:
        if consumer is None:
            reader.close()
    return ChangelogView(topic, shape.topic_id, shape.partitions, {p: lo for p, (lo, _) in offsets.items()},
                         {p: hi for p, (_, hi) in offsets.items()})


def store_facts(store: Store) -> StoreFacts:
    """What the store recorded about its changelog."""
    topic_id, partitions = store.local(CHANGELOG_TOPIC_ID), store.local(CHANGELOG_PARTITIONS)
    name = store.local(CHANGELOG_TOPIC)
    return StoreFacts(not store.holds_state(), _positions(store), topic_id.decode() if topic_id else None,
                      int(partitions) if partitions else None, name.decode() if name else None)


def apply_changelog(conn: KafkaConnection, topic: str, store: Store, check_value: ValueCheck,
                    start: Mapping[int, int] | None = None, on_progress: ProgressFn | None = None,
                    cut_timeout: float = CONSISTENT_CUT_TIMEOUT_S,
                    built_partitions: int | None = None, reader: Consumer | None = None,
                    only: Iterable[int] | None = None) -> RestoreResult:
    """Read every partition from ``start`` (default: the store's positions) to its end and
    apply it, atomically. Its shape markers must name the partition count it has now
    (or ``built_partitions``, when moving a store off a changelog that grew). A standby
    that applies over and over passes its own ``reader`` (see ``new_reader``). ``only``:
    the partitions (tasks) to read, when the store holds some of them."""
    started = time.monotonic()
    consumer = reader or _reader(conn)
    view = view_changelog(conn, topic, consumer)
    partitions = sorted(only) if only is not None else list(range(view.partitions))
    positions = _positions(store) if start is None else dict(start)
    first = {p: max(positions.get(p, 0), view.low.get(p, 0)) for p in partitions}
    latest: dict[bytes, bytes | None] = {}
    records = 0

    def report(partition: int, position: int, end: int) -> None:
        if on_progress is not None:
            on_progress(partition, first[partition], position, end)

    try:
        ends = _ends(consumer, topic, partitions)
        reached = dict(first)
        deadline = time.monotonic() + cut_timeout
        while True:
            records += _read_until(consumer, topic, reached, ends, latest, report)
            split = _split_transaction(store, latest, partitions)
            if split is None:
                break
            if time.monotonic() > deadline:
                raise ReadStalled(
                    f"changelog {topic} does not settle on one committed batch (commit markers per "
                    f"partition: {split}); is another writer committing to it? try again"
                )
            time.sleep(0.2)
            ends = {p: max(e, reached[p]) for p, e in _ends(consumer, topic, partitions).items()}
    except ReadStalled as exc:
        # A partition whose leader died (or a cluster that lost its quorum) stops a read, and
        # leaves a transaction's markers written to some partitions only, until it heals:
        # that is Kafka's trouble, to wait out. A cluster that serves and still stalls is not.
        raise cluster_trouble(conn, [topic], str(exc)) or exc from None
    finally:
        if reader is None:
            consumer.close()
    _check_shape(topic, built_partitions or view.partitions, latest)
    if not latest and all(e <= positions.get(p, 0) for p, e in reached.items()):
        return RestoreResult(0, 0, len(partitions), time.monotonic() - started, first, reached)  # nothing new
    entries = check_entries(topic, latest, check_value)
    entries += [(position_key(p), encode_u64(e)) for p, e in reached.items() if e > positions.get(p, -1)]
    entries += [(local_key(CHANGELOG_TOPIC_ID), view.topic_id.encode()), (local_key(CHANGELOG_TOPIC), topic.encode()),
                (local_key(CHANGELOG_PARTITIONS), str(view.partitions).encode())]
    store.commit(entries)
    return RestoreResult(records, len(latest), len(partitions),
                         time.monotonic() - started, first, reached)


def _check_shape(topic: str, partitions: int, latest: Mapping[bytes, bytes | None]) -> None:
    """Shape markers name the partition count each partition was written with."""
    shapes = _markers(latest, shape_prefix())
    built = {n for n in shapes.shapes.values() if n != partitions}
    if built:
        raise ChangelogRefused(shape_message(topic, partitions, min(built)))


def new_reader(conn: KafkaConnection) -> Consumer:
    """A changelog reader to pass to ``apply_changelog`` again and again; close it after."""
    return _reader(conn)


def _reader(conn: KafkaConnection) -> Consumer:
    return conn.consumer({
        "isolation.level": "read_committed",
        # Records below the first offset left are never asked for; anything else out of
        # range is an error to report, not a silent jump to the end.
        "auto.offset.reset": "error",
        "enable.partition.eof": True,
        "fetch.max.bytes": 64 * 1024 * 1024,
        # librdkafka stops fetching a partition for this long whenever its local queue is
        # full; the 1 s default leaves a restore idle most of the time. With the short
        # backoff, librdkafka's own queue size (queued.min.messages, 100,000) reads faster
        # than a larger one and holds less (see docs/performance-notes.md, restore).
        "fetch.queue.backoff.ms": 10,
    })


def _positions(store: Store) -> dict[int, int]:
    return store.positions()


def _ends(consumer: Consumer, topic: str, partitions: list[int]) -> dict[int, int]:
    """End offsets: with read_committed, each partition's last stable offset."""
    return {p: high for p, (_, high) in end_offsets(consumer, topic, partitions).items()}


def _read_until(consumer: Consumer, topic: str, reached: dict[int, int], ends: dict[int, int],
                latest: dict[bytes, bytes | None], report: Callable[[int, int, int], None],
                stall_s: float = STALL_TIMEOUT_S) -> int:
    """Consume each partition from ``reached`` to ``ends``; keep the last value per key."""
    todo = {p for p, e in ends.items() if reached[p] < e}
    if not todo:
        return 0
    assigned = [TopicPartition(topic, p, reached[p]) for p in sorted(todo)]
    consumer.assign(assigned)
    consumer.resume(assigned)  # a reused reader paused these when an earlier read finished them
    records = 0
    last_progress = time.monotonic()
    while todo:
        try:
            messages = consumer.consume(num_messages=POLL_BATCH, timeout=POLL_WAIT_S)
        except KafkaException as exc:
            what = f"reading changelog {topic} failed"
            raise unavailable(what, exc) or BrewError(f"{what}: {exc.args[0].str()}") from None
        done: set[int] = set()
        before = dict(reached)
        # The hot loop of every restore: as little per record as a plain consumer does.
        # Keys and values are checked once per key at the end (``check_entries``), and how
        # far each partition got comes from the consumer's positions below.
        for msg in messages:
            err = msg.error()
            if err is not None:
                p, offset = msg.partition() or 0, msg.offset() or 0
                if err.code() == KafkaError._PARTITION_EOF:
                    if p in todo and offset >= ends[p]:
                        done.add(p)
                    continue
                if is_transient(err):
                    continue  # a broker lost or a leader moving: the consumer carries on by itself
                raise BrewError(f"reading changelog {topic}[{p}] failed: {err.str()}")
            if msg.offset() < ends[msg.partition()]:  # type: ignore[index,operator] # set on records
                latest[msg.key()] = msg.value()  # type: ignore[index] # a None key is refused by check_entries
                records += 1  # (records past the cut are newer than it: a later run applies them)
        for tp in consumer.position([TopicPartition(topic, p) for p in sorted(todo)]):
            if tp.offset >= 0:  # negative: nothing consumed yet (OFFSET_INVALID)
                reached[tp.partition] = min(max(tp.offset, reached[tp.partition]), ends[tp.partition])
            if reached[tp.partition] >= ends[tp.partition]:
                done.add(tp.partition)
        for p in done & todo:
            reached[p] = ends[p]
        for p in sorted(todo):
            report(p, reached[p], ends[p])
        if done & todo:
            consumer.pause([TopicPartition(topic, p) for p in sorted(done & todo)])
            todo.difference_update(done)
        if reached != before or messages:
            last_progress = time.monotonic()
        elif time.monotonic() - last_progress > stall_s:
            stuck = {p: (reached[p], ends[p]) for p in sorted(todo)}
            raise ReadStalled(f"reading changelog {topic} made no progress for {stall_s:.0f}s (partition: (position, "
                              f"end) {stuck}); is the broker healthy? start again to retry")
    consumer.unassign()
    return records


def check_entries(topic: str, latest: dict[bytes, bytes | None], check_value: ValueCheck) -> list[Entry]:
    """The last value of every key read, checked: a keyless record, a store-local key or a
    value of the wrong shape means the changelog is not this store's. Tombstones (empty
    values) become deletions."""
    entries: list[Entry] = []
    for key, value in latest.items():
        if key is None:
            raise BrewError(f"changelog {topic} holds a record without a key; the changelog is not brewstream's")
        if is_local(key):
            raise BrewError(f"changelog {topic} carries a store-local key {key[:60]!r}")
        problem = check_value(key, value) if value else None
        if problem:
            raise BrewError(f"changelog {topic}: the record for key {key[:60]!r} does not belong to this store: "
                            f"{problem}")
        entries.append((key, value or None))
    return entries


def _markers(latest: Mapping[bytes, bytes | None], prefix: bytes) -> StoreState:
    """The markers read so far (well-formed ones: anything else ``check_entries`` refuses)."""
    return decode_entries((k, v) for k, v in latest.items()
                          if isinstance(k, bytes) and k.startswith(prefix) and v is not None and len(v) == U64_LEN)


def _split_transaction(store: Store, latest: dict[bytes, bytes | None],
                       partitions: Iterable[int]) -> dict[int, int] | None:
    """The commit marker of each partition read, when they do not all name the same batch.
    Partitions committed task by task (``codec.tasked_key``) are left out: their tasks
    commit apart, and each applies its input by cursors of its own."""
    commits = store.commit_markers()
    commits.update(_markers(latest, commit_prefix()).commits)
    tasked = store.tasked_partitions() | _markers(latest, tasked_prefix()).tasked
    read = set(partitions)
    commits = {p: seq for p, seq in commits.items() if p in read and p not in tasked}
    return commits if len(set(commits.values())) > 1 else None
