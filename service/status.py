"""``brewstream status``: how far a store is behind its input, for people and health checks."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from restorer.store import StateDir, Store
from service.durations import format_duration
from topics.clock import utc_iso
from topics.kafka import KafkaConnection, end_offsets, partitions_of


@dataclass(frozen=True)
class PartitionLag:
    partition: int
    stored: int | None  # next offset the store will apply; None: nothing applied yet
    end: int
    lag: int


@dataclass(frozen=True)
class Status:
    store: Path
    topic: str
    partitions: list[PartitionLag]
    last_batch_ms: int | None
    batches: int

    @property
    def lag(self) -> int:
        return sum(p.lag for p in self.partitions)

    def batch_age_s(self, now: float) -> float | None:
        return None if self.last_batch_ms is None else now - self.last_batch_ms / 1000

    def as_json(self, now: float) -> dict[str, object]:
        return {"store": str(self.store), "topic": self.topic, "lag": self.lag, "batches": self.batches,
                "last_batch_age_s": self.batch_age_s(now),
                "partitions": [{"partition": p.partition, "stored": p.stored, "end": p.end, "lag": p.lag}
                               for p in self.partitions]}


def input_lag(stored: Mapping[int, int], ends: Mapping[int, tuple[int, int]]) -> dict[int, int]:
    """Records per partition beyond the store's next offset; all of them when it has none."""
    return {p: max(0, high - stored.get(p, low)) for p, (low, high) in ends.items()}


def read_status(conn: KafkaConnection, state_dir: Path, topic: str) -> Status:
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
    return Status(store_path, topic, lags, last, batches)


def health_problems(status: Status, now: float, max_lag: int | None, max_batch_age_s: float | None) -> list[str]:
    """What makes the pipeline unhealthy for ``status``'s exit code, one phrase each."""
    problems = []
    if max_lag is not None and status.lag > max_lag:
        problems.append(f"lag {status.lag} is above --max-lag {max_lag}")
    age = status.batch_age_s(now)
    if max_batch_age_s is not None and (age is None or age > max_batch_age_s):
        problems.append("no batch committed yet" if age is None else
                        f"last batch {age:.0f}s ago is older than --max-batch-age {format_duration(max_batch_age_s)}")
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
    return "\n".join(lines)
