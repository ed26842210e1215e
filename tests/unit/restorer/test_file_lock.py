"""restorer.file_lock on real files: one holder at a time, and a holder's death frees it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from restorer.file_lock import try_lock
from restorer.store import StateDir
from topics.errors import BrewError


def test_one_holder_at_a_time_and_closing_releases(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    first = try_lock(path)
    assert first is not None
    assert try_lock(path) is None  # flock belongs to the open file, so this process is refused too
    os.close(first)
    second = try_lock(path)
    assert second is not None
    os.close(second)


def test_a_killed_holder_leaves_no_lock(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from restorer.file_lock import try_lock; "
         f"assert try_lock(__import__('pathlib').Path({str(path)!r})) is not None; print('held', flush=True); "
         "sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=Path(__file__).parents[3])
    assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
    assert try_lock(path) is None
    holder.kill()
    holder.wait(10)
    fd = try_lock(path)
    assert fd is not None
    os.close(fd)


def test_a_file_that_cannot_be_opened_raises(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        try_lock(tmp_path / "missing-dir" / "x.lock")


def test_a_state_dir_held_elsewhere_names_the_holder(tmp_path: Path) -> None:
    with StateDir(tmp_path / "state"), \
            pytest.raises(BrewError, match=rf"in use by another brewstream process \(pid {os.getpid()}\)"):
        StateDir(tmp_path / "state").lock()
    with StateDir(tmp_path / "state"):  # released on exit
        pass


def test_the_holder_named_is_only_the_digits_of_the_lock_file(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "brewstream.lock").write_bytes(b"\x1b[2J12\n34" + b"9" * 10_000)
    fd = try_lock(state / "brewstream.lock")  # another process's lock, as the daemon sees it
    try:
        # The first 32 bytes, their digits only: no escape sequence reaches a terminal.
        with pytest.raises(BrewError, match=rf"\(pid 21234{'9' * 23}\)"):
            StateDir(state).lock()
    finally:
        assert fd is not None
        os.close(fd)
