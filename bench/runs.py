"""What one measured run of one system yields, and the check that it counted right."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bench.errors import BenchError


@dataclass(frozen=True)
class IngestRun:
    """One pass over the order backlog, from empty state.

    ``processing_s`` runs from the first order touched to the counts being committed;
    ``startup_s`` from process start to the first order touched (interpreter, Spark or
    the consumer group join); ``wall_s`` from process start to exit.
    """

    system: str
    settings: str
    orders: int
    processing_s: float
    startup_s: float
    wall_s: float
    peak_rss: int
    rss_parts: dict[str, int]
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def orders_per_s(self) -> float:
        return self.orders / self.processing_s

    @property
    def wall_orders_per_s(self) -> float:
        return self.orders / self.wall_s


@dataclass(frozen=True)
class RestoreRun:
    """One full read of a changelog into state; ``seconds`` as the system itself sees it
    (from opening its reader to the state being written), ``wall_s`` process start to exit."""

    system: str
    records: int
    keys: int
    seconds: float
    wall_s: float
    peak_rss: int
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds


def require_same(system: str, got: Mapping[str, int], expected: Mapping[str, int]) -> None:
    """Stop the whole benchmark when a system's result differs from the oracle: a fast
    wrong answer is not a result."""
    if dict(got) == dict(expected):
        return
    diff = {k: (got.get(k), expected.get(k)) for k in sorted(set(got) | set(expected)) if got.get(k) != expected.get(k)}
    shown = dict(list(diff.items())[:10])
    raise BenchError(f"{system} computed different results than expected on {len(diff)} key(s) "
                     f"(key: (got, expected)) {shown}")
