"""Deployments nobody on the team wrote: a second instance, a fenced zombie, a changelog that
lost records, was re-created or grew partitions, input that grew partitions or was lost
upstream, a full disk. Each
ends exact, or with one line that says what was lost and what to do."""

from __future__ import annotations

import shutil
import signal
import subprocess
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewPartitions

from restorer.changelog import ChangelogWriter
from sandbox.broker import free_port
from tests.support.drink_count import make_orders
from tests.support.helpers import (
    BREW,
    Pipeline,
    brew,
    counts_json,
    oracle,
    order_bytes,
    produce,
    read_topic,
    set_topic_config,
)
from topics.admin import create_topics
from topics.catalog import Topics
from topics.clock import wait_until
from topics.errors import BrewError
from topics.kafka import topic_config

pytestmark = pytest.mark.spark


def run_args(d: Path, *extra: str) -> tuple[str, ...]:
    return ("run", "--state-dir", str(d / "state"), "--checkpoint-dir", str(d / "ckpt"), *extra)


def available_now(pipe: Pipeline, d: Path, *extra: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return pipe.brew(*run_args(d, "--available-now", *extra), timeout=timeout)


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> str:
    assert proc.returncode != 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in proc.stderr and not any(ln.lstrip().startswith("at ") for ln in lines), \
        proc.stderr[-3000:]
    last = lines[-1]
    assert last.startswith("brewstream: error: "), proc.stderr[-3000:]
    for fragment in fragments:
        assert fragment in last, last
    return last


@contextmanager
def daemon_counting(pipe: Pipeline, d: Path, first: list[dict[str, Any]], *extra: str) -> Iterator[Path]:
    """A daemon that has counted ``first``, for the body to change its deployment under it;
    afterwards a SIGTERM, and the daemon must stop cleanly. Yields its log."""
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in first))
    log = d / "d.log"
    daemon = pipe.spawn(*run_args(d, "--flush", "1s", "--trigger", "200ms", *extra), log=log)
    try:
        wait_until(lambda: f"processed={len(first)}" in log.read_text(), 180, "the first orders to be counted")
        yield log
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(120) == 0, log.read_text()[-3000:]
    finally:
        if daemon.poll() is None:
            daemon.kill()


def restored_counts(pipe: Pipeline, folder: Path) -> dict[str, int]:
    pipe.brew("restore", "--state-dir", str(folder), check=True)
    counts: dict[str, int] = counts_json(pipe.conn, folder)["counts"]
    return counts


def delete_records(pipe: Pipeline, topic: str, before: dict[int, int]) -> None:
    admin = pipe.conn.admin()
    futures = admin.delete_records([TopicPartition(topic, p, o) for p, o in before.items()])
    for f in futures.values():
        f.result()


def _try_delete(pipe: Pipeline, topic: str, before: dict[int, int]) -> bool:
    from confluent_kafka import KafkaException

    try:
        delete_records(pipe, topic, before)
    except KafkaException:
        return False  # a config change takes a moment to reach the broker
    return True


def dlq_sources(pipe: Pipeline) -> list[tuple[bytes, bytes]]:
    return [(dict(m.headers())["source-partition"], dict(m.headers())["source-offset"])
            for m in read_topic(pipe.conn, pipe.topics.dlq)]


def test_a_second_instance_is_refused_naming_the_first(pipe: Pipeline, tmp_path: Path) -> None:
    orders = make_orders(300, seed=50)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in orders))
    first_dir, log = tmp_path / "a", tmp_path / "a.log"
    first = pipe.spawn(*run_args(first_dir, "--flush", "1s"), log=log)
    try:
        wait_until(lambda: "processed=300" in log.read_text(), 180, "the first instance to count the orders")
        second = available_now(pipe, tmp_path / "b", timeout=120)
        last = assert_one_line_error(second, "another instance is active", str(first_dir.resolve() / "state"))
        assert "pid" in last
        # A standby given the active's checkpoint dir (one config file for both): refused in one
        # line naming the active, and the active's checkpoint is left whole.
        ckpt = first_dir / "ckpt"
        standby = pipe.brew("run", "--standby", "--state-dir", str(tmp_path / "s" / "state"), "--checkpoint-dir",
                            str(ckpt), timeout=120)
        assert_one_line_error(standby, f"checkpoint dir {ckpt} is in use by another brewstream process "
                                       f"(pid {first.pid}); stop it first or pass another --checkpoint-dir")
        assert (ckpt / "metadata").is_file() and any((ckpt / "commits").iterdir())
        # Nor is the changelog re-created under it.
        moved = pipe.brew("republish-changelog", "--partitions", "4", "--state-dir", str(tmp_path / "r"), timeout=120)
        assert_one_line_error(moved, f"changelog {pipe.topics.changelog} is in use by instance ", f"pid {first.pid}",
                              "stop every instance of this pipeline first")
        meta = pipe.conn.admin().list_topics(pipe.topics.changelog, timeout=10).topics[pipe.topics.changelog]
        assert len(meta.partitions) == 3
        more = make_orders(200, seed=59)
        produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in more))
        wait_until(lambda: "processed=500" in log.read_text(), 180, "the first instance to count on")
        orders += more
        first.send_signal(signal.SIGTERM)
        assert first.wait(120) == 0, log.read_text()[-2000:]
    finally:
        if first.poll() is None:
            first.kill()
    # A clean stop gives the lease back: the second starts at once and restores the store.
    second = available_now(pipe, tmp_path / "b")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "lapsed" not in second.stderr
    assert counts_json(pipe.conn, tmp_path / "b" / "state")["counts"] == oracle(orders)


def test_a_fenced_instance_never_commits_again(pipe: Pipeline, tmp_path: Path) -> None:
    """Two instances raced past the lease: the later one's writer fences the first."""
    first_orders = make_orders(400, seed=51)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in first_orders))
    produce(pipe.conn, pipe.topics.orders, [(b"bad", b"not json")])
    a, log = tmp_path / "a", tmp_path / "a.log"
    zombie = pipe.spawn(*run_args(a, "--flush", "1s"), log=log)
    try:
        wait_until(lambda: "processed=400" in log.read_text(), 180, "the first instance to count")
        seq_before = _seq(pipe, a)
        intruder = ChangelogWriter(pipe.conn, pipe.topics.changelog, [0, 1, 2])
        intruder.start()  # what a second instance does first: it fences the first
        intruder.close()
        later = make_orders(200, seed=52)
        produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in later))
        assert zombie.wait(180) == 1, log.read_text()[-3000:]
    finally:
        if zombie.poll() is None:
            zombie.kill()
    text = log.read_text()
    assert text.strip().splitlines()[-1].startswith("brewstream: error: another instance took over the changelog")
    assert "Traceback" not in text
    assert _seq(pipe, a) == seq_before  # its store never moved again
    # The next instance (another machine, say) takes over after the lease lapses: exact.
    b = tmp_path / "b"
    proc = available_now(pipe, b, "--takeover-timeout", "3s")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert counts_json(pipe.conn, b / "state")["counts"] == oracle(first_orders + later)
    assert len(dlq_sources(pipe)) == len(set(dlq_sources(pipe))) == 1
    assert restored_counts(pipe, tmp_path / "restored") == oracle(first_orders + later)


def _seq(pipe: Pipeline, d: Path) -> int:
    from restorer.store import Store

    with Store(d / "state" / "store", read_only=True) as store:
        return store.last_seq()


def test_a_changelog_that_lost_records_is_refused_not_waited_for(pipe: Pipeline, tmp_path: Path) -> None:
    orders = make_orders(900, seed=53)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in orders))
    assert available_now(pipe, tmp_path, "--max-offsets-per-trigger", "300").returncode == 0
    # An operator let retention at it (a compacted-only topic refuses delete-records).
    set_topic_config(pipe.conn, pipe.topics.changelog, cleanup_policy="compact,delete")
    wait_until(lambda: _try_delete(pipe, pipe.topics.changelog, {0: 5, 1: 5, 2: 5}), 60,
             "the broker to delete the changelog's oldest records")
    shutil.rmtree(tmp_path / "state")  # and so is the disk
    refused = available_now(pipe, tmp_path, timeout=180)
    assert_one_line_error(refused, "no longer holds its oldest records", "--accept-changelog-loss")
    restore = pipe.brew("restore", "--state-dir", str(tmp_path / "r"), timeout=180)
    assert_one_line_error(restore, "no longer holds its oldest records")
    accepted = pipe.brew("restore", "--state-dir", str(tmp_path / "r"), "--accept-changelog-loss", timeout=180)
    assert accepted.returncode == 0, accepted.stderr[-3000:]
    assert "restore done" in accepted.stdout


def test_a_changelog_recreated_under_a_running_daemon_is_republished(
        pipe: Pipeline, tmp_path: Path) -> None:
    first = make_orders(500, seed=54)
    with daemon_counting(pipe, tmp_path, first) as log:
        admin = pipe.conn.admin()
        admin.delete_topics([pipe.topics.changelog])[pipe.topics.changelog].result()
        wait_until(lambda: dict(_create(pipe)).get(pipe.topics.changelog) == "created", 60,
                 "the changelog to be re-created")
        second = make_orders(300, seed=55)
        produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in second))
        wait_until(lambda: "processed=800" in log.read_text(), 180, "the later orders to be counted")
    assert "re-created" in log.read_text()
    # The new changelog alone restores everything, the counts from before it included.
    assert restored_counts(pipe, tmp_path / "restored") == oracle(first + second)


def _create(pipe: Pipeline) -> list[tuple[str, str]]:
    try:
        return create_topics(pipe.conn, 3, 1, pipe.topics)
    except BrewError:
        return []


def test_a_changelog_with_more_partitions_is_refused_then_migrated(pipe: Pipeline, tmp_path: Path) -> None:
    first = make_orders(600, seed=56)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in first))
    assert available_now(pipe, tmp_path).returncode == 0
    admin = pipe.conn.admin()
    admin.create_partitions([NewPartitions(pipe.topics.changelog, 6)])[pipe.topics.changelog].result()
    refused = available_now(pipe, tmp_path, timeout=180)
    assert_one_line_error(refused, "has 6 partitions but the state was built against 3", "republish-changelog")
    restore = pipe.brew("restore", "--state-dir", str(tmp_path / "r"), timeout=180)
    assert_one_line_error(restore, "has 6 partitions but the state was built against 3")

    moved = pipe.brew("republish-changelog", "--state-dir", str(tmp_path / "state"), "--partitions", "6",
                      timeout=180)
    assert moved.returncode == 0, moved.stderr[-3000:]
    second = make_orders(300, seed=57)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in second))
    assert available_now(pipe, tmp_path).returncode == 0
    assert counts_json(pipe.conn, tmp_path / "state")["counts"] == oracle(first + second)
    assert restored_counts(pipe, tmp_path / "restored") == oracle(first + second)

    # And back to fewer partitions than it had: every marker of a partition the new changelog
    # lacks is left out, and the changelog keeps the settings set on it, but a changed
    # cleanup policy: it stays compacted.
    set_topic_config(pipe.conn, pipe.topics.changelog, segment_ms="3600000", cleanup_policy="compact,delete")
    fewer = pipe.brew("republish-changelog", "--state-dir", str(tmp_path / "state"), "--partitions", "2",
                      timeout=180)
    assert fewer.returncode == 0, fewer.stderr[-3000:]
    assert "with 2 partitions (replication factor 1)" in fewer.stdout, fewer.stdout
    config = topic_config(pipe.conn, pipe.topics.changelog)
    assert (config["segment.ms"], config["cleanup.policy"]) == ("3600000", "compact")
    third = make_orders(200, seed=58)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in third))
    assert available_now(pipe, tmp_path).returncode == 0
    assert counts_json(pipe.conn, tmp_path / "state")["counts"] == oracle(first + second + third)
    assert restored_counts(pipe, tmp_path / "restored-2") == oracle(first + second + third)
    assert {m.partition() for m in read_topic(pipe.conn, pipe.topics.changelog)} == {0, 1}


def test_a_state_dir_of_another_pipeline_is_refused(pipe: Pipeline, tmp_path: Path) -> None:
    """A state dir reused with another --topic-prefix holds another pipeline's counts and
    input offsets: counting this input on top of them would mix the two."""
    first = make_orders(200, seed=62)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in first))
    assert available_now(pipe, tmp_path).returncode == 0
    other = Pipeline(pipe.conn, Topics("other-" + pipe.topics.prefix))
    create_topics(pipe.conn, 3, 1, other.topics)
    produce(other.conn, other.topics.orders, (order_bytes(o) for o in make_orders(100, seed=63)))
    refused = available_now(other, tmp_path, timeout=180)
    assert_one_line_error(refused, f"published to changelog {pipe.topics.changelog}, not {other.topics.changelog}",
                          "--topic-prefix", "--state-dir")
    assert counts_json(pipe.conn, tmp_path / "state")["counts"] == oracle(first)
    assert read_topic(other.conn, other.topics.changelog) == []
    standby = other.brew(*run_args(tmp_path, "--standby"), timeout=180)
    assert_one_line_error(standby, f"published to changelog {pipe.topics.changelog}")


def test_a_spark_home_that_is_not_this_spark_is_one_line_with_the_fix(pipe: Pipeline, tmp_path: Path) -> None:
    """pyspark launches the Spark that SPARK_HOME names, not its own: a folder without
    spark-submit, or a Spark of another version, is named before any JVM starts."""
    orders = make_orders(50, seed=64)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in orders))
    old = tmp_path / "spark-3.5.1"
    (old / "bin").mkdir(parents=True)
    (old / "bin" / "spark-submit").write_text("#!/bin/sh\nexit 7\n")
    (old / "jars").mkdir()
    (old / "jars" / "spark-core_2.12-3.5.1.jar").write_bytes(b"PK")
    for home, fragment in ((tmp_path / "nowhere", "holds no bin/spark-submit"), (old, "is Spark 3.5.1")):
        proc = brew(pipe.conn, *run_args(tmp_path, "--available-now"), env={**pipe.env, "SPARK_HOME": str(home)},
                    timeout=180)
        assert_one_line_error(proc, f"SPARK_HOME={home} {fragment}", "unset SPARK_HOME")
    assert available_now(pipe, tmp_path).returncode == 0
    assert counts_json(pipe.conn, tmp_path / "state")["counts"] == oracle(orders)


@pytest.mark.parametrize("shuffle", [False, True], ids=["direct", "shuffle"])
def test_input_partitions_added_under_a_running_daemon_are_counted(pipe: Pipeline, tmp_path: Path,
                                                                   shuffle: bool) -> None:
    """An operator grows the input topic while the daemon runs: the new partitions are read
    from their start and every order is counted once, behind the shuffle too (its input
    stage first plans them empty)."""
    first = make_orders(400, seed=70)
    with daemon_counting(pipe, tmp_path, first, *(["--shuffle"] if shuffle else [])) as log:
        admin = pipe.conn.admin()
        for f in admin.create_partitions([NewPartitions(pipe.topics.orders, 6)]).values():
            f.result()
        wait_until(lambda: len(admin.list_topics(pipe.topics.orders, timeout=10).topics[pipe.topics.orders].partitions)
                   == 6, 30, "the broker to show six partitions")
        second = make_orders(600, seed=71)
        placed = produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in second))
        assert {p for p, _ in placed} & {3, 4, 5}, "the test needs orders in the new partitions"
        wait_until(lambda: "processed=1000" in log.read_text(), 180, "the orders in the new partitions")
    assert counts_json(pipe.conn, tmp_path / "state")["counts"] == oracle(first + second)
    assert restored_counts(pipe, tmp_path / "restored") == oracle(first + second)


def test_input_lost_upstream_is_a_decision_not_a_crash(pipe: Pipeline, tmp_path: Path) -> None:
    first = make_orders(300, seed=58)
    where = produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in first))
    assert available_now(pipe, tmp_path).returncode == 0
    second = make_orders(600, seed=59)
    where2 = produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in second))
    cut = {p: max(o for q, o in where2 if q == p) - 20 for p in range(3)}  # most of them, not all
    delete_records(pipe, pipe.topics.orders, cut)
    refused = available_now(pipe, tmp_path, timeout=180)
    last = assert_one_line_error(refused, pipe.topics.orders, "--accept-input-loss", "were deleted")
    for p in range(3):
        assert f"partition {p} offsets" in last
    accepted = available_now(pipe, tmp_path, "--accept-input-loss")
    assert accepted.returncode == 0, accepted.stderr[-3000:]
    assert "skipping input lost" in accepted.stderr
    kept = [o for o, (p, off) in zip(second, where2, strict=True) if off >= cut[p]]
    assert counts_json(pipe.conn, tmp_path / "state")["counts"] == oracle(first + kept)
    assert len(where) == 300


def test_an_input_topic_recreated_is_a_decision_not_a_crash(pipe: Pipeline, tmp_path: Path) -> None:
    """The input topic deleted under a running daemon ends it in one line naming the topic
    and the command that makes it again; re-created, the input it lost is refused, then
    skipped when accepted."""
    first = make_orders(300, seed=60)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in first))
    log = tmp_path / "d.log"
    daemon = pipe.spawn(*run_args(tmp_path, "--flush", "1s", "--trigger", "200ms"), log=log)
    admin = pipe.conn.admin()
    try:
        wait_until(lambda: f"processed={len(first)}" in log.read_text(), 180, "the first orders to be counted")
        admin.delete_topics([pipe.topics.orders])[pipe.topics.orders].result()
        assert daemon.wait(120) != 0, log.read_text()[-3000:]
    finally:
        if daemon.poll() is None:
            daemon.kill()
    said = log.read_text()
    last = [ln for ln in said.splitlines() if ln.strip()][-1]
    assert "Traceback" not in said and last.startswith("brewstream: error: "), said[-3000:]
    assert pipe.topics.orders in last and "`brewstream topics create`" in last, last
    wait_until(lambda: dict(_create(pipe)).get(pipe.topics.orders) == "created", 60, "the input to be re-created")
    second = make_orders(100, seed=61)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in second))
    refused = available_now(pipe, tmp_path, timeout=180)
    assert_one_line_error(refused, "re-created or truncated", "--accept-input-loss")
    accepted = available_now(pipe, tmp_path, "--accept-input-loss")
    assert accepted.returncode == 0, accepted.stderr[-3000:]
    assert counts_json(pipe.conn, tmp_path / "state")["counts"] == oracle(first + second)


def _in_namespace(script: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """Run a shell script as root of a private mount namespace (a tmpfs of our own)."""
    return subprocess.run(["unshare", "--mount", "--map-root-user", "bash", "-euo", "pipefail", "-c", script],
                          capture_output=True, text=True, timeout=timeout)


def test_a_full_disk_is_one_line_and_the_next_start_is_exact(pipe: Pipeline, tmp_path: Path) -> None:
    first = make_orders(300, seed=62)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in first))
    second = make_orders(300, seed=63)
    disk, ckpt = tmp_path / "disk", tmp_path / "ckpt"
    disk.mkdir()
    later = tmp_path / "later.jsonl"
    later.write_bytes(b"\n".join(order_bytes(o)[1] for o in second) + b"\n")
    env = f"KAFKA_BOOTSTRAP={pipe.conn.bootstrap} BREWSTREAM_TOPIC_PREFIX={pipe.topics.prefix}"
    run = f"{env} {BREW} run --state-dir {disk}/state --checkpoint-dir {ckpt}"
    out, err = tmp_path / "daemon.out", tmp_path / "full.err"
    # The daemon runs; its disk fills up under it; more orders arrive. Then space is freed
    # and the next start must be exact.
    script = textwrap.dedent(f"""
        mount -t tmpfs -o size=64m tmpfs {disk}
        {run} --flush 1s --trigger 200ms > {out} 2> {err} &
        daemon=$!
        for _ in $(seq 300); do grep -q "processed=300" {out} && break; sleep 0.5; done
        grep -q "processed=300" {out}
        fallocate -l 1G {disk}/filler 2>/dev/null || dd if=/dev/zero of={disk}/filler bs=1M 2>/dev/null || true
        {env} {BREW} seed-orders --file {later} > /dev/null
        set +e
        wait $daemon
        echo "exit=$?"
        set -e
        rm {disk}/filler
        {run} --available-now > /dev/null 2> {tmp_path}/after.err
        {env} {BREW} counts --state-dir {disk}/state --json > {tmp_path}/counts.json
    """)
    proc = _in_namespace(script)
    assert proc.returncode == 0, proc.stdout + proc.stderr + _read(tmp_path / "after.err")
    assert "exit=1" in proc.stdout, proc.stdout
    err = _read(tmp_path / "full.err")
    assert "processed=300" in _read(out)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "Traceback" not in err and not any(ln.lstrip().startswith("at ") for ln in lines), err[-3000:]
    assert lines[-1].startswith("brewstream: error: ") and "disk is full" in lines[-1], err[-3000:]
    import json

    assert json.loads(_read(tmp_path / "counts.json"))["counts"] == oracle(first + second)


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def test_a_tiny_dlq_record_limit_is_fitted(pipe: Pipeline, tmp_path: Path) -> None:
    set_topic_config(pipe.conn, pipe.topics.dlq, max_message_bytes="3000")
    bad = b"{" + b"z" * 50_000
    produce(pipe.conn, pipe.topics.orders, [(b"k" * 5000, bad)])
    orders = make_orders(100, seed=64)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in orders))

    def fitted() -> Any:
        # The broker takes the new limit a moment after it acknowledges it.
        proc = available_now(pipe, tmp_path)
        return proc if proc.returncode == 0 else None

    wait_until(fitted, 300, "a run that fits the DLQ record", every=1)
    dlq = read_topic(pipe.conn, pipe.topics.dlq)
    assert len(dlq) == 1
    headers = dict(dlq[0].headers())
    assert headers["truncated"] == b"key,value" and int(headers["original-size"]) == len(bad)
    assert int(headers["original-key-size"]) == 5000
    assert counts_json(pipe.conn, tmp_path / "state")["counts"] == oracle(orders)




def test_a_read_only_state_dir_is_one_line_and_the_next_start_is_exact(pipe: Pipeline, tmp_path: Path) -> None:
    first = make_orders(200, seed=65)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in first))
    second = make_orders(100, seed=66)
    disk = tmp_path / "disk"
    disk.mkdir()
    later = tmp_path / "later.jsonl"
    later.write_bytes(b"\n".join(order_bytes(o)[1] for o in second) + b"\n")
    env = f"KAFKA_BOOTSTRAP={pipe.conn.bootstrap} BREWSTREAM_TOPIC_PREFIX={pipe.topics.prefix}"
    ro = tmp_path / "ro"
    ro.mkdir()
    run = f"{env} {BREW} run --checkpoint-dir {tmp_path}/ckpt --available-now --state-dir"
    script = textwrap.dedent(f"""
        mount -t tmpfs -o size=64m tmpfs {disk}
        {run} {disk}/state > /dev/null 2>&1
        mount --bind {disk} {ro}
        mount -o remount,bind,ro {ro}
        {env} {BREW} seed-orders --file {later} > /dev/null
        set +e
        {run} {ro}/state > /dev/null 2> {tmp_path}/ro.err
        echo "exit=$?"
        set -e
        {run} {disk}/state > /dev/null 2> {tmp_path}/after.err
        {env} {BREW} counts --state-dir {disk}/state --json > {tmp_path}/counts.json
    """)
    proc = _in_namespace(script)
    assert proc.returncode == 0, proc.stdout + proc.stderr + _read(tmp_path / "after.err")
    assert "exit=1" in proc.stdout, proc.stdout
    lines = [ln for ln in _read(tmp_path / "ro.err").splitlines() if ln.strip()]
    assert len(lines) == 1 and "read-only" in lines[0], lines
    import json

    assert json.loads(_read(tmp_path / "counts.json"))["counts"] == oracle(first + second)


def test_a_changelog_that_deletes_by_retention_is_named_at_start(pipe: Pipeline, tmp_path: Path) -> None:
    """A changelog created by hand (or by a broker's auto-create) keeps Kafka's default
    cleanup.policy=delete: in 7 days its oldest counts are gone, and a restore after disk
    loss with them. The daemon says so at start, in one line that says what to set."""
    from restorer.reader import retention_risk

    topic = pipe.topics.changelog
    assert retention_risk(pipe.conn, topic) is None  # as `brewstream topics create` makes it
    set_topic_config(pipe.conn, topic, cleanup_policy="compact,delete")
    said = wait_until(lambda: retention_risk(pipe.conn, topic), 30, "the broker to apply the policy")
    assert "(cleanup.policy=compact,delete, retention.ms=604800000;" in said, said
    set_topic_config(pipe.conn, topic, retention_ms="-1")
    wait_until(lambda: retention_risk(pipe.conn, topic) is None, 30, "the broker to apply the retention")
    set_topic_config(pipe.conn, topic, cleanup_policy="delete")
    wait_until(lambda: retention_risk(pipe.conn, topic), 30, "the broker to apply the policy")

    log = tmp_path / "daemon.log"
    daemon = pipe.spawn(*run_args(tmp_path), log=log)
    try:
        line = wait_until(lambda: next((ln for ln in log.read_text().splitlines() if "is not compacted" in ln), None),
                          120, "the warning")
        assert f"changelog {topic} is not compacted (cleanup.policy=delete)" in line, line
        assert "cleanup.policy=compact" in line, line
        wait_until(lambda: "role: starting" in log.read_text(), 120, "the daemon to start anyway")
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(120) == 0, log.read_text()[-3000:]
    finally:
        if daemon.poll() is None:
            daemon.kill()


def test_a_changelog_that_stops_being_compacted_under_a_running_daemon_is_said(pipe: Pipeline,
                                                                              tmp_path: Path) -> None:
    """Someone sets cleanup.policy=delete on the changelog while the daemon runs. Before, it
    was noticed only at the next start: after a disk loss, too late to save the head. Now
    it is said once within --changelog-check-interval, shown by `status` and the metric,
    and said once more when the policy is put back."""
    from tests.support.http import metric

    topic = pipe.topics.changelog
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in make_orders(100, seed=63)))
    d, log, port = tmp_path / "a", tmp_path / "a.log", free_port()
    every_s = 2.0
    daemon = pipe.spawn(*run_args(d, "--flush", "1s", "--http-port", str(port),
                                  "--changelog-check-interval", f"{every_s}s"), log=log)
    said = f"the settings of changelog {topic} changed: changelog {topic} is not compacted (cleanup.policy=delete)"
    try:
        wait_until(lambda: "processed=" in log.read_text(), 300, "the daemon to count")
        assert metric(port, "brewstream_changelog_deletes_records") == 0
        set_topic_config(pipe.conn, topic, cleanup_policy="delete")
        line = wait_until(lambda: next((ln for ln in log.read_text().splitlines() if said in ln), None),
                          every_s + 60, "the daemon to say the changelog deletes records")
        assert "set cleanup.policy=compact on it" in line, line
        assert wait_until(lambda: metric(port, "brewstream_changelog_deletes_records"), 30, "the metric") == 1
        status = pipe.brew("status", "--state-dir", str(d / "state"), check=True).stdout
        assert f"changelog {topic} is not compacted (cleanup.policy=delete)" in status, status
        set_topic_config(pipe.conn, topic, cleanup_policy="compact")
        wait_until(lambda: f"changelog {topic} keeps every key's last record again" in log.read_text(),
                   every_s + 60, "the daemon to say the changelog is compacted again")
        wait_until(lambda: metric(port, "brewstream_changelog_deletes_records") == 0, 30, "the metric to clear")
        assert log.read_text().count(said) == 1
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(120) == 0, log.read_text()[-3000:]


def test_a_broker_that_creates_topics_when_asked_gets_none_from_brewstream(tmp_path: Path) -> None:
    """A broker with auto.create.topics.enable=true creates a topic a client merely asks
    about by name, and librdkafka's producers and admin clients asked so: `run` against a
    missing topic created every one with the broker's defaults (the changelog as
    cleanup.policy=delete) and went on. Now a missing topic is named as missing, and none
    is created but by `brewstream topics create`."""
    from sandbox.broker import Sandbox, down, up
    from topics.kafka import KafkaConnection

    box = Sandbox(free_port(), tmp_path / "kafka", extra_properties=("auto.create.topics.enable=true",))
    up(box)
    try:
        conn = KafkaConnection(box.bootstrap)
        described = brew(conn, "topics", "describe", timeout=120)
        assert described.returncode == 0 and "brew.orders.v1  absent" in described.stdout, described.stderr
        ran = brew(conn, "run", "--state-dir", str(tmp_path / "s"), "--checkpoint-dir", str(tmp_path / "c"),
                   "--available-now", timeout=300)
        assert ran.returncode == 1, ran.stderr[-3000:]
        assert "topic brew.orders.v1 does not exist; create the topics with `brewstream topics create`" in \
            ran.stderr.strip().splitlines()[-1], ran.stderr[-3000:]
        listed = conn.admin().list_topics(timeout=30).topics  # a listing of all topics creates none
        assert not [t for t in listed if t.startswith("brew.")], sorted(listed)
    finally:
        down(box)


def test_the_state_dir_deleted_under_a_running_daemon_is_said_and_restored(pipe: Pipeline, tmp_path: Path) -> None:
    """rm -rf of the state dir while the daemon counts: it says so in one line, is not ready
    while it restores the store from the changelog, the way it does at start, and counts on,
    exactly; the stop exits 0."""
    from tests.support.http import get

    first, later = make_orders(300, seed=61), make_orders(200, seed=62)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in first))
    d, log, port = tmp_path / "a", tmp_path / "a.log", free_port()
    daemon = pipe.spawn(*run_args(d, "--flush", "1s", "--http-port", str(port)), log=log)
    try:
        wait_until(lambda: "processed=300" in log.read_text(), 180, "the daemon to count")
        assert get(port, "/readyz")[0] == 200
        shutil.rmtree(d / "state")
        wait_until(lambda: "was deleted while the daemon ran" in log.read_text(), 60, "the daemon to say so")
        produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in later))
        wait_until(lambda: "processed=500" in log.read_text(), 180, "the daemon to restore and count on")
        wait_until(lambda: get(port, "/readyz")[0] == 200, 60, "the daemon to be ready again")
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(120) == 0, log.read_text()[-3000:]
    finally:
        if daemon.poll() is None:
            daemon.kill()
    text = log.read_text()
    assert text.count("was deleted while the daemon ran") == 1, text[-3000:]
    assert "Traceback" not in text
    assert "role: restoring (the store was deleted" in text  # not ready while it restores
    assert counts_json(pipe.conn, d / "state")["counts"] == oracle(first + later)
