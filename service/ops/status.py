"""``brewstream status``: how far a store is behind its input, and what the instances of
its pipeline are doing (from their announcements), for people and health checks."""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import TopicPartition

from restorer.store import StateDir, Store
from service.instance.health import FENCED, RESTORING
from service.instance.lease import LEASE_PARTITION, Announcement
from service.records.limits import printable
from topics.clock import format_duration, utc_iso, wait_until
from topics.kafka import KafkaConnection, end_offsets, partitions_of, watermarks


@dataclass(frozen=True)
class PartitionLag:
    partition: int
    stored: int | None  # next offset the store will apply; None: nothing applied yet
    end: int
    lag: int


@dataclass(frozen=True)
class InstanceView:
    """An instance's last announcement and how old it is."""

    what: Announcement
    age_s: float

    def as_json(self) -> dict[str, object]:
        a = self.what
        return {"instance": a.instance, "host": a.host, "pid": a.pid, "state_dir": a.state_dir, "role": a.role,
                "holds_lease": a.holds_lease, "seq": a.seq, "age_s": round(self.age_s, 3)}


@dataclass(frozen=True)
class Status:
    store: Path
    topic: str
    partitions: list[PartitionLag]
    last_batch_ms: int | None
    batches: int
    instances: list[InstanceView] = field(default_factory=list)
    role: str | None = None  # what the instance on this state dir last announced


    @property
    def lag(self) -> int:
        return sum(p.lag for p in self.partitions)

    def batch_age_s(self, now: float) -> float | None:
        return None if self.last_batch_ms is None else now - self.last_batch_ms / 1000

    def as_json(self, now: float) -> dict[str, object]:
        return {"store": str(self.store), "topic": self.topic, "lag": self.lag, "batches": self.batches,
                "last_batch_age_s": self.batch_age_s(now), "role": self.role,
                "instances": [i.as_json() for i in self.instances],
                "partitions": [{"partition": p.partition, "stored": p.stored, "end": p.end, "lag": p.lag}
                               for p in self.partitions]}


def input_lag(stored: Mapping[int, int], ends: Mapping[int, tuple[int, int]]) -> dict[int, int]:
    """Records per partition beyond the store's next offset; all of them when it has none."""
    return {p: max(0, high - stored.get(p, low)) for p, (low, high) in ends.items()}


def read_status(conn: KafkaConnection, state_dir: Path, topic: str, instances_topic: str | None = None,
                changelog: str | None = None) -> Status:
    store_path = StateDir(state_dir).store_path
    with Store(store_path, read_only=True) as store:
        stored, last, batches = store.next_offsets(topic), store.last_batch_ms(), store.last_seq()
    consumer = conn.consumer()
    try:
        ends = end_offsets(consumer, topic, partitions_of(conn, topic))
    finally:
        consumer.close()
    lag = input_lag(stored, ends)
    lags = [PartitionLag(p, stored.get(p), high, lag[p]) for p, (_low, high) in sorted(ends.items())]
    views = read_instances(conn, instances_topic, changelog) if instances_topic and changelog else []
    home = str(Path(state_dir).resolve())
    role = next((v.what.role for v in views if v.what.state_dir == home and v.what.host == socket.gethostname()), None)
    return Status(store_path, topic, lags, last, batches, views, role)


def read_instances(conn: KafkaConnection, topic: str, changelog: str) -> list[InstanceView]:
    """The last announcement of every instance home of ``changelog``, newest first."""
    consumer = conn.consumer()
    latest: dict[bytes, tuple[Announcement, int]] = {}
    try:
        tp = TopicPartition(topic, LEASE_PARTITION)
        low, high = watermarks(consumer, topic, LEASE_PARTITION)
        if high > low:
            consumer.assign([TopicPartition(topic, LEASE_PARTITION, max(low, high - 2000))])

            def read() -> bool:
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    what = Announcement.decode(msg.value())
                    if what is not None and what.changelog == changelog:
                        latest[what.key] = (what, msg.timestamp()[1])
                    return (msg.offset() or 0) >= high - 1
                return consumer.position([tp])[0].offset >= high

            wait_until(read, 30, f"the announcements on {topic}", every=0)
    finally:
        consumer.close()
    now_ms = time.time() * 1000
    views = [InstanceView(what, max(0.0, (now_ms - at) / 1000)) for what, at in latest.values()]
    return sorted(views, key=lambda v: v.age_s)


def health_problems(status: Status, now: float, max_lag: int | None, max_batch_age_s: float | None) -> list[str]:
    """What makes the pipeline unhealthy for ``status``'s exit code, one phrase each."""
    problems = []
    if max_lag is not None and status.lag > max_lag:
        problems.append(f"lag {status.lag} is above --max-lag {max_lag}")
    age = status.batch_age_s(now)
    if max_batch_age_s is not None and (age is None or age > max_batch_age_s):
        problems.append("no batch committed yet" if age is None else
                        f"last batch {age:.0f}s ago is older than --max-batch-age {format_duration(max_batch_age_s)}")
    if status.role in (RESTORING, FENCED):
        problems.append(f"the instance on this state dir is {status.role}")
    return problems


def status_text(s: Status, now: float | None = None) -> str:
    now = time.time() if now is None else now
    age = s.batch_age_s(now)
    when = ("never" if s.last_batch_ms is None else
            f"{utc_iso(s.last_batch_ms / 1000)} ({age:.1f}s ago)")
    lines = [f"store {s.store}: {s.batches} batches committed, last batch {when}",
             f"{'PARTITION':<10}{'STORED':>12}{'END':>12}{'LAG':>10}"]
    lines += [f"{p.partition:<10}{'-' if p.stored is None else p.stored:>12}{p.end:>12}{p.lag:>10}"
              for p in s.partitions]
    lines.append(f"total lag on {s.topic}: {s.lag}")
    for v in s.instances:
        a = v.what
        # Announcements are read from a topic anyone with access may write to.
        lines.append(f"instance {printable(a.instance)}: {printable(a.role)}"
                     f"{' (holds the lease)' if a.holds_lease else ''}, batch {a.seq}, pid {a.pid} on "
                     f"{printable(a.host)}, state dir {printable(a.state_dir)}, announced {v.age_s:.1f}s ago")
    return "\n".join(lines)
