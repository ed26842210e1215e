"""How a blob crosses from the JVM (``handed_over``): through a temporary file, or as
the answer itself; the file never outlives the call."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.spark import blob as blob_module
from service.spark.blob import handed_over, sweep_blob_files


@pytest.fixture(autouse=True)
def _private_tempdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def _written(blob: bytes, answer: object | None = None) -> Callable[[str | None], object]:
    def call(path: str | None) -> object:
        assert path is not None
        Path(path).write_bytes(blob)
        return len(blob) if answer is None else answer
    return call


@given(st.binary(max_size=20_000))
def test_a_blob_written_to_its_file_comes_back_whole_and_the_file_goes(blob: bytes) -> None:
    assert handed_over(_written(blob), "a blob") == blob
    assert list(Path(tempfile.gettempdir()).glob("brewstream-blob-*")) == []


@given(st.binary(max_size=1000))
def test_a_blob_answered_itself_is_taken_as_is(blob: bytes) -> None:
    assert handed_over(lambda _path: bytearray(blob), "a blob") == blob
    assert list(Path(tempfile.gettempdir()).glob("brewstream-blob-*")) == []


def test_no_temporary_file_means_the_answer_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", "/nonexistent/brewstream-test")
    seen: list[str | None] = []
    assert handed_over(lambda path: seen.append(path) or b"abc", "a blob") == b"abc"
    assert seen == [None]


@pytest.mark.parametrize("answer", [7, -1, "3", "x", 2.0])
def test_a_length_that_is_not_the_files_is_a_value_error(answer: object) -> None:
    with pytest.raises(ValueError, match="a blob"):
        handed_over(_written(b"abc", answer), "a blob")
    assert list(Path(tempfile.gettempdir()).glob("brewstream-blob-*")) == []


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_killed_drivers_blob_file_goes_at_the_next_drivers_first_blob(monkeypatch: pytest.MonkeyPatch) -> None:
    folder = Path(tempfile.gettempdir())
    dead = folder / f"brewstream-blob-{_dead_pid()}-abc"
    live = folder / f"brewstream-blob-{os.getpid()}-def"
    unnamed = folder / "brewstream-blob-xyz"
    for path in (dead, live, unnamed):
        path.write_bytes(b"rows")
    monkeypatch.setattr(blob_module, "_swept", [])
    assert handed_over(_written(b"abc"), "a blob") == b"abc"
    assert sorted(folder.glob("brewstream-blob-*")) == sorted([live, unnamed])
    dead.write_bytes(b"rows")  # only the first blob of a process sweeps
    handed_over(_written(b"abc"), "a blob")
    assert dead.exists()
    assert sweep_blob_files(folder) == [dead] and not dead.exists()
