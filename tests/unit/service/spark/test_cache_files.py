"""The JVM cache keeps its most recently used files (``service.spark.cache_files``)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from service.spark.cache_files import keep_newest


@given(st.lists(st.integers(min_value=1, max_value=10**9), unique=True, max_size=12),
       st.integers(min_value=-2, max_value=15))
def test_the_files_modified_last_are_the_ones_kept(mtimes: list[int], keep: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        for i, mtime in enumerate(mtimes):
            path = Path(folder) / f"{i}.json"
            path.write_text("x")
            os.utime(path, (mtime, mtime))
        keep_newest(Path(folder).glob("*.json"), keep)
        oracle = {f"{i}.json" for i, _ in sorted(enumerate(mtimes), key=lambda im: -im[1])[:max(keep, 0)]}
        assert {p.name for p in Path(folder).iterdir()} == oracle


def test_a_file_another_start_removed_meanwhile_is_no_error(tmp_path: Path) -> None:
    present = tmp_path / "present.jar"
    present.write_text("x")
    keep_newest([tmp_path / "gone.jar", present], 0)
    assert not present.exists()
    keep_newest([tmp_path / "gone.jar"], 1)


def test_a_kept_file_nested_past_the_json_parser_is_no_file(tmp_path: Path) -> None:
    """The files the launcher keeps (its commands, a class archive's size) are read as
    damaged, not raised on, whatever they hold: JSON nested past the parser's depth too."""
    from service.spark import head_start, launch
    from service.spark.cache_files import archive_whole

    deep = '{"a":' * 5000 + "1" + "}" * 5000
    archive = tmp_path / "classes.jsa"
    archive.write_bytes(b"x")
    for path in (tmp_path / "command.json", archive.with_suffix(".json")):
        path.write_text(deep)
    assert head_start._read(tmp_path / "command.json") is None
    assert launch._kept(tmp_path / "command.json", None) is None
    assert not archive_whole(archive)
