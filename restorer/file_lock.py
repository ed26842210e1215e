"""An exclusive, non-blocking flock on a file: one owner at a time, released by the kernel
when its descriptor closes, so a killed owner never leaves a stale lock behind."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


def try_lock(path: Path) -> int | None:
    """The open descriptor that holds the lock on ``path`` (created if missing), or None
    while another process holds it. Close the descriptor to release the lock.

    Raises OSError when the file cannot be opened or locked for another reason."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError:
        os.close(fd)
        raise
    return fd
