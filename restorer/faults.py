"""Crash on purpose at a named point of the sink, to prove each dangerous moment.

``BREWSTREAM_FAULT=<point>[@<n>]`` makes the process SIGKILL itself (and its Spark JVM)
the n-th time (default 1st) a batch reaches ``point``. Points: ``mid-transaction``
(records produced, transaction not committed), ``after-changelog-commit`` and
``after-store-commit`` (before Spark commits its checkpoint).

``BREWSTREAM_FAULT_FILE=<path>`` arms the same kind of fault later: whenever the file's
contents change to a ``<point>[@<n>]``, counting starts afresh (the failover drill arms
an active that has been running for a while, once its standby is ready).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

POINTS = ("mid-transaction", "after-changelog-commit", "after-store-commit")
ENV = "BREWSTREAM_FAULT"
FILE_ENV = "BREWSTREAM_FAULT_FILE"


class FaultPlan:
    def __init__(self, spec: str | None, kill: Callable[[], None], spec_file: Path | None = None,
                 points: tuple[str, ...] = POINTS) -> None:
        self.point: str | None = None
        self.at = 0
        if spec:
            self.point, self.at = parse_fault(spec, points)
        self._seen = 0
        self._kill = kill
        self._file = spec_file
        self._file_spec = ""
        self._points = points

    @classmethod
    def from_env(cls, kill: Callable[[], None], points: tuple[str, ...] = POINTS) -> FaultPlan:
        """``points``: the ones this process has (another command, e.g. a DLQ replay, has its own)."""
        spec_file = os.environ.get(FILE_ENV)
        return cls(os.environ.get(ENV), kill, Path(spec_file) if spec_file else None, points)

    def reached(self, point: str) -> None:
        if self._file is not None:
            self._rearm()
        if point != self.point:
            return
        self._seen += 1
        if self._seen == self.at:
            print(f"brewstream: fault injected at {point} (batch {self._seen})", file=sys.stderr, flush=True)
            self._kill()


    def _rearm(self) -> None:
        assert self._file is not None
        try:
            spec = self._file.read_text().strip()
        except OSError:
            return
        if spec and spec != self._file_spec:
            self._file_spec = spec
            self.point, self.at = parse_fault(spec, self._points)
            self._seen = 0


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
