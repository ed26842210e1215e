"""An exclusive, non-blocking flock on a file: one owner at a time, released by the kernel
when its descriptor closes, so a killed owner never leaves a stale lock behind.

A folder one process owns (a state dir, a Spark checkpoint dir) holds ``brewstream.lock``,
locked by its owner, with the owner's pid in it for the refusal another process gets
(``lock_folder``)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from topics.errors import BrewError, disk_problem

LOCK_NAME = "brewstream.lock"


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


def lock_folder(folder: Path, what: str, flag: str) -> int:
    """Take ``folder`` (created if missing) for this process: the descriptor holding its
    ``brewstream.lock``. Another owner, or a folder that cannot be used, is one line naming
    ``what`` it is (``state dir``) and the ``flag`` that picks another."""
    lock_file = folder / LOCK_NAME
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = try_lock(lock_file)
    except OSError as exc:
        raise BrewError(f"cannot use the {what} {folder}: {exc.strerror}; "
                        f"{disk_problem(str(exc.strerror)) or 'check the path and its permissions'}") from None
    if fd is None:
        raise BrewError(f"{what} {folder} is in use by another brewstream process (pid {holder(lock_file)}); "
                        f"stop it first or pass another {flag}")
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
    except OSError:
        pass  # the pid is only a hint for the refusal above; the flock is what counts
    return fd


def holder(lock_file: Path) -> str:
    """The pid the holder of ``lock_file`` wrote: digits, and no more (it is printed)."""
    try:
        with lock_file.open("rb") as f:
            return "".join(c for c in f.read(32).decode(errors="replace") if c in "0123456789") or "?"
    except OSError:
        return "?"
