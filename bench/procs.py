"""Child processes of the harness: each in a session of its own, output stamped on arrival.

Every child is started with ``start_new_session=True``, so ``os.killpg`` reaches what it
started too (for brewstream: the Spark JVM and its Python workers). Output lines (stdout
and stderr merged) are copied to a log file and kept with the CLOCK_MONOTONIC time they
arrived: brewstream logs a line per committed batch, so arrival times give millisecond
timings without touching its log format. Children still alive when the harness stops
are killed by ``kill_all``.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

from bench.errors import BenchError
from bench.rss import RssSampler

RESULT_PREFIX = "RESULT "

_live: set[Child] = set()
_live_lock = threading.Lock()


@dataclass(frozen=True)
class Line:
    t: float
    text: str


class Child:
    def __init__(self, name: str, args: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.name = name
        self.log_path = log_path
        self.lines: list[Line] = []
        self._cond = threading.Condition()
        self._eof = False
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log: IO[bytes] = open(log_path, "ab")  # noqa: SIM115 - closed in finish()
        self.started = time.monotonic()
        self.ended = 0.0
        self._released = False
        self.proc = subprocess.Popen(
            list(args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}, cwd=cwd, start_new_session=True,
        )
        with _live_lock:
            _live.add(self)
        self.rss = RssSampler(self.proc.pid)
        self.rss.start()
        self._reader = threading.Thread(target=self._read, name=f"out-{name}", daemon=True)
        self._reader.start()

    def exit_reason(self) -> str | None:
        """Why waiting on this child is pointless (it exited), or None while it runs."""
        code = self.proc.poll()
        return None if code is None else f"{self.name} exited ({code}); see {self.log_path}"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in iter(self.proc.stdout.readline, b""):
            now = time.monotonic()
            self._log.write(raw)
            with self._cond:
                self.lines.append(Line(now, raw.decode(errors="replace").rstrip("\n")))
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def wait_for(self, pattern: re.Pattern[str], timeout: float, after: int = 0) -> tuple[Line, re.Match[str]]:
        """The first line from index ``after`` on that matches; an error if the child ends first."""
        deadline = time.monotonic() + timeout
        seen = after
        with self._cond:
            while True:
                for line in self.lines[seen:]:
                    match = pattern.search(line.text)
                    if match:
                        return line, match
                seen = len(self.lines)
                if self._eof:
                    raise BenchError(f"{self.name} exited ({self.proc.poll()}) before printing "
                                     f"/{pattern.pattern}/; see {self.log_path}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BenchError(f"{self.name} printed no /{pattern.pattern}/ within {timeout:.0f}s; "
                                     f"see {self.log_path}")
                self._cond.wait(min(left, 1.0))

    def terminate(self) -> None:
        """SIGTERM to the main process only: brewstream then stops cleanly."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)

    def kill_group(self) -> None:
        # Once released, the group is gone and its id may one day be someone else's.
        if self._released:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def finish(self, timeout: float) -> int:
        """Wait for the exit (killing the group past ``timeout``) and release everything."""
        try:
            code = self.proc.wait(timeout)
            self.ended = time.monotonic()
        except subprocess.TimeoutExpired:
            self.kill_group()
            self.proc.wait(30)
            self._release()
            raise BenchError(f"{self.name} did not finish within {timeout:.0f}s; killed; see {self.log_path}") from None
        # Whatever the main process left behind in its group goes with it.
        self.kill_group()
        self._release()
        return code

    @property
    def wall_s(self) -> float:
        """Process start to exit (after ``finish``)."""
        return self.ended - self.started

    def _release(self) -> None:
        self._released = True
        self.rss.stop()
        self._reader.join(10)
        self._log.close()
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
            child._release()
