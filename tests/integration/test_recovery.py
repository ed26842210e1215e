"""Crashes at each dangerous point, lost disks and checkpoints, restores: always exact."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from restorer.codec import commit_prefix, decode_entries
from sandbox.broker import Sandbox, down, free_port, up
from service.drink_count.pipeline import BoardConfig, run
from service.engine.contract import RunConfig
from tests.support.drink_count import assert_exact, feed_with_bad, make_orders, store_state
from tests.support.helpers import (
    Pipeline,
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
from topics.kafka import KafkaConnection

pytestmark = pytest.mark.spark


def run_now(pipe: Pipeline, spark: Any, dirs: dict[str, Path], **kw: Any) -> int:
    return run(RunConfig(pipe.conn, dirs["state"], dirs["ckpt"], available_now=True, topics=pipe.topics, **kw),
               BoardConfig(60), spark=spark)


def changelog_commits(pipe: Pipeline) -> dict[int, int]:
    latest = {m.key(): m.value() for m in read_topic(pipe.conn, pipe.topics.changelog)}
    return decode_entries((k, v) for k, v in latest.items() if k.startswith(commit_prefix())).commits


@pytest.mark.parametrize("point", ["mid-transaction", "after-changelog-commit", "after-store-commit"])
def test_crash_at_each_fault_point_then_restart_is_exact(
        point: str, pipe: Pipeline, spark: Any, dirs: dict[str, Path], tmp_path: Path) -> None:
    good = feed_with_bad(pipe, 1200, seed=10)
    log = tmp_path / "crash.log"
    crashed = pipe.spawn("run", "--state-dir", str(dirs["state"]), "--checkpoint-dir", str(dirs["ckpt"]),
                         "--available-now", "--max-offsets-per-trigger", "300",
                         env={"BREWSTREAM_FAULT": f"{point}@2"}, log=log)
    assert crashed.wait(300) == -signal.SIGKILL, log.read_text()[-3000:]
    assert f"fault injected at {point}" in log.read_text()

    # The crash left exactly the state that point implies.
    store_seq = set(store_state(dirs["state"]).commits.values())
    changelog_seq = set(changelog_commits(pipe).values())
    if point == "mid-transaction":
        assert store_seq == changelog_seq == {1}  # batch 2's transaction is invisible
    elif point == "after-changelog-commit":
        assert store_seq == {1} and changelog_seq == {2}  # the store is one batch behind
    else:
        assert store_seq == changelog_seq == {2}
        assert sorted(p.name for p in (dirs["ckpt"] / "commits").iterdir() if p.name.isdigit()) == ["0"]

    assert run_now(pipe, spark, dirs, max_offsets_per_trigger=300) == 0
    assert_exact(pipe, dirs["state"], good)


def test_disk_loss_restore_is_identical_then_the_stream_continues(
        pipe: Pipeline, spark: Any, dirs: dict[str, Path]) -> None:
    first = feed_with_bad(pipe, 1500, seed=11)
    assert run_now(pipe, spark, dirs, max_offsets_per_trigger=400) == 0
    before = store_state(dirs["state"])

    shutil.rmtree(dirs["state"])
    restored = pipe.brew("restore", "--state-dir", str(dirs["state"]), check=True)
    assert restored.stdout.startswith("restore done: records=")
    after = store_state(dirs["state"])
    # Positions differ by design (a restore stops at the end offset); everything else is identical.
    assert (after.names, after.offsets, after.meta, after.commits) == \
        (before.names, before.offsets, before.meta, before.commits)

    second = make_orders(700, seed=12)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in second))
    assert run_now(pipe, spark, dirs) == 0
    assert_exact(pipe, dirs["state"], first + second)


def test_disk_and_checkpoint_lost_restores_by_itself(pipe: Pipeline, spark: Any, dirs: dict[str, Path]) -> None:
    first = feed_with_bad(pipe, 1000, seed=13)
    assert run_now(pipe, spark, dirs, max_offsets_per_trigger=300) == 0
    shutil.rmtree(dirs["state"])
    shutil.rmtree(dirs["ckpt"])
    refused = pipe.brew("run", "--state-dir", str(dirs["state"]), "--checkpoint-dir", str(dirs["ckpt"]),
                        "--no-auto-restore", "--available-now")
    assert refused.returncode == 1 and "brewstream restore" in refused.stderr
    second = make_orders(500, seed=14)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in second))
    assert run_now(pipe, spark, dirs) == 0
    assert_exact(pipe, dirs["state"], first + second)


def test_checkpoint_ahead_of_a_lost_changelog_is_dropped(
        pipe: Pipeline, spark: Any, dirs: dict[str, Path], kafka: KafkaConnection) -> None:
    """Store and changelog both gone, checkpoint kept: counting starts over, nothing skipped."""
    orders = make_orders(600, seed=15)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in orders))
    assert run_now(pipe, spark, dirs) == 0
    shutil.rmtree(dirs["state"])
    admin = kafka.admin()
    admin.delete_topics([pipe.topics.changelog])[pipe.topics.changelog].result()
    wait_until(lambda: _recreated(kafka, pipe.topics), 60, "the changelog to be recreated")
    assert run_now(pipe, spark, dirs) == 0
    assert counts_json(pipe.conn, dirs["state"])["counts"] == oracle(orders)


def test_a_checkpoint_without_its_metadata_is_dropped(pipe: Pipeline, spark: Any, dirs: dict[str, Path],
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """What a checkpoint deleted under a running query leaves (Spark writes its metadata once,
    then its logs again): Spark refuses it, so it is damage, dropped like any other. An empty
    checkpoint folder is none, and is used as it is."""
    first = feed_with_bad(pipe, 600, seed=16)
    assert run_now(pipe, spark, dirs, max_offsets_per_trigger=200) == 0
    for name in ("metadata", ".metadata.crc"):
        (dirs["ckpt"] / name).unlink()
    second = make_orders(300, seed=17)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in second))
    assert run_now(pipe, spark, dirs) == 0
    assert "is damaged (its metadata file is missing, beside offsets and commits" in caplog.text
    assert (dirs["ckpt"] / "metadata").is_file()  # Spark's new one
    shutil.rmtree(dirs["ckpt"])
    dirs["ckpt"].mkdir()
    third = make_orders(200, seed=18)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in third))
    assert run_now(pipe, spark, dirs) == 0
    assert_exact(pipe, dirs["state"], first + second + third)


def _recreated(kafka: KafkaConnection, topics: Topics) -> bool:
    try:
        outcome = dict(create_topics(kafka, 3, 1, topics))
    except Exception:
        return False
    return outcome.get(topics.changelog) == "created"


# ---------------------------------------------------------------- restore edge cases

def restore(pipe: Pipeline, state_dir: Path, *extra: str) -> str:
    return pipe.brew("restore", "--state-dir", str(state_dir), *extra, check=True).stdout


def test_restore_of_an_empty_changelog(pipe: Pipeline, tmp_path: Path) -> None:
    out = restore(pipe, tmp_path / "s")
    assert "records=0 keys=0 partitions=3" in out
    # An empty store is checked against its changelog, which its pipeline's prefix names.
    counts = pipe.brew("counts", "--state-dir", str(tmp_path / "s"), "--json", check=True)
    assert json.loads(counts.stdout) == {"counts": {}, "offsets": {}, "tasks": {}}


def test_restore_of_a_one_record_changelog_with_a_tombstone_elsewhere(pipe: Pipeline, tmp_path: Path) -> None:
    p = Producer({"bootstrap.servers": pipe.conn.bootstrap})
    p.produce(pipe.topics.changelog, key=b"latte", value=(5).to_bytes(8, "big"))
    assert p.flush(10) == 0
    assert counts_json(pipe.conn, _restored(pipe, tmp_path / "a"))["counts"] == {"latte": 5}
    p.produce(pipe.topics.changelog, key=b"mocha", value=(2).to_bytes(8, "big"))
    p.produce(pipe.topics.changelog, key=b"latte", value=b"")  # tombstone
    assert p.flush(10) == 0
    assert counts_json(pipe.conn, _restored(pipe, tmp_path / "b"))["counts"] == {"mocha": 2}


def _restored(pipe: Pipeline, state_dir: Path) -> Path:
    restore(pipe, state_dir)
    return state_dir


def test_restore_skips_aborted_transactions(pipe: Pipeline, tmp_path: Path) -> None:
    p = Producer({"bootstrap.servers": pipe.conn.bootstrap, "transactional.id": f"edge-{pipe.topics.prefix}"})
    p.init_transactions(30)
    for values, commit in (({b"latte": 1}, True), ({b"latte": 999, b"mocha": 5}, False), ({b"latte": 2}, True)):
        p.begin_transaction()
        for k, v in values.items():
            p.produce(pipe.topics.changelog, key=k, value=v.to_bytes(8, "big"))
        if commit:
            p.commit_transaction(30)
        else:
            p.flush(10)
            p.abort_transaction(30)
    assert counts_json(pipe.conn, _restored(pipe, tmp_path / "s"))["counts"] == {"latte": 2}


def test_restore_of_a_compacted_changelog(pipe: Pipeline, tmp_path: Path, kafka: KafkaConnection) -> None:
    set_topic_config(kafka, pipe.topics.changelog, segment_ms="1000")
    p = Producer({"bootstrap.servers": pipe.conn.bootstrap, "linger.ms": 5})
    written = 0
    for version in range(1, 3001):
        for drink in (b"latte", b"mocha", b"tea"):
            p.produce(pipe.topics.changelog, key=drink, value=version.to_bytes(8, "big"), partition=0)
            written += 1
    p.flush(10)

    def compacted() -> bool:
        p.produce(pipe.topics.changelog, key=b"tick", value=(1).to_bytes(8, "big"), partition=0)
        p.flush(10)
        return len(read_topic(pipe.conn, pipe.topics.changelog)) * 10 < written

    wait_until(compacted, 120, "the changelog to be compacted", every=1.0)
    out = restore(pipe, tmp_path / "s")
    records = int(out.split("records=")[1].split()[0])
    assert records * 10 < written  # far fewer records than the end offset
    counts = counts_json(pipe.conn, tmp_path / "s")["counts"]
    assert {k: counts[k] for k in ("latte", "mocha", "tea")} == {"latte": 3000, "mocha": 3000, "tea": 3000}


def test_restore_needs_clean_on_a_store_with_data(pipe: Pipeline, tmp_path: Path) -> None:
    p = Producer({"bootstrap.servers": pipe.conn.bootstrap})
    p.produce(pipe.topics.changelog, key=b"latte", value=(5).to_bytes(8, "big"))
    p.flush(10)
    restore(pipe, tmp_path / "s")
    again = pipe.brew("restore", "--state-dir", str(tmp_path / "s"))
    assert again.returncode == 1 and "--clean" in again.stderr
    assert "records=1 keys=1" in restore(pipe, tmp_path / "s", "--clean")


# ---------------------------------------------------------------- drills and broker faults

def test_short_kill9_drill_is_exact(kafka: KafkaConnection, tmp_path: Path) -> None:
    from tests.support.helpers import brew

    proc = brew(kafka, "drill", "kill9", "--orders", "3000", "--kills", "3", "--feed-time", "25s",
                "--max-kill-delay", "4s", "--work-dir", str(tmp_path), timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "verdict: exact" in proc.stdout
    assert proc.stdout.count("  kill ") == 3


def test_broker_outage_under_a_running_daemon(tmp_path: Path) -> None:
    """Stop the broker mid-run and start it again; restart the daemon if it gave up. Exact."""
    box = Sandbox(free_port(), tmp_path / "kafka")
    up(box)
    try:
        conn = KafkaConnection(box.bootstrap)
        pipe = Pipeline(conn, Topics("outage."))
        create_topics(conn, 3, 1, pipe.topics)
        first = make_orders(800, seed=16)
        produce(conn, pipe.topics.orders, (order_bytes(o) for o in first))
        state, ckpt, log = tmp_path / "state", tmp_path / "ckpt", tmp_path / "daemon.log"
        args = ("run", "--state-dir", str(state), "--checkpoint-dir", str(ckpt), "--flush", "1s")
        daemon = pipe.spawn(*args, log=log)
        wait_until(lambda: "processed=800" in log.read_text(), 180, "the first orders to be counted")
        down(box)
        with contextlib.suppress(subprocess.TimeoutExpired):
            daemon.wait(15)  # it may give up while the broker is away, or keep retrying
        up(box)
        second = make_orders(400, seed=17)
        produce(conn, pipe.topics.orders, (order_bytes(o) for o in second))
        if daemon.poll() is not None:
            assert daemon.returncode == 1
            last = log.read_text().strip().splitlines()[-1]
            assert last.startswith("brewstream: error:"), last
            daemon = pipe.spawn(*args, log=log)
        wait_until(lambda: f"processed={len(first) + len(second)}" in log.read_text(), 300,
                 "the orders after the outage to be counted")
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(120) == 0
        assert counts_json(conn, state)["counts"] == oracle(first + second)
    finally:
        down(box)
