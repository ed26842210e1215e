"""The watermark: how far event time has surely progressed (pure).

Per input partition we keep the highest event time seen and when (processing time) it
last had data. The watermark is the minimum, over partitions that have data and are
not idle, of ``max event time - delay``; a partition silent for longer than the idle
timeout stops holding it back. When every partition is idle, the furthest one counts,
so a stream that goes quiet still closes its last windows. It never moves backwards.

Like Spark's own watermark it only moves between micro-batches: every record of a batch
is judged against the watermark as it stood when the batch started.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class PartitionClock:
    max_event_ns: int
    last_seen_ms: int


def watermark(clocks: Mapping[int, PartitionClock], now_ms: int, delay_ns: int, idle_ms: int,
              previous: int | None) -> int | None:
    """The watermark in unix ns, or None while no partition has had data."""
    active = [c.max_event_ns - delay_ns for c in clocks.values() if now_ms - c.last_seen_ms < idle_ms]
    if active:
        wm: int | None = min(active)
    elif clocks:
        wm = max(c.max_event_ns for c in clocks.values()) - delay_ns
    else:
        wm = None
    if previous is not None and (wm is None or wm < previous):
        return previous
    return wm


def closed(end_ns: int, allowed_ns: int, wm: int | None) -> bool:
    """A window is final once the watermark reaches its end plus the allowed lateness."""
    return wm is not None and end_ns + allowed_ns <= wm


def passed(end_ns: int, wm: int | None) -> bool:
    """The watermark has passed the window's end (an early result is due)."""
    return wm is not None and end_ns <= wm
