"""Spark's class archive with the real JVM: written once at a clean stop, mapped by the next
start, and a damaged one or one whose writer was killed mid-way never reaches a JVM, while
the counts stay exact through all of it."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from service.spark.cache_files import CACHE_ENV
from service.spark.jvm_output import SPARK_LOG_ENV
from service.spark.session import CATCH_UP_JIT_OPTION, DAEMON_GC_OPTIONS, METASPACE_OPTION, QUICK_JIT_OPTION
from tests.support.drink_count import make_orders
from tests.support.helpers import Pipeline, brew, counts_json, oracle, order_bytes, produce
from topics.clock import wait_until

pytestmark = pytest.mark.spark


def run_args(d: Path, *extra: str) -> tuple[str, ...]:
    return ("run", "--state-dir", str(d / "state"), "--checkpoint-dir", str(d / "ckpt"), *extra)


def jvm_given(option: str) -> int | None:
    """The process started with ``option`` on its command line (this test's cache is its own)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if option.encode() in cmdline.read_bytes().split(b"\0"):
                return int(cmdline.parent.name)
        except OSError:
            continue
    return None


def test_the_archive_is_written_once_mapped_after_and_never_mapped_damaged(pipe: Pipeline, tmp_path: Path) -> None:
    cache = tmp_path / "jvm-cache"
    env = {**pipe.env, CACHE_ENV: str(cache)}
    orders = make_orders(30, seed=11)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in orders))

    # 1. No archive yet: this run's JVM writes one as it exits, and the run waits for it.
    first = brew(pipe.conn, *run_args(tmp_path, "--available-now"), env=env, check=True)
    assert "kept Spark's class archive" in first.stderr, first.stderr[-3000:]
    (archive,) = cache.glob("*.jsa")
    assert not list(cache.glob("*.part"))
    # A catch-up keeps the tiered JIT, with thresholds raised for Spark's start
    # (service.spark.session.QUICK_JIT_OPTION, CATCH_UP_JIT_OPTION).
    (catch_up,) = [json.loads(p.read_text()) for p in (cache / "launch").glob("*.json")]
    assert QUICK_JIT_OPTION not in catch_up and CATCH_UP_JIT_OPTION in catch_up, catch_up
    assert "-XX:+UseParallelGC" in catch_up and "-XX:+UseSerialGC" not in catch_up, catch_up

    # 2. The next start maps it: the JVM's memory map names the file. It writes nothing.
    log = tmp_path / "second.log"
    daemon = pipe.spawn(*run_args(tmp_path), log=log, env={CACHE_ENV: str(cache)})
    try:
        wait_until(lambda: "role: active" in log.read_text(), 180, "the second daemon to start")
        jvm = wait_until(lambda: jvm_given(f"-XX:SharedArchiveFile={archive}"), 30, "the second daemon's JVM")
        maps = Path(f"/proc/{jvm}/maps").read_text()
        assert str(archive) in maps, "the JVM did not map the archive"
        # Started without spark-submit's scripts, from the command Spark's launcher built and
        # brewstream kept (service/spark/launch.py).
        kept = [json.loads(p.read_text()) for p in (cache / "launch").glob("*.json")]
        command = Path(f"/proc/{jvm}/cmdline").read_bytes().decode().split("\0")[:-1]
        assert command in kept
        assert QUICK_JIT_OPTION in command, command  # a daemon compiles with C1 alone, at Java's thresholds
        assert CATCH_UP_JIT_OPTION not in command, command
        assert set(DAEMON_GC_OPTIONS.split()) <= set(command), command  # and collects with the serial collector
        # The command names no state dir, so the one kept serves every state dir; Spark's
        # log is named in the JVM's environment instead.
        assert str(tmp_path / "state") not in Path(f"/proc/{jvm}/cmdline").read_text(errors="replace")
        spark_log = f"{SPARK_LOG_ENV}={(tmp_path / 'state' / 'spark.log').resolve()}"
        assert spark_log.encode() in Path(f"/proc/{jvm}/environ").read_bytes().split(b"\0")
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(120) == 0, log.read_text()[-3000:]
    finally:
        if daemon.poll() is None:
            daemon.kill()
    assert "saving Spark's classes" not in log.read_text()
    # Its JVM outlives the daemon by a moment. A file cut short under a JVM that maps it
    # kills that JVM (SIGBUS): brewstream never does that (it renames and unlinks).
    wait_until(lambda: jvm_given(f"-XX:SharedArchiveFile={archive}") is None, 60, "the second daemon's JVM to exit")

    # 3. The archive cut short: it is dropped, not mapped (the JVM would die of SIGBUS), and
    # this daemon writes a new one, but the whole process group is killed while it does.
    archive.chmod(0o644)
    with archive.open("r+b") as f:
        f.truncate(1 << 20)
    log = tmp_path / "third.log"
    daemon = pipe.spawn(*run_args(tmp_path), log=log, env={CACHE_ENV: str(cache)})
    try:
        wait_until(lambda: "role: active" in log.read_text(), 180, "the third daemon to start")
        assert not archive.exists()
        daemon.send_signal(signal.SIGTERM)
        wait_until(lambda: "saving Spark's classes" in log.read_text(), 120, "the third daemon to start saving")
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait(30)
    finally:
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGKILL)
    assert "kept Spark's class archive" not in log.read_text()
    left = [p for p in cache.iterdir() if p.suffix in (".part", ".log", ".pid")]
    assert left, "the killed writer left nothing behind"  # its log and pid; the part once it opened it

    # 4. The killed writer's part is dropped at the next start, which writes a whole archive;
    # the counts are exact throughout.
    last = brew(pipe.conn, *run_args(tmp_path, "--available-now"), env=env, check=True)
    assert "kept Spark's class archive" in last.stderr, last.stderr[-3000:]
    assert sorted(p.suffix for p in cache.iterdir() if p.is_file()) == [".jsa", ".json", ".lock"]
    assert archive.exists()
    assert counts_json(pipe.conn, tmp_path / "state")["counts"] == oracle(orders)


MARK = f"-Dbrew.test.mark={os.getpid()}"


def jvm_options_of_a_daemon(pipe: Pipeline, tmp_path: Path, java_conf: str, env: dict[str, str]) -> list[str]:
    """Start a daemon with ``--conf java_conf`` (Java options that carry ``MARK``), read its
    JVM's command line, then stop it with SIGTERM, which must end it with 0."""
    log = tmp_path / "daemon.log"
    daemon = pipe.spawn(*run_args(tmp_path), "--conf", java_conf, log=log, env=env)
    try:
        wait_until(lambda: "role: active" in log.read_text(), 180, "the daemon to start")
        jvm = wait_until(lambda: jvm_given(MARK), 30, "the daemon's JVM")
        options = Path(f"/proc/{jvm}/cmdline").read_bytes().decode().split("\0")
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(240) == 0, log.read_text()[-3000:]
    finally:
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGKILL)
    return options


def test_the_users_own_java_options_are_added_to_ours_and_their_collector_wins(pipe: Pipeline,
                                                                                tmp_path: Path) -> None:
    """A site's spark.driver.defaultJavaOptions (here from --conf) used to replace brewstream's:
    Spark's log left the state dir, and the archive the run announced was never written."""
    cache = tmp_path / "jvm-cache"
    theirs_metaspace, theirs_jit = "-XX:MetaspaceSize=64m", "-XX:TieredStopAtLevel=4"
    options = jvm_options_of_a_daemon(
        pipe, tmp_path,
        f"spark.driver.defaultJavaOptions=-XX:+UseParallelGC {theirs_metaspace} {theirs_jit} {MARK}",
        {CACHE_ENV: str(cache)})
    # A daemon's own collector and young generation (DAEMON_GC_OPTIONS) give way to theirs.
    assert "-XX:+UseParallelGC" in options and "-XX:+UseSerialGC" not in options, options
    assert not [o for o in options if o.startswith("-Xmn")], options
    # Both metaspace thresholds and both JIT levels are given; the JVM takes the later, theirs.
    assert options.index(METASPACE_OPTION) < options.index(theirs_metaspace), options
    assert options.index(QUICK_JIT_OPTION) < options.index(theirs_jit), options
    assert any(o.startswith("-Dlog4j2.configurationFile=") for o in options), options
    assert any(o.startswith("-XX:ArchiveClassesAtExit=") for o in options), options
    text = (tmp_path / "daemon.log").read_text()
    assert "kept Spark's class archive" in text, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    assert (tmp_path / "state" / "spark.log").exists()


def test_a_conf_folder_with_files_on_the_class_path_means_no_archive(pipe: Pipeline, tmp_path: Path) -> None:
    """spark-submit puts SPARK_CONF_DIR on the driver's class path, and Java's class sharing
    takes no folder that holds files there: every stop used to try to write an archive
    and fail (a second and 2-3 CPU-s each time), and no start ever mapped one."""
    cache, conf = tmp_path / "jvm-cache", tmp_path / "spark-conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text("spark.sql.shuffle.partitions 3\n")
    options = jvm_options_of_a_daemon(pipe, tmp_path, f"spark.driver.extraJavaOptions={MARK}",
                                      {CACHE_ENV: str(cache), "SPARK_CONF_DIR": str(conf)})
    class_path = options[options.index("-cp") + 1].split(os.pathsep)
    assert str(conf) in [entry.rstrip("/") for entry in class_path], class_path
    assert not [o for o in options if "ArchiveClassesAtExit" in o or "SharedArchiveFile" in o], options
    text = (tmp_path / "daemon.log").read_text()
    assert f"its class path holds the folder {conf}" in text, text[-3000:]
    assert not [p for p in cache.glob("*") if p.suffix in (".jsa", ".part", ".log")], list(cache.iterdir())
