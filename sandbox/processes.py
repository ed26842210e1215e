"""What the sandboxes ask of a process they started, by pid, through /proc."""

from __future__ import annotations

import os
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, which still answers signal 0, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return True
    return state != "Z"


def cmdline(pid: int) -> bytes:
    """The process's NUL-separated command line; empty when it is gone. A pid file can
    point at a recycled pid: callers check this before they signal it."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def paused(pid: int) -> bool:
    """Whether ``pid`` is stopped by a signal (SIGSTOP): alive, but runs nothing."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state in ("T", "t")
