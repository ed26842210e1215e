"""Crash on purpose at a named point of the sink, to prove each dangerous moment.

``BREWSTREAM_FAULT=<point>[@<n>]`` makes the process SIGKILL itself (and its Spark JVM)
the n-th time (default 1st) a batch reaches ``point``. Points: ``mid-transaction``
(records produced, transaction not committed), ``after-changelog-commit`` and
``after-store-commit`` (before Spark commits its checkpoint).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable

POINTS = ("mid-transaction", "after-changelog-commit", "after-store-commit")
ENV = "BREWSTREAM_FAULT"


class FaultPlan:
    def __init__(self, spec: str | None, kill: Callable[[], None], points: tuple[str, ...] = POINTS) -> None:
        self.point: str | None = None
        self.at = 0
        if spec:
            self.point, self.at = parse_fault(spec, points)
        self._seen = 0
        self._kill = kill

    @classmethod
    def from_env(cls, kill: Callable[[], None], points: tuple[str, ...] = POINTS) -> FaultPlan:
        """``points``: the ones this process has (another command, e.g. a DLQ replay, has its own)."""
        return cls(os.environ.get(ENV), kill, points)

    def reached(self, point: str) -> None:
        if point != self.point:
            return
        self._seen += 1
        if self._seen == self.at:
            print(f"brewstream: fault injected at {point} (batch {self._seen})", file=sys.stderr, flush=True)
            self._kill()


def parse_fault(spec: str, points: tuple[str, ...] = POINTS) -> tuple[str, int]:
    point, _, nth = spec.partition("@")
    if point not in points:
        raise ValueError(f"unknown fault point {point!r}; one of {', '.join(points)}")
    return point, int(nth) if nth else 1


def kill_process_and(jvm_pid: int | None) -> Callable[[], None]:
    """SIGKILL the JVM first (so it cannot finish the batch alone), then ourselves."""
    def kill() -> None:
        if jvm_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(jvm_pid, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
    return kill
