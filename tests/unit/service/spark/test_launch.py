"""The driver JVM's command without spark-submit's scripts: built once by the launcher, kept,
and the scripts left to run whenever this module would not do what they do."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.spark.cache_files import CACHE_ENV
from service.spark.launch import SUBMIT_CLASS, driver_command, parse_launcher_output

COMMAND = ["/jdk/bin/java", "-cp", "/spark/conf:/spark/jars/*", "-Xmx1g", SUBMIT_CLASS, "--master", "local[2]",
           "--conf", "spark.ui.enabled=false", "pyspark-shell"]


def launcher_output(command: list[str]) -> bytes:
    return b"\0\n" + b"".join(a.encode() + b"\0" for a in command)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Spark home as pyspark ships it, and a java that counts its calls and prints COMMAND
    the way Spark's launcher prints a command."""
    home = tmp_path / "spark"
    (home / "bin").mkdir(parents=True)
    (home / "jars").mkdir()
    (home / "jars" / "spark-core_2.13-4.0.1.jar").write_bytes(b"")
    (home / "bin" / "spark-submit").write_text("#!/bin/sh\n")
    (home / "bin" / "load-spark-env.sh").write_text("export SPARK_SCALA_VERSION=2.13\n")
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    (tmp_path / "out").write_bytes(launcher_output(COMMAND))
    java.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'calls'}\ncat {tmp_path / 'out'}\n")
    java.chmod(0o755)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return home


def env_of(home: Path, **more: str) -> dict[str, str]:
    return {"JAVA_HOME": str(home.parent / "jdk"), "PATH": os.environ["PATH"], **more}


def submit(home: Path, *args: str) -> list[str]:
    return [str(home / "bin" / "spark-submit"), "--conf", "spark.ui.enabled=false", *args, "pyspark-shell"]


def calls(home: Path) -> list[str]:
    path = home.parent / "calls"
    return path.read_text().splitlines() if path.exists() else []


def test_the_launcher_runs_once_and_its_command_is_kept(home: Path) -> None:
    env = env_of(home)
    assert driver_command(submit(home), env) == COMMAND
    (launched,) = calls(home)
    assert launched.startswith("-Xmx128m -cp ") and "org.apache.spark.launcher.Main " + SUBMIT_CLASS in launched
    # What spark-submit and load-spark-env.sh export, the driver gets too.
    assert env["PYTHONHASHSEED"] == "0" and env["SPARK_SCALA_VERSION"] == "2.13"
    assert env["SPARK_HOME"] == str(home) and env["SPARK_ENV_LOADED"] == "1"
    # The next start with the same inputs asks no launcher.
    assert driver_command(submit(home), env_of(home)) == COMMAND
    assert len(calls(home)) == 1


@pytest.mark.parametrize("change", ["arguments", "variable", "defaults", "jars"])
def test_any_input_of_the_launcher_that_changes_asks_it_again(home: Path, change: str) -> None:
    driver_command(submit(home), env_of(home))
    env, args = env_of(home), submit(home)
    if change == "arguments":
        args = submit(home, "--conf", "spark.driver.memory=2g")
    elif change == "variable":
        env["SPARK_DIST_CLASSPATH"] = "/opt/hadoop/*"
    elif change == "defaults":
        (home / "conf").mkdir()
        (home / "conf" / "spark-defaults.conf").write_text("spark.driver.memory 2g\n")
    else:
        (home / "jars" / "extra.jar").write_bytes(b"")
    driver_command(args, env)
    assert len(calls(home)) == 2


def test_pyspark_s_own_per_start_variable_is_no_input(home: Path) -> None:
    driver_command(submit(home), env_of(home, _PYSPARK_DRIVER_CONN_INFO_PATH="/tmp/a"))
    driver_command(submit(home), env_of(home, _PYSPARK_DRIVER_CONN_INFO_PATH="/tmp/b"))
    assert len(calls(home)) == 1


def test_a_damaged_kept_command_is_built_again(home: Path) -> None:
    driver_command(submit(home), env_of(home))
    (kept,) = (home.parent / "cache" / "launch").glob("*.json")
    kept.write_text('{"not": "a command"')
    assert driver_command(submit(home), env_of(home)) == COMMAND
    assert len(calls(home)) == 2


def test_without_a_cache_the_launcher_runs_every_time(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, "off")
    assert driver_command(submit(home), env_of(home)) == COMMAND
    assert driver_command(submit(home), env_of(home)) == COMMAND
    assert len(calls(home)) == 2


def test_the_scripts_run_where_they_would_do_more(home: Path) -> None:
    # A spark-env.sh is sourced by the scripts: only they can.
    (home / "conf").mkdir()
    (home / "conf" / "spark-env.sh").write_text("export SPARK_DAEMON_MEMORY=2g\n")
    assert driver_command(submit(home), env_of(home)) is None
    conf = home.parent / "their-conf"
    conf.mkdir()
    assert driver_command(submit(home), env_of(home, SPARK_CONF_DIR=str(conf))) == COMMAND
    (conf / "spark-env.sh").write_text("\n")
    assert driver_command(submit(home), env_of(home, SPARK_CONF_DIR=str(conf))) is None
    # Not spark-submit; no java to be found.
    assert driver_command(["/usr/bin/true", "pyspark-shell"], env_of(home)) is None
    assert driver_command(submit(home), {"PATH": str(home)}) is None


def test_a_launcher_that_refuses_leaves_the_complaint_to_the_scripts(home: Path) -> None:
    (home.parent / "out").write_bytes(b"Error: Unrecognized option: --bad\n\0\n")
    env = env_of(home)
    assert driver_command(submit(home, "--bad"), env) is None
    assert env == env_of(home)  # the scripts set their variables themselves
    assert not list((home.parent / "cache").rglob("*.json"))


@given(st.lists(st.text().filter(lambda a: "\0" not in a), max_size=8))
def test_any_command_the_launcher_prints_reads_back(args: list[str]) -> None:
    command = [*args, SUBMIT_CLASS]
    assert parse_launcher_output(launcher_output(command)) == command


@given(st.binary(max_size=300))
def test_any_output_reads_as_a_command_of_spark_submit_or_none(out: bytes) -> None:
    got = parse_launcher_output(out)
    if got is not None:
        # Printed again, it is what followed the marker, and what came before it was blank.
        marker = out.find(b"\0\n")
        assert launcher_output(got) == out[marker:] and not out[:marker].strip() and SUBMIT_CLASS in got


def test_complaint_lines_or_a_cut_output_read_as_none() -> None:
    good = launcher_output(COMMAND)
    assert parse_launcher_output(good) == COMMAND
    assert parse_launcher_output(b"Usage: spark-submit\n" + good) is None
    assert parse_launcher_output(good[:-1]) is None
    assert parse_launcher_output(b"") is None
    assert parse_launcher_output(launcher_output(["/jdk/bin/java", "SomethingElse"])) is None


def test_a_command_kept_by_a_version_that_built_its_class_path_otherwise_is_built_again(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from service.spark import driver_jars

    driver_command(submit(home), env_of(home))
    monkeypatch.setattr(driver_jars, "FORM", "another way")
    driver_command(submit(home), env_of(home))
    assert len(calls(home)) == 2


def test_the_kept_command_names_spark_s_jars_less_the_unused(home: Path) -> None:
    (home / "jars" / "spark-mllib_2.13-4.0.1.jar").write_bytes(b"")
    (home.parent / "out").write_bytes(launcher_output(
        ["/jdk/bin/java", "-cp", f"/spark/conf:{home / 'jars'}/*", "-Xmx1g", SUBMIT_CLASS, "pyspark-shell"]))
    built = driver_command(submit(home), env_of(home))
    assert built is not None
    assert built[2].split(os.pathsep) == ["/spark/conf", str(home / "jars" / "spark-core_2.13-4.0.1.jar")]
    # The next start runs the same command, kept.
    assert driver_command(submit(home), env_of(home)) == built
    assert len(calls(home)) == 1
