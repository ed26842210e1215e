"""Records on their way in and out: producing with back-pressure, headers, fitting a record
under a topic's size limit, and reading records back by position."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from topics.errors import BrewError
from topics.kafka import METADATA_TIMEOUT_S, POLL_WAIT_S, KafkaConnection, cluster_trouble, is_transient, watermarks

DeliveryCallback = Callable[[KafkaError | None, Message], None]


def produce_waiting(producer: Producer, topic: str, key: bytes | None, value: bytes | None, *,
                    partition: int | None = None, headers: list[tuple[str, bytes]] | None = None,
                    on_delivery: DeliveryCallback | None = None, timestamp_ms: int | None = None) -> None:
    """Produce one record; when the local queue is full, serve deliveries until there is room.

    Once the producer has a fatal error, ``produce`` raises only ``_FATAL`` ("Local: Fatal
    error", not itself marked fatal); the cause (fenced by a newer instance, say) comes out of
    the next ``poll``. So it is that ``poll`` that raises here, and callers see the cause."""
    kwargs: dict[str, Any] = {}
    if partition is not None:
        kwargs["partition"] = partition
    if headers:
        kwargs["headers"] = headers
    if on_delivery is not None:
        kwargs["on_delivery"] = on_delivery
    if timestamp_ms is not None:
        kwargs["timestamp"] = timestamp_ms
    while True:
        try:
            producer.produce(topic, key=key, value=value, **kwargs)
            return
        except BufferError:
            producer.poll(0.1)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError._FATAL:
                producer.poll(0)
            raise


def is_fatal(err: KafkaError) -> bool:
    """True for a producer that can do no more: a fatal error, or ``_FATAL`` when its cause
    was served already (see ``produce_waiting``)."""
    return bool(err.fatal()) or err.code() == KafkaError._FATAL


_FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


def is_fenced(err: KafkaError) -> bool:
    """True once a newer producer registered the same transactional.id (or the producer can
    do no more for another fatal reason): it must never write again."""
    return err.code() in _FENCED or is_fatal(err)


def fenced_by_newer(err: KafkaError) -> bool:
    """Of the ``is_fenced`` errors, those that say a newer producer took the id (not, say, an
    ACL refusing it): what a log line may blame on another instance."""
    return err.code() in _FENCED


RETRY_PAUSE_S = 0.1  # between two asks of a transactional call that failed retriably


def call_until(call: Callable[[float], object], deadline: float) -> None:
    """``call`` with the time left (a second at least), asked again past retriable errors
    until ``deadline``; then the last ``KafkaException`` is raised as it is.

    librdkafka allows a transactional call that failed retriably (a commit that timed out,
    say) to be called again, and says so with ``retriable()``. An error that also requires
    an abort, or a fatal one, is raised at once: asking again cannot mend it. Each caller
    keeps its own handling of those."""
    while True:
        try:
            call(max(1.0, deadline - time.monotonic()))
            return
        except KafkaException as exc:
            err = exc.args[0]
            if (is_fatal(err) or err.txn_requires_abort() or not err.retriable()
                    or time.monotonic() >= deadline):
                raise
            time.sleep(RETRY_PAUSE_S)


def close_transactional(producer: Producer, timeout_s: float = 10.0) -> KafkaError | None:
    """Serve a transactional producer's last delivery reports on the way out, and never raise.

    Once the producer has a fatal error (fenced by a newer instance, say), its next ``poll``
    or ``flush`` raises that error once more, even after ``commit_transaction`` has raised it
    already; raised from a ``finally`` it would hide the exception on its way up. Nothing
    rests on this flush: what no committed transaction holds is aborted. Returns the error
    it swallowed, if any."""
    try:
        producer.flush(timeout_s)
    except KafkaException as exc:
        return exc.args[0]
    return None


def headers_of(msg: Message) -> dict[str, bytes]:
    """A consumed record's headers by name (the last value wins for a repeated name)."""
    raw = msg.headers() or []
    pairs = raw.items() if isinstance(raw, dict) else raw
    return {k: v.encode() if isinstance(v, str) else (v or b"") for k, v in pairs}


# Room for a record's framing and the headers ``fit_record`` adds.
RECORD_OVERHEAD = 1024
KEY_KEEP = 1024  # bytes of a key kept when key and value together are too big
TRUNCATED, ORIGINAL_SIZE, ORIGINAL_KEY_SIZE = "truncated", "original-size", "original-key-size"

Headers = list[tuple[str, bytes]]


def fit_record(key: bytes | None, value: bytes | None, headers: Headers, max_bytes: int,
               key_size: int | None = None, value_size: int | None = None) -> tuple[bytes | None, bytes | None,
                                                                                   Headers]:
    """Cut ``key`` and ``value`` so that the record fits in ``max_bytes``, and say so.

    ``key_size``/``value_size`` are the original sizes when the bytes given were already
    cut (the executors cut bad records before they travel). A cut record gets the headers
    ``truncated`` (what was cut), ``original-size`` (the value's size) and, when the key
    was cut, ``original-key-size``; the source topic, partition and offset in the other
    headers let anyone fetch the original.
    """
    key_size = (len(key) if key is not None else 0) if key_size is None else key_size
    value_size = (len(value) if value is not None else 0) if value_size is None else value_size
    room = max_bytes - RECORD_OVERHEAD - sum(len(k.encode()) + len(v) for k, v in headers)
    if key_size + value_size > room and key_size > KEY_KEEP and key is not None:
        key = key[:KEY_KEEP]
    if value is not None:
        value = value[:max(0, room - len(key or b""))]
    cut = [name for name, kept, size in (("key", key, key_size), ("value", value, value_size))
           if kept is not None and len(kept) < size]
    if not cut:
        return key, value, headers
    extra: Headers = [(TRUNCATED, ",".join(cut).encode()), (ORIGINAL_SIZE, str(value_size).encode())]
    if "key" in cut:
        extra.append((ORIGINAL_KEY_SIZE, str(key_size).encode()))
    return key, value, [*headers, *extra]


@dataclass(frozen=True)
class Fetched:
    """One record read back by position; ``message`` is None when it is no longer there."""

    partition: int
    offset: int
    message: Message | None


FETCH_TIMEOUT_S = 60.0
# The readers below take one partition after another, with small queues so that memory
# stays bounded however big the records are. A new partition's first fetch waits for the
# one still held at the end of the last (the broker holds a fetch up to fetch.wait.max.ms
# when it has nothing to send): 500 ms by default, per partition.
_ONE_PARTITION_AT_A_TIME = {"isolation.level": "read_committed", "queued.max.messages.kbytes": 16 * 1024,
                            "fetch.max.bytes": 16 * 1024 * 1024, "fetch.wait.max.ms": 20}


def read_at(conn: KafkaConnection, topic: str, positions: Iterable[tuple[int, int]],
            timeout: float = FETCH_TIMEOUT_S) -> Iterator[Fetched]:
    """Read the records at (partition, offset) back, one at a time, in partition/offset order.

    Memory stays bounded however big the records are: the consumer's queues are small and
    each record is handed on before the next is read. A position the topic no longer holds
    (deleted, or an aborted transaction's) yields ``message=None``.
    """
    wanted: dict[int, list[int]] = {}
    for p, o in positions:
        wanted.setdefault(p, []).append(o)
    if not wanted:
        return
    consumer = conn.consumer({**_ONE_PARTITION_AT_A_TIME, "auto.offset.reset": "error"})
    try:
        for p in sorted(wanted):
            offsets = sorted(set(wanted[p]))
            low, high = watermarks(consumer, topic, p)
            todo = [o for o in offsets if low <= o < high]
            for o in offsets:
                if not low <= o < high:
                    yield Fetched(p, o, None)
            if todo:
                yield from _read_partition(conn, consumer, topic, p, todo, high, timeout)
    finally:
        consumer.close()


def _read_partition(conn: KafkaConnection, consumer: Consumer, topic: str, partition: int, offsets: list[int],
                    high: int, timeout: float) -> Iterator[Fetched]:
    consumer.assign([TopicPartition(topic, partition, offsets[0])])
    i = 0
    deadline = time.monotonic() + timeout
    while i < len(offsets):
        msg = consumer.poll(POLL_WAIT_S)
        if msg is None:
            position = consumer.position([TopicPartition(topic, partition)])[0].offset
            if position >= high:
                break  # what is left is gone (or behind a transaction that never settled)
            if time.monotonic() > deadline:
                # Not gone while the cluster cannot serve the partition: say so, rather than
                # that the records are no longer there.
                trouble = cluster_trouble(conn, [topic], f"reading {topic}[{partition}] back made no progress "
                                                         f"for {timeout:.0f}s")
                if trouble is not None:
                    raise trouble
                break
            continue
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                break
            if is_transient(err):
                continue  # the consumer finds the new leader by itself; the deadline bounds it
            raise BrewError(f"reading {topic}[{partition}] back failed: {err.str()}")
        deadline = time.monotonic() + timeout
        off = msg.offset() or 0
        while i < len(offsets) and offsets[i] < off:
            yield Fetched(partition, offsets[i], None)
            i += 1
        if i < len(offsets) and offsets[i] == off:
            yield Fetched(partition, off, msg)
            i += 1
    for o in offsets[i:]:
        yield Fetched(partition, o, None)
    consumer.unassign()


def read_from(conn: KafkaConnection, topic: str, since_ms: int | None = None,
              timeout: float = FETCH_TIMEOUT_S) -> Iterator[Message]:
    """Every committed record of ``topic`` from ``since_ms`` (broker or producer time; None:
    the beginning) up to the end offsets it has when the read starts, partition by partition.

    Records appended meanwhile are left for the next read, so a reader that feeds back into
    the topic (a DLQ replay whose records fail again) always ends. Memory stays bounded like
    ``read_at``'s.
    """
    consumer = conn.consumer({**_ONE_PARTITION_AT_A_TIME, "auto.offset.reset": "earliest"})
    try:
        meta = consumer.list_topics(topic, timeout=METADATA_TIMEOUT_S).topics.get(topic)
        if meta is None or meta.error is not None:
            raise BrewError(f"topic {topic} does not exist; create the topics with `brewstream topics create`")
        for p in sorted(meta.partitions):
            low, high = watermarks(consumer, topic, p)
            start = low
            if since_ms is not None:
                found = consumer.offsets_for_times([TopicPartition(topic, p, since_ms)],
                                                   timeout=METADATA_TIMEOUT_S)[0].offset
                start = high if found < 0 else max(low, found)  # -1: nothing that recent
            if start < high:
                yield from _read_range(conn, consumer, topic, p, start, high, timeout)
    finally:
        consumer.close()


def read_tail(conn: KafkaConnection, topic: str, back: int | None,
              timeout: float = FETCH_TIMEOUT_S) -> Iterator[Message]:
    """The committed records among the last ``back`` offsets of each partition of ``topic``
    (None: all of them), partition by partition, up to the end offsets each has when it is
    read. Transaction markers and aborted records take offsets too, so fewer may come."""
    consumer = conn.consumer({**_ONE_PARTITION_AT_A_TIME, "auto.offset.reset": "earliest"})
    try:
        meta = consumer.list_topics(topic, timeout=min(timeout, METADATA_TIMEOUT_S)).topics.get(topic)
        if meta is None or meta.error is not None:
            raise BrewError(f"topic {topic} does not exist; create the topics with `brewstream topics create`")
        for p in sorted(meta.partitions):
            low, high = watermarks(consumer, topic, p, min(timeout, METADATA_TIMEOUT_S))
            start = low if back is None else max(low, high - back)
            if start < high:
                yield from _read_range(conn, consumer, topic, p, start, high, timeout)
    finally:
        consumer.close()


def _read_range(conn: KafkaConnection, consumer: Consumer, topic: str, partition: int, start: int, end: int,
                timeout: float) -> Iterator[Message]:
    consumer.assign([TopicPartition(topic, partition, start)])
    deadline = time.monotonic() + timeout
    while True:
        msg = consumer.poll(POLL_WAIT_S)
        if msg is None:
            # Under read_committed the last offsets may be transaction markers, never delivered.
            if consumer.position([TopicPartition(topic, partition)])[0].offset >= end:
                break
            if time.monotonic() > deadline:
                what = f"reading {topic}[{partition}] did not reach offset {end} within {timeout:.0f}s"
                raise cluster_trouble(conn, [topic], what) or BrewError(what)
            continue
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                break
            if is_transient(err):
                continue  # the consumer finds the new leader by itself; the deadline bounds it
            raise BrewError(f"reading {topic}[{partition}] failed: {err.str()}")
        deadline = time.monotonic() + timeout
        offset = msg.offset() or 0
        if offset >= end:
            break
        yield msg
        if offset >= end - 1:
            break
    consumer.unassign()
