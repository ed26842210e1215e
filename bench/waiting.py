"""Waiting for a condition with a deadline, failing early when the watched child dies."""

from __future__ import annotations

import time
from collections.abc import Callable

from bench.errors import BenchError
from bench.procs import Child


def wait_until(cond: Callable[[], bool], timeout: float, what: str, child: Child | None = None,
               every: float = 0.05) -> float:
    """CLOCK_MONOTONIC time at which ``cond`` first held."""
    deadline = time.monotonic() + timeout
    while True:
        if cond():
            return time.monotonic()
        if child is not None and child.proc.poll() is not None:
            raise BenchError(f"{child.name} exited ({child.proc.returncode}) while waiting for {what}; "
                             f"see {child.log_path}")
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)
