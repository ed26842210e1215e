"""``brewstream board`` as a child process on a free port, for tests: started, its URL read
from its first line, stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from sandbox.broker import free_port
from tests.support.helpers import Pipeline
from topics.clock import wait_until


def stop(proc: subprocess.Popen[bytes], timeout: float = 60) -> int | None:
    """SIGTERM and wait; then kill whatever is left of the process group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout)
    code = proc.poll()
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return code


@contextmanager
def board(pipe: Pipeline, windows_state: Path, log: Path, revenue_state: Path | None = None) -> Iterator[str]:
    """``brewstream board`` on a free port; yields its URL and checks it stops cleanly. Without
    ``revenue_state`` it reads a revenue state dir that does not exist (never the tree's own)."""
    env = {**os.environ, "KAFKA_BOOTSTRAP": pipe.conn.bootstrap, **pipe.env}
    revenue_state = revenue_state or log.parent / "no-revenue-state"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "board", "--port", str(free_port()),
             "--windows-state-dir", str(windows_state), "--revenue-state-dir", str(revenue_state)],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        line = wait_until(lambda: proc.poll() is None and _url_line(log), 30, f"the board to serve ({log})")
        yield line.split()[2]
    finally:
        code = stop(proc, timeout=15)
    assert code == 0, log.read_text()


def _url_line(log: Path) -> str | None:
    return next((ln for ln in log.read_text().splitlines() if ln.startswith("board: serving http://")), None)
