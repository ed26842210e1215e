"""A child process group, as the drills, the benchmark and the tests drive a daemon.

The child starts in a session of its own, so a signal to its group reaches what it
started too (brewstream's Spark JVM and Python workers). Its output (stdout and stderr
merged) is appended to a log file and kept line by line with the CLOCK_MONOTONIC time each
line arrived: brewstream logs a line per committed batch, so arrival times give
millisecond timings without touching its log format.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from topics.errors import BrewError


@dataclass(frozen=True)
class Line:
    t: float  # monotonic, when it arrived
    text: str


class ChildProcess:
    """One child and its process group, from start to exit. ``error`` is the exception type
    its waits raise (the benchmark has its own)."""

    def __init__(self, name: str, args: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None,
                 cwd: Path | None = None, error: type[Exception] = BrewError) -> None:
        self.name, self.log_path, self.error = name, log_path, error
        self.lines: list[Line] = []
        self._cond = threading.Condition()
        self._eof = False
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log: IO[bytes] = open(log_path, "ab")  # noqa: SIM115 - closed when the output ends
        self.started = time.monotonic()
        self.ended = 0.0
        self._released = False
        self.proc = subprocess.Popen(
            list(args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}, cwd=cwd, start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, name=f"out-{name}", daemon=True)
        self._reader.start()

    # ---------------------------------------------------------------- output

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in iter(self.proc.stdout.readline, b""):
            now = time.monotonic()
            self._log.write(raw)
            self._log.flush()
            with self._cond:
                self.lines.append(Line(now, raw.decode(errors="replace").rstrip("\n")))
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()
        self._log.close()

    def text(self, after: int = 0) -> str:
        """Everything it printed, from line ``after`` on."""
        with self._cond:
            return "".join(line.text + "\n" for line in self.lines[after:])

    def wait_for(self, pattern: re.Pattern[str] | str, timeout: float, after: int = 0) -> tuple[Line, re.Match[str]]:
        """The first line from index ``after`` on that matches; ``error`` if the child ends first
        or nothing matches within ``timeout``."""
        regex = re.compile(re.escape(pattern)) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        seen = after
        with self._cond:
            while True:
                for line in self.lines[seen:]:
                    match = regex.search(line.text)
                    if match:
                        return line, match
                seen = len(self.lines)
                if self._eof:
                    raise self.error(f"{self.name} exited ({self.proc.poll()}) before printing "
                                     f"/{regex.pattern}/; see {self.log_path}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise self.error(f"{self.name} printed no /{regex.pattern}/ within {timeout:.0f}s; "
                                     f"see {self.log_path}")
                self._cond.wait(min(left, 1.0))

    def wait_until(self, cond: Callable[[str], bool], timeout: float, what: str) -> None:
        """Until ``cond`` holds for everything printed so far; ``error`` if it exits first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not cond("".join(line.text + "\n" for line in self.lines)):
                if self._eof:
                    raise self.error(f"{self.name} exited ({self.proc.poll()}) before {what}; see {self.log_path}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise self.error(f"timed out after {timeout:.0f}s waiting for {self.name} {what}; "
                                     f"see {self.log_path}")
                self._cond.wait(min(left, 0.5))

    # ---------------------------------------------------------------- the process

    @property
    def pid(self) -> int:
        """The main process's id, which is also its group's."""
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout)

    def send_signal(self, sig: int) -> None:
        """``sig`` to the main process only (as ``subprocess.Popen`` does)."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(sig)

    def exit_reason(self) -> str | None:
        """Why waiting on this child is pointless (it exited), or None while it runs."""
        code = self.proc.poll()
        return None if code is None else f"{self.name} exited ({code}); see {self.log_path}"

    def signal(self, sig: int) -> None:
        """``sig`` to the whole group (SIGSTOP and SIGCONT freeze and wake all of it)."""
        if not self._released:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def terminate(self) -> None:
        """SIGTERM to the main process only: brewstream then stops cleanly."""
        self.send_signal(signal.SIGTERM)

    def kill(self, timeout: float = 30) -> None:
        """SIGKILL to the group, and wait for the main process."""
        self.signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout)

    def stop(self, timeout: float = 120) -> int:
        """SIGTERM, then wait for the exit (the group killed past ``timeout``); its exit code."""
        if self.proc.poll() is None:
            self.terminate()
        return self.finish(timeout)

    def finish(self, timeout: float) -> int:
        """Wait for the exit (killing the group past ``timeout``) and release everything."""
        try:
            code = self.proc.wait(timeout)
            self.ended = time.monotonic()
        except subprocess.TimeoutExpired:
            self.kill()
            self.release()
            raise self.error(f"{self.name} did not finish within {timeout:.0f}s; killed; see {self.log_path}") \
                from None
        self.signal(signal.SIGKILL)  # whatever the main process left behind in its group goes with it
        self.release()
        return code

    @property
    def wall_s(self) -> float:
        """Process start to exit (after ``finish``)."""
        return self.ended - self.started

    def release(self) -> None:
        """The group is gone: its id may one day be someone else's, so it is never signalled again."""
        self._released = True
        self._reader.join(10)
