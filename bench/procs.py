"""Child processes of the harness: the one driver of a child process group
(``service.drills.process``), with its peak memory sampled. Children still alive when the
harness stops are killed by ``kill_all``."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from bench.errors import BenchError
from bench.rss import RssSampler
from service.drills.process import ChildProcess, Line

RESULT_PREFIX = "RESULT "
__all__ = ["RESULT_PREFIX", "Child", "Line", "kill_all", "run_to_end"]

_live: set[Child] = set()
_live_lock = threading.Lock()


class Child(ChildProcess):
    """A child of the harness (``service.drills.process``), its memory sampled while it runs,
    killed by ``kill_all`` if the harness stops first."""

    def __init__(self, name: str, args: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        super().__init__(name, args, log_path, env, cwd, error=BenchError)
        with _live_lock:
            _live.add(self)
        self.rss = RssSampler(self.proc.pid)
        self.rss.start()

    def kill_group(self) -> None:
        self.signal(signal.SIGKILL)

    def release(self) -> None:
        self.rss.stop()
        super().release()
        with _live_lock:
            _live.discard(self)

    def result(self) -> dict[str, Any]:
        """The JSON a worker printed on its ``RESULT`` line."""
        for line in reversed(self.lines):
            if line.text.startswith(RESULT_PREFIX):
                value = orjson.loads(line.text[len(RESULT_PREFIX):])
                if isinstance(value, dict):
                    return value
        raise BenchError(f"{self.name} printed no result line; see {self.log_path}")


def run_to_end(name: str, args: Sequence[str], log_path: Path, timeout: float,
               env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Child:
    """Start a child, wait for it, and fail unless it exits 0."""
    child = Child(name, args, log_path, env, cwd)
    code = child.finish(timeout)
    if code != 0:
        tail = " | ".join(line.text for line in child.lines[-3:])
        raise BenchError(f"{name} exited {code}: {tail}; see {log_path}")
    return child


def kill_all() -> None:
    """Kill every child process group still running (used when the harness stops)."""
    with _live_lock:
        children = list(_live)
    for child in children:
        child.kill_group()
        with contextlib.suppress(Exception):
            child.proc.wait(10)
            child.release()
