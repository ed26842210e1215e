"""The class archive's bookkeeping on real files: the JVM never gets a part that is not
whole, an archive that no longer has its recorded size, or one a live writer still writes.
(The JVM itself writing and mapping one: tests/integration/test_jvm_archive.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.spark import cache_files, jvm_archive
from service.spark.jvm_archive import MAGIC, Plan, plan

REGION_LINE = ("[23.6s][info][cds] Shared file region ({name})  {i}: {size} bytes, addr 0x0000000800bc7000 "
               "file offset 0x{offset:08x} crc 0x99649694\n")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(cache_files.CACHE_ENV, str(tmp_path))
    yield tmp_path


def write_part(part: Path, regions: list[tuple[int, int]], size: int, header: bytes = MAGIC) -> None:
    """A part as the JVM leaves it: ``regions`` (offset, length) logged, ``size`` bytes on disk."""
    part.write_bytes(header[:size] + bytes(max(0, size - len(header))))
    part.with_suffix(".log").write_text("".join(
        REGION_LINE.format(name=name, i=i, size=length, offset=offset)
        for i, ((offset, length), name) in enumerate(zip(regions, ["rw ", "ro ", "bm "] * 9, strict=False))))


def writing_plan() -> Plan:
    p = plan([], write=True)
    assert p.part is not None and "-XX:ArchiveClassesAtExit=" in p.options, p
    return p


def test_off_means_nothing_for_the_jvm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cache_files.CACHE_ENV, "off")
    assert plan([], write=True) == Plan()


def test_a_whole_part_becomes_the_archive_the_next_jvm_maps(cache: Path) -> None:
    first = writing_plan()
    assert first.part is not None
    write_part(first.part, [(4096, 1000), (8192, 500), (12288, 100)], 12288 + 100)
    first.finish(None)
    second = plan([], write=True)
    assert second.part is None and second.options.startswith("-XX:SharedArchiveFile=")
    archive = Path(second.options.split()[0].split("=", 1)[1])
    assert archive.stat().st_size == 12388
    assert sorted(p.suffix for p in cache.iterdir()) == [".jsa", ".json", ".lock"]


def test_only_one_writer_at_a_time(cache: Path) -> None:
    first = writing_plan()
    try:
        assert plan([], write=True) == Plan()  # the lock is taken: no second writer, and nothing to map
    finally:
        first.release()
    writing_plan().release()


def test_a_part_without_its_header_is_dropped_and_written_again(cache: Path) -> None:
    first = writing_plan()
    assert first.part is not None
    write_part(first.part, [(4096, 1000)], 5096, header=bytes(4))  # killed before the header was written
    first.finish(None)
    assert not list(cache.glob("*.jsa")) and not list(cache.glob("*.part"))
    writing_plan().release()


def test_an_archive_cut_short_later_is_never_mapped(cache: Path) -> None:
    first = writing_plan()
    assert first.part is not None
    write_part(first.part, [(4096, 1000)], 5096)
    first.finish(None)
    archive = next(cache.glob("*.jsa"))
    archive.chmod(0o644)
    with archive.open("r+b") as f:
        f.truncate(4096)
    p = plan([], write=True)
    assert "SharedArchiveFile" not in p.options and p.part is not None  # dropped, and written anew
    p.release()
    assert not archive.exists()


def test_a_part_whose_writer_still_runs_is_left_alone(cache: Path) -> None:
    first = writing_plan()
    assert first.part is not None
    write_part(first.part, [(4096, 1000)], 5096)
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(first.part)])
    try:
        first.writer_started(writer.pid)
        first.release()  # the writing process died; its JVM lives on
        p = plan([], write=True)
        assert p == Plan()  # nothing to map yet, and no second writer beside the live one
        assert first.part.exists()
    finally:
        writer.kill()
        writer.wait()
    p = plan([], write=True)  # the writer is gone: its whole part is taken
    assert p.options.startswith("-XX:SharedArchiveFile=")


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(regions=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 1 << 20)), max_size=4),
       size=st.integers(0, 1 << 21), header=st.binary(min_size=4, max_size=4) | st.just(MAGIC))
def test_whole_agrees_with_its_definition(tmp_path: Path, regions: list[tuple[int, int]], size: int,
                                          header: bytes) -> None:
    part = tmp_path / f"spark-driver-k.{os.getpid()}.part"
    write_part(part, regions, size, header)
    expected = size if header == MAGIC and size >= len(MAGIC) and regions and size >= max(o + n for o, n in regions) \
        else None
    assert jvm_archive._whole(part) == expected


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(), body=st.binary(max_size=64))
def test_whole_is_total_on_any_log_and_file(tmp_path: Path, text: str, body: bytes) -> None:
    part = tmp_path / "spark-driver-k.1.part"
    part.write_bytes(body)
    part.with_suffix(".log").write_text(text, errors="surrogatepass")
    assert jvm_archive._whole(part) in (None, len(body))


def test_a_cache_path_the_java_options_would_split_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for odd in ("with space", "with:colon", "with'quote"):
        monkeypatch.setenv(cache_files.CACHE_ENV, str(tmp_path / odd))
        assert plan([], write=True) == Plan()


def test_a_writer_killed_before_it_opened_its_part_leaves_nothing_for_long(cache: Path) -> None:
    first = writing_plan()
    assert first.part is not None
    first.part.with_suffix(".log").write_text("[0.1s][info][cds] optimized module handling: disabled\n")
    first.writer_started(2**22 + 1)  # no such process
    first.release()
    second = writing_plan()  # the dead writer's files are cleared, and this one writes
    second.release()
    assert [p.suffix for p in cache.iterdir()] == [".lock"]


def test_a_folder_without_flock_still_maps_a_whole_archive_and_writes_none(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = writing_plan()
    assert first.part is not None
    write_part(first.part, [(4096, 1000)], 5096)
    first.finish(None)

    def no_flock(path: Path) -> int | None:
        raise OSError(37, "No locks available")

    monkeypatch.setattr(jvm_archive, "try_lock", no_flock)
    assert plan([], write=True).options.startswith("-XX:SharedArchiveFile=")
    next(cache.glob("*.jsa")).unlink()
    assert plan([], write=True) == Plan()  # nothing to map, and no writer without the lock


@pytest.mark.parametrize(("options", "shares"), [
    ("-Xshare:off", True), ("-Xmx1g -XX:SharedArchiveFile=/a/b.jsa", True), ("-XX:ArchiveClassesAtExit=/x.jsa", True),
    ("-XX:+AutoCreateSharedArchive -XX:SharedArchiveFile=/x.jsa", True), ("-Xshare:auto", True),
    ("-XX:+UseSerialGC -Dlog=1", False), ("-Dp=-Xshare:off", False), ("", False), ("-Xlog:cds=info", False),
])
def test_class_sharing_options_of_the_users_leave_the_archive_to_them(options: str, shares: bool) -> None:
    assert jvm_archive.shares_classes(options) is shares


@given(st.text(max_size=80))
def test_any_options_text_is_read_without_error(text: str) -> None:
    assert isinstance(jvm_archive.shares_classes(text), bool)


def test_a_folder_with_files_on_the_class_path_means_no_archive(cache: Path, tmp_path: Path) -> None:
    """The JVM would neither map nor write one; an empty folder or a jar is no obstacle."""
    first = writing_plan()
    assert first.part is not None
    write_part(first.part, [(4096, 1000)], 4096 + 1000)
    first.finish(None)
    empty, full, jar = tmp_path / "empty", tmp_path / "full", tmp_path / "a.jar"
    empty.mkdir()
    full.mkdir()
    (full / "log4j2.properties").write_text("")
    jar.write_bytes(b"PK")
    assert plan([], write=True, class_path=[jar, empty, tmp_path / "missing"]).options.startswith(
        "-XX:SharedArchiveFile=")
    assert plan([], write=True, class_path=[jar, full]) == Plan()


def old_archive(cache: Path, key: str, used_at: float) -> Path:
    """An archive of another set of jars, last mapped at ``used_at``."""
    archive = cache / f"spark-driver-{key}.jsa"
    archive.write_bytes(MAGIC)
    meta = archive.with_suffix(".json")
    meta.write_text('{"size": 4}')
    os.utime(meta, (used_at, used_at))
    return archive


def test_keeping_an_archive_drops_the_least_recently_used_beyond_the_limit(cache: Path) -> None:
    olds = [old_archive(cache, f"old{i}", used_at=1_000_000 + i) for i in range(6)]  # old5 used last
    held = jvm_archive.try_lock(olds[0].with_suffix(".lock"))  # old0 is being checked by another start
    try:
        first = writing_plan()
        assert first.part is not None
        write_part(first.part, [(4096, 1000)], 5096)
        first.finish(None)
    finally:
        assert held is not None
        os.close(held)
    kept = {p.stem.removeprefix("spark-driver-") for p in cache.glob("*.jsa")}
    new = kept - {f"old{i}" for i in range(6)}
    assert len(new) == 1  # the one just written, whatever it was used before
    assert kept - new == {"old0", "old3", "old4", "old5"}  # the last used, and the locked one left for later
    assert not (cache / "spark-driver-old1.json").exists()


def test_a_start_that_maps_an_archive_marks_it_used(cache: Path) -> None:
    first = writing_plan()
    assert first.part is not None
    write_part(first.part, [(4096, 1000)], 5096)
    first.finish(None)
    meta = next(cache.glob("*.json"))
    os.utime(meta, (1_000_000, 1_000_000))
    assert plan([], write=True).options.startswith("-XX:SharedArchiveFile=")
    assert meta.stat().st_mtime > 1_000_000
    for i in range(jvm_archive.KEEP_ARCHIVES + 1):  # newer archives of other jars, none used since
        old_archive(cache, f"other{i}", used_at=999_000 + i)
    jvm_archive._prune(cache / f"spark-driver-other{jvm_archive.KEEP_ARCHIVES}.jsa")
    assert meta.with_suffix(".jsa").exists()


def test_ending_a_jvm_closes_its_stdin_and_waits_a_bounded_time() -> None:
    # pyspark's gateway exits when its stdin closes; `cat` does the same.
    obeys = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert jvm_archive.end_jvm(obeys, 10) and obeys.returncode == 0
    assert jvm_archive.end_jvm(obeys, 10) and jvm_archive.end_jvm(None, 10)  # gone already: nothing to do
    deaf = subprocess.Popen(["sleep", "60"], stdin=subprocess.PIPE)
    try:
        assert not jvm_archive.end_jvm(deaf, 0.2)  # never raises: the stop itself is done
        assert deaf.poll() is None
    finally:
        deaf.kill()
        deaf.wait()
