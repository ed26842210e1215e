"""How a blob crosses from the JVM (``handed_over``): through a temporary file, or as
the answer itself; the file never outlives the call."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.spark.blob import handed_over


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
