"""Summaries of repeated measurements and latency percentiles (pure)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Summary:
    """Median over the repetitions, with the spread the median hides."""

    median: float
    min: float
    max: float
    n: int


def summarize(values: Sequence[float]) -> Summary:
    if not values:
        raise ValueError("nothing to summarize")
    return Summary(statistics.median(values), min(values), max(values), len(values))


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None
