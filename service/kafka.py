"""How every part of brewstream talks to Kafka: one connection description, many clients.

Every client (admin, producers, consumers, Spark's source) is built from the same
``KafkaConnection`` so that security settings given once reach all of them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from service.errors import BrewError
from service.kafka_config import java_options, librdkafka_properties, load_properties

DEFAULT_BOOTSTRAP = "localhost:19092"
METADATA_TIMEOUT_S = 5.0

# librdkafka logs every failed connection attempt, and a fenced producer at level 0; the
# CLI reports broker trouble itself, in one line, so the library's own lines go to a
# logger that shows them only under --log-level debug.
_KAFKA_LOG = logging.getLogger("brewstream.librdkafka")
_KAFKA_LOG.setLevel(logging.CRITICAL + 1)


def show_client_logs(on: bool) -> None:
    """Let librdkafka's own lines through (``--log-level debug``)."""
    _KAFKA_LOG.setLevel(logging.DEBUG if on else logging.CRITICAL + 1)

_QUIET = {"logger": _KAFKA_LOG}

# Readers here assign partitions themselves and never commit, so they join no group;
# librdkafka still wants a group.id to be set.
_READER = {"group.id": "brewstream-reader", "enable.auto.commit": False}


@dataclass(frozen=True)
class KafkaConnection:
    bootstrap: str = DEFAULT_BOOTSTRAP
    # Raw --kafka-config properties: secrets, so kept out of repr and thus out of logs.
    properties: Mapping[str, str] = field(default_factory=dict, repr=False)
    config_file: Path | None = None  # handed on to child processes (drills)

    @classmethod
    def from_file(cls, bootstrap: str, config_file: Path | None) -> KafkaConnection:
        if config_file is None:
            return cls(bootstrap)
        return cls(bootstrap, load_properties(config_file), config_file)

    def config(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return {**_QUIET, **librdkafka_properties(dict(self.properties)), **(overrides or {}),
                "bootstrap.servers": self.bootstrap}

    def admin(self) -> AdminClient:
        return AdminClient(self.config())

    def producer(self, overrides: Mapping[str, Any] | None = None) -> Producer:
        return Producer(self.config(overrides))

    def consumer(self, overrides: Mapping[str, Any] | None = None) -> Consumer:
        return Consumer(self.config({**_READER, **(overrides or {})}))

    def spark_options(self) -> dict[str, str]:
        """The same settings as options for Spark's Kafka source (``kafka.`` prefixed)."""
        opts = {f"kafka.{k}": v for k, v in java_options(dict(self.properties)).items()}
        opts["kafka.bootstrap.servers"] = self.bootstrap
        return opts

    def cli_args(self) -> list[str]:
        """The flags that give a child ``brewstream`` process this same connection."""
        args = ["--bootstrap", self.bootstrap]
        return args + (["--kafka-config", str(self.config_file)] if self.config_file else [])


def admin_client(bootstrap: str) -> AdminClient:
    return KafkaConnection(bootstrap).admin()


def require_broker(conn: KafkaConnection, timeout: float = METADATA_TIMEOUT_S) -> None:
    """Fail fast, in one line, when the broker cannot be reached."""
    try:
        conn.admin().list_topics(timeout=timeout)
    except KafkaException as exc:
        raise _unreachable(conn, exc) from None


def _unreachable(conn: KafkaConnection, exc: KafkaException) -> BrewError:
    return BrewError(f"cannot reach Kafka at {conn.bootstrap} ({_reason(exc)}); "
                     "start it with `brewstream sandbox up` or pass --bootstrap")


def partitions_of(conn: KafkaConnection, topic: str, timeout: float = METADATA_TIMEOUT_S) -> list[int]:
    """The topic's partition ids; a clear error when the topic does not exist."""
    try:
        meta = conn.admin().list_topics(topic=topic, timeout=timeout)
    except KafkaException as exc:
        raise _unreachable(conn, exc) from None
    info = meta.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        raise BrewError(f"topic {topic} does not exist; create the topics with `brewstream topics create`")
    return sorted(info.partitions)


def end_offsets(
    consumer: Consumer, topic: str, partitions: list[int], timeout: float = METADATA_TIMEOUT_S
) -> dict[int, tuple[int, int]]:
    """(low, high) per partition; with isolation.level=read_committed, high is the LSO."""
    out: dict[int, tuple[int, int]] = {}
    for p in partitions:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout, cached=False)
        out[p] = (int(low), int(high))
    return out


def _reason(exc: KafkaException) -> str:
    err = exc.args[0] if exc.args else exc
    return str(getattr(err, "str", lambda: err)())


DeliveryCallback = Callable[[KafkaError | None, Message], None]


def produce_waiting(producer: Producer, topic: str, key: bytes | None, value: bytes | None, *,
                    partition: int | None = None, headers: list[tuple[str, bytes]] | None = None,
                    on_delivery: DeliveryCallback | None = None) -> None:
    """Produce one record; when the local queue is full, serve deliveries until there is room."""
    kwargs: dict[str, Any] = {}
    if partition is not None:
        kwargs["partition"] = partition
    if headers:
        kwargs["headers"] = headers
    if on_delivery is not None:
        kwargs["on_delivery"] = on_delivery
    while True:
        try:
            producer.produce(topic, key=key, value=value, **kwargs)
            return
        except BufferError:
            producer.poll(0.1)


def headers_of(msg: Message) -> dict[str, bytes]:
    """A consumed record's headers by name (the last value wins for a repeated name)."""
    raw = msg.headers() or []
    pairs = raw.items() if isinstance(raw, dict) else raw
    return {k: v.encode() if isinstance(v, str) else (v or b"") for k, v in pairs}


@dataclass(frozen=True)
class TopicShape:
    """What identifies a topic beyond its name: re-created topics get a new id."""

    topic_id: str
    partitions: int


def describe_topic(admin: AdminClient, topic: str, timeout: float = METADATA_TIMEOUT_S) -> TopicShape:
    try:
        desc = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)[topic].result()
    except KafkaException as exc:
        err = exc.args[0]
        if err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise BrewError(f"topic {topic} does not exist; create the topics with `brewstream topics create`"
                            ) from None
        raise BrewError(f"cannot describe topic {topic}: {err.str()}") from None
    return TopicShape(str(desc.topic_id), len(desc.partitions))


# Broker and librdkafka default for the largest record a topic takes.
DEFAULT_MAX_RECORD_BYTES = 1_000_000


def max_record_bytes(conn: KafkaConnection, topic: str, timeout: float = METADATA_TIMEOUT_S) -> int:
    """The largest record ``topic`` accepts (its max.message.bytes), or the default."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = conn.admin()  # must outlive its future
    try:
        entries = admin.describe_configs([resource], request_timeout=timeout)[resource].result()
        return int(entries["max.message.bytes"].value)
    except (KafkaException, KeyError, TypeError, ValueError):
        return DEFAULT_MAX_RECORD_BYTES


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
    consumer = conn.consumer({"isolation.level": "read_committed", "queued.max.messages.kbytes": 16 * 1024,
                              "fetch.max.bytes": 16 * 1024 * 1024, "auto.offset.reset": "error"})
    try:
        for p in sorted(wanted):
            offsets = sorted(set(wanted[p]))
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=METADATA_TIMEOUT_S,
                                                       cached=False)
            todo = [o for o in offsets if low <= o < high]
            for o in offsets:
                if not low <= o < high:
                    yield Fetched(p, o, None)
            if todo:
                yield from _read_partition(consumer, topic, p, todo, high, timeout)
    finally:
        consumer.close()


def _read_partition(consumer: Consumer, topic: str, partition: int, offsets: list[int], high: int,
                    timeout: float) -> Iterator[Fetched]:
    consumer.assign([TopicPartition(topic, partition, offsets[0])])
    i = 0
    deadline = time.monotonic() + timeout
    while i < len(offsets):
        msg = consumer.poll(0.5)
        if msg is None:
            position = consumer.position([TopicPartition(topic, partition)])[0].offset
            if position >= high or time.monotonic() > deadline:
                break  # what is left is gone (or behind a transaction that never settled)
            continue
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                break
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
