"""Who writes a changelog: a lease that the active instance announces on Kafka.

The active instance produces a small record every ``interval`` to the instances topic
(compacted, one partition, broker time stamps), keyed by the changelog it writes. A
second instance about to start on the same changelog reads the last announcement: if it
comes from another home (host and state dir) and a newer one arrives within the takeover
timeout, the first is alive and the second refuses to start, naming it. If none arrives,
the first is gone and the second takes over. Only Kafka is shared, so this works across
machines.

The lease is advisory: correctness rests on fencing (invariant 6, see
``restorer.changelog.transactional_id``). Two instances that race past each other's
leases still leave exactly one writer: the later one fences the earlier.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from service.periodic import Every
from topics.errors import BrewError
from topics.kafka import KafkaConnection

log = logging.getLogger("brewstream")

LEASE_INTERVAL_S = 1.0
TAKEOVER_TIMEOUT_S = 5.0
LEASE_PARTITION = 0
_TAIL = 500  # announcements read back to find the last one of a changelog

ACTIVE, STANDBY, STOPPED = "active", "standby", "stopped"


@dataclass(frozen=True)
class Holder:
    """One instance, as it announces itself."""

    instance: str
    host: str
    pid: int
    state_dir: str
    role: str = ACTIVE
    seq: int = 0  # the last batch it committed
    interval_ms: int = int(LEASE_INTERVAL_S * 1000)
    token: str = ""  # new at every process start

    @classmethod
    def here(cls, state_dir: Path, instance: str | None, interval_s: float) -> Holder:
        host = socket.gethostname()
        return cls(instance or f"{host}:{Path(state_dir).name}", host, os.getpid(), str(Path(state_dir).resolve()),
                   ACTIVE, 0, int(interval_s * 1000), secrets.token_hex(8))

    def same_home(self, other: Holder) -> bool:
        """Same host and state dir: the same instance, restarted."""
        return (self.host, self.state_dir) == (other.host, other.state_dir)

    def describe(self) -> str:
        return f"{self.instance} (host {self.host}, pid {self.pid}, state dir {self.state_dir})"

    def encode(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def decode(cls, raw: bytes | None) -> Holder | None:
        try:
            doc = orjson.loads(raw or b"")
            return cls(**{k: doc[k] for k in cls.__dataclass_fields__ if k in doc})
        except (orjson.JSONDecodeError, TypeError, KeyError):
            return None


@dataclass(frozen=True)
class Seen:
    holder: Holder
    offset: int
    at_ms: int  # broker time of the announcement


class LeaseRefused(BrewError):
    """Another live instance is the active writer of this changelog."""


class Lease:
    def __init__(self, conn: KafkaConnection, topic: str, changelog: str, me: Holder,
                 interval_s: float = LEASE_INTERVAL_S, timeout_s: float = TAKEOVER_TIMEOUT_S) -> None:
        self.conn, self.topic, self.key = conn, topic, changelog.encode()
        self.me = me
        self.interval_s, self.timeout_s = interval_s, timeout_s
        self._producer = conn.producer({"linger.ms": 0, "acks": "all"})
        self._every: Every | None = None
        self._seq: Callable[[], int] = lambda: 0

    # ---------------------------------------------------------------- reading

    def last(self) -> Seen | None:
        """The last announcement for this changelog."""
        consumer = self.conn.consumer()
        try:
            tp = TopicPartition(self.topic, LEASE_PARTITION)
            low, high = consumer.get_watermark_offsets(tp, timeout=5, cached=False)
            found = None
            for msg in _read(consumer, self.topic, max(low, high - _TAIL), high):
                seen = self._seen(msg)
                if seen is not None:
                    found = seen
            return found
        finally:
            consumer.close()

    def newer(self, after: Seen, wait_s: float) -> Seen | None:
        """The next announcement for this changelog after ``after``, waiting up to ``wait_s``."""
        consumer = self.conn.consumer()
        deadline = time.monotonic() + wait_s
        try:
            consumer.assign([TopicPartition(self.topic, LEASE_PARTITION, after.offset + 1)])
            while time.monotonic() < deadline:
                msg = consumer.poll(min(0.2, max(0.0, deadline - time.monotonic())))
                if msg is not None and msg.error() is None:
                    seen = self._seen(msg)
                    if seen is not None:
                        return seen
            return None
        finally:
            consumer.close()

    def _seen(self, msg: Message) -> Seen | None:
        if msg.error() is not None or msg.key() != self.key:
            return None
        holder = Holder.decode(msg.value())
        if holder is None:
            return None
        return Seen(holder, msg.offset() or 0, msg.timestamp()[1])

    # ---------------------------------------------------------------- taking and holding

    def acquire(self) -> Holder | None:
        """Make sure no other live instance is active on this changelog, then announce this
        one as active. Returns the instance taken over from, if it had not stopped cleanly."""
        seen = self.last()
        previous = None
        while seen is not None and seen.holder.role == ACTIVE and seen.holder.token != self.me.token:
            holder = seen.holder
            if holder.same_home(self.me):
                # We hold this state dir's lock, so the process that announced it is gone.
                log.info("the last run on this state dir (pid %d) did not stop cleanly; taking over", holder.pid)
                previous = holder
                break
            age_s = max(0.0, time.time() - seen.at_ms / 1000)
            wait_s = max(0.0, self.timeout_s - age_s) if age_s < self.timeout_s else 0.0
            newer = self.newer(seen, wait_s) if wait_s > 0 else None
            if newer is None:
                log.warning("the lease of %s lapsed (no announcement for %.1fs); taking over", holder.describe(),
                            max(age_s, self.timeout_s))
                previous = holder
                break
            if newer.holder.role == ACTIVE and newer.holder.token == holder.token:
                raise LeaseRefused(
                    f"another instance is active on changelog {self.key.decode()}: {holder.describe()}, announced "
                    f"{max(0.0, time.time() - newer.at_ms / 1000):.1f}s ago; stop it first (a dead instance's "
                    f"lease lapses after {self.timeout_s:.0f}s) or use another --topic-prefix")
            seen = newer  # it stopped, or someone else announced: look again
        self.announce()
        return previous

    def start(self, seq: Callable[[], int]) -> None:
        """Announce every interval until ``release``."""
        self._seq = seq
        self._every = Every(self.interval_s, self.announce, "lease")
        self._every.start()

    def announce(self, role: str | None = None) -> None:
        holder = replace(self.me, role=role or self.me.role, seq=self._seq())
        try:
            self._producer.produce(self.topic, key=self.key, value=holder.encode(), partition=LEASE_PARTITION)
            self._producer.poll(0)
        except (BufferError, KafkaException) as exc:
            log.warning("announcing the lease failed: %s", exc)

    def release(self, still_held: bool = True) -> None:
        """Stop announcing; say so when this instance still holds the lease (a clean stop)."""
        if self._every is not None:
            self._every.stop()
        if still_held:
            self.announce(STOPPED)
        self._producer.flush(5)


def _read(consumer: Consumer, topic: str, start: int, end: int) -> list[Message]:
    """The records of the lease partition in [start, end)."""
    if start >= end:
        return []
    consumer.assign([TopicPartition(topic, LEASE_PARTITION, start)])
    out: list[Message] = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            if consumer.position([TopicPartition(topic, LEASE_PARTITION)])[0].offset >= end:
                break
            continue
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                break
            continue
        out.append(msg)
        if (msg.offset() or 0) >= end - 1:
            break
    return out
