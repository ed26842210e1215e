"""The JVM started ahead (service.spark.head_start): the shape of a command line, and the
hand-over to pyspark, with a stand-in process that speaks the gateway's one file of protocol
(its address written where the environment says, then waiting for its stdin to close)."""

from __future__ import annotations

import errno
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.cli.main import cli
from service.spark import head_start
from service.spark.cache_files import CACHE_ENV
from service.spark.head_start import CONN_INFO_ENV, shape

WORD = st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=12)
FLAG = st.from_regex(r"--[a-z][a-z-]{0,10}", fullmatch=True)
VALUE = st.from_regex(r"[a-z0-9/._]{1,10}", fullmatch=True)

# Writes its gateway's "address" where pyspark would read it, then lives until its stdin closes.
GATEWAY = ("import os, sys; p = os.environ['_PYSPARK_DRIVER_CONN_INFO_PATH']; "
           "open(p + '.tmp', 'wb').write(b'port+secret'); os.replace(p + '.tmp', p); sys.stdin.read()")
COMMAND = [sys.executable, "-c", GATEWAY]


@given(st.lists(WORD, max_size=8))
def test_shape_is_total_and_names_a_word_of_the_line(argv: list[str]) -> None:
    line = shape(argv)
    assert line is None or (line[0] in argv and not line[0].startswith("-"))


@given(st.sampled_from(["run", "windows", "revenue"]), st.lists(st.tuples(FLAG, VALUE), max_size=5),
       st.lists(st.tuples(FLAG, VALUE), max_size=5), st.randoms())
def test_a_shape_is_the_command_and_its_flags_whatever_their_values_and_order(
        command: str, group: list[tuple[str, str]], flags: list[tuple[str, str]], rnd: object) -> None:
    group = [(f, v) for f, v in group if f not in ("--help", "--version")]
    flags = [(f, v) for f, v in flags if f not in ("--help", "--version")]
    argv = [w for pair in group for w in pair] + [command] + [w for pair in flags for w in pair]
    expected = [command, *sorted({f for f, _ in group} | {f for f, _ in flags})]
    assert shape(argv) == expected
    # Other values, flags in another order, a value given with '=': the same shape.
    shuffled = list(flags)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    other = ([f"{f}=x{v}" for f, v in group] + [command]
             + [w for f, v in shuffled for w in (f, v[::-1] + "0")])
    assert shape(other) == expected


def test_a_call_for_help_or_no_command_has_no_shape() -> None:
    assert shape(["run", "--help"]) is None
    assert shape(["-h"]) is None
    assert shape(["--log-level", "debug"]) is None
    assert shape(["--log-level", "debug", "run"]) == ["run", "--log-level"]


def test_every_option_of_the_group_takes_a_value_as_shape_assumes() -> None:
    options = [p for p in cli.params if isinstance(p, click.Option)]
    assert options
    for option in options:
        if option.name in ("help", "version"):
            continue
        assert not option.is_flag and not option.count and option.nargs == 1, option.name


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    for name in ("_ahead", "_shape_file", "_start_env"):
        monkeypatch.setattr(head_start, name, None)
    yield tmp_path / "cache"
    head_start.discard()


def pyspark_env(tmp_path: Path, **more: str) -> dict[str, str]:
    """The environment pyspark starts its JVM in: this process's, its own address file, more."""
    return {**os.environ, CONN_INFO_ENV: str(tmp_path / "pyspark-conn"), "SPARK_HOME": "/opt/spark", **more}


def test_a_start_remembers_and_the_next_of_its_shape_hands_over_the_jvm_started_ahead(
        cache: Path, tmp_path: Path) -> None:
    argv = ["run", "--state-dir", str(tmp_path / "a")]
    head_start.start_ahead(argv)
    assert head_start._ahead is None  # nothing kept yet
    env = pyspark_env(tmp_path, BREWSTREAM_SPARK_LOG=str(tmp_path / "a" / "spark.log"))
    head_start.remember(COMMAND, env)
    (kept,) = (cache / "ahead").glob("*.json")
    assert kept.stat().st_mode & 0o077 == 0
    # Only what the start added, nothing that differs per start.
    assert json.loads(kept.read_text())["added"] == {"SPARK_HOME": "/opt/spark"}

    # The next start of that shape, with another state dir.
    head_start._shape_file = head_start._start_env = None
    head_start.start_ahead(["run", "--state-dir", str(tmp_path / "b")])
    ahead = head_start._ahead
    assert ahead is not None and ahead.proc.poll() is None
    assert "BREWSTREAM_SPARK_LOG" not in ahead.env  # told once adopted (jvm_output.log_to)
    env = pyspark_env(tmp_path, BREWSTREAM_SPARK_LOG=str(tmp_path / "b" / "spark.log"))
    proc = head_start.adopt(COMMAND, env)
    assert proc is ahead.proc
    assert Path(env[CONN_INFO_ENV]).read_bytes() == b"port+secret"
    assert not Path(ahead.conn_dir).exists()
    assert proc.stdin is not None
    proc.stdin.close()  # as when this process ends: the gateway exits
    assert proc.wait(30) == 0


@pytest.mark.parametrize("differs", ["command", "environment", "jar gone", "archive cut short", "exited"])
def test_a_jvm_started_ahead_that_is_not_the_one_pyspark_would_start_is_stopped(
        cache: Path, tmp_path: Path, differs: str) -> None:
    jar, archive = tmp_path / "x.jar", tmp_path / "a.jsa"
    jar.write_bytes(b"jar")
    archive.write_bytes(b"a" * 10)
    archive.with_suffix(".json").write_text(json.dumps({"size": 10}))
    # A stand-in for java: the extra arguments go to the script, which ignores them.
    command = [sys.executable, "-c", GATEWAY, "-cp", str(jar), f"-XX:SharedArchiveFile={archive}"]
    if differs == "exited":
        command = [sys.executable, "-c", "pass"]
    head_start.start_ahead(["windows", "--trigger", "1s"])
    head_start.remember(command, pyspark_env(tmp_path))
    head_start._shape_file = head_start._start_env = None
    if differs == "jar gone":
        jar.unlink()
    if differs == "archive cut short":
        archive.write_bytes(b"a" * 5)
    head_start.start_ahead(["windows", "--trigger", "2s"])
    ahead = head_start._ahead
    if differs in ("jar gone", "archive cut short"):
        assert ahead is None  # never started
        return
    assert ahead is not None
    asked = [*command, "more"] if differs == "command" else command
    env = pyspark_env(tmp_path, **({"SPARK_HOME": "/elsewhere"} if differs == "environment" else {}))
    assert head_start.adopt(asked, env) is None
    assert ahead.proc.poll() is not None
    assert not Path(env[CONN_INFO_ENV]).exists()
    assert not Path(ahead.conn_dir).exists()


def test_no_start_ahead_without_a_cache_folder_or_for_a_command_that_writes_the_archive(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    head_start.start_ahead(["run"])
    head_start.remember([*COMMAND, "-XX:ArchiveClassesAtExit=/x.part"], pyspark_env(tmp_path))
    assert not (cache / "ahead").exists()
    monkeypatch.setenv(CACHE_ENV, "off")
    head_start._shape_file = head_start._start_env = None
    head_start.start_ahead(["run"])
    head_start.remember(COMMAND, pyspark_env(tmp_path))
    assert not (cache / "ahead").exists()


def test_a_start_that_never_asks_for_its_jvm_stops_it(cache: Path, tmp_path: Path) -> None:
    head_start.start_ahead(["run"])
    head_start.remember(COMMAND, pyspark_env(tmp_path))
    head_start._shape_file = head_start._start_env = None
    head_start.start_ahead(["run"])
    ahead = head_start._ahead
    assert ahead is not None
    head_start.discard()
    assert ahead.proc.poll() is not None
    assert not Path(ahead.conn_dir).exists()


@pytest.mark.parametrize("trouble", ["a NUL in the command", "a NUL in a variable", "no room for its folder",
                                     "no home folder"])
def test_a_start_ahead_that_cannot_start_leaves_the_start_as_it_was(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trouble: str) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    head_start.start_ahead(["run"])
    command = [*COMMAND, "\0"] if trouble == "a NUL in the command" else COMMAND
    head_start.remember(command, pyspark_env(tmp_path, **({"SPARK_X": "a\0b"} if "variable" in trouble else {})))
    head_start._shape_file = head_start._start_env = None
    if trouble == "no room for its folder":
        def full(*_: object, **__: object) -> str:
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(tempfile, "mkdtemp", full)
    if trouble == "no home folder":
        monkeypatch.delenv(CACHE_ENV)
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
        def homeless() -> Path:
            raise RuntimeError("Could not determine home directory.")
        monkeypatch.setattr(Path, "home", staticmethod(homeless))
    head_start.start_ahead(["run"])  # no exception
    assert head_start._ahead is None
    assert not list(temp.iterdir())
