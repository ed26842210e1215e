"""The drink-count daemon on a real broker, real Spark and real RocksDB."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from restorer import commit as commit_module
from restorer.changelog import ChangelogWriter
from restorer.codec import changelog_partition_of, decode_entries, is_offset_key, is_reserved
from restorer.faults import FaultPlan
from restorer.store import StateDir, Store
from service.drink_count.sink import DrinkCountSink
from tests.support.corpus import BAD_ORDERS
from tests.support.drink_count import make_orders, run_available_now
from tests.support.helpers import Pipeline, counts_json, oracle, order_bytes, produce, read_topic
from topics.catalog import Topics
from topics.clock import wait_until
from topics.kafka import KafkaConnection, topic_exists
from topics.partitioner import murmur2_partition

pytestmark = pytest.mark.spark







def end_offsets_of(conn: KafkaConnection, topic: str) -> dict[str, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": conn.bootstrap, "group.id": "t"})
    try:
        return {str(p): c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(3)}
    finally:
        c.close()


def test_known_orders_match_the_oracle(pipe: Pipeline, spark: Any, dirs: dict[str, Path]) -> None:
    orders = make_orders(3000, seed=1)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in orders[:2000]))
    # Small batches, so the same drinks are counted across many of them.
    assert run_available_now(pipe, spark, dirs, max_offsets_per_trigger=400) == 0
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in orders[2000:]))
    assert run_available_now(pipe, spark, dirs, max_offsets_per_trigger=400) == 0
    got = counts_json(pipe.conn, dirs["state"])
    assert got["counts"] == oracle(orders)
    assert got["offsets"] == {pipe.topics.orders: end_offsets_of(pipe.conn, pipe.topics.orders)}


def test_the_state_is_split_into_tasks_by_key(kafka: KafkaConnection, spark: Any, dirs: dict[str, Path]) -> None:
    """Five tasks over three input partitions: each drink's count lives in the task Kafka's
    partitioner gives its key, in the store's answer and in the changelog alike."""
    pipe = Pipeline(kafka, Topics(f"t{os.getpid()}-tasks."))
    pipe.brew("topics", "create", "--partitions", "3", "--tasks", "5", check=True)
    again = pipe.brew("topics", "create", "--tasks", "4")
    assert again.returncode != 0 and "Traceback" not in again.stderr
    assert "5 partitions" in again.stderr and "republish-changelog" in again.stderr, again.stderr
    orders = make_orders(1500, seed=7)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in orders))
    assert run_available_now(pipe, spark, dirs, max_offsets_per_trigger=500) == 0

    got = counts_json(pipe.conn, dirs["state"])
    assert sorted(got["tasks"], key=int) == [str(t) for t in range(5)]
    merged: dict[str, int] = {}
    for task, view in got["tasks"].items():
        assert all(murmur2_partition(drink.encode(), 5) == int(task) for drink in view["counts"])
        assert view["keys"] == len(view["counts"]) and view["seq"] >= 1
        assert view["offsets"] == got["offsets"]  # each task has its own, in its own partition
        merged |= view["counts"]
    assert merged == got["counts"] == oracle(orders)
    changelog = read_topic(pipe.conn, pipe.topics.changelog)
    ends = {p: 0 for p in range(5)}
    own_offsets: dict[int, dict[bytes, bytes]] = {p: {} for p in range(5)}
    for msg in changelog:
        ends[msg.partition()] = max(ends[msg.partition()], msg.offset() + 1)
        if not is_reserved(msg.key()):
            assert msg.partition() == murmur2_partition(msg.key(), 5), msg.key()
        elif changelog_partition_of(msg.key()) is not None:
            assert msg.partition() == changelog_partition_of(msg.key()), msg.key()
            own_offsets[msg.partition()][msg.key()] = msg.value()
    # A task's partition alone says how far its input was applied.
    ends_now = {int(p): o for p, o in end_offsets_of(pipe.conn, pipe.topics.orders).items()}
    for held in own_offsets.values():
        assert decode_entries(held.items()).offsets == {pipe.topics.orders: ends_now}

    status = json.loads(pipe.brew("status", "--state-dir", str(dirs["state"]), "--json", check=True).stdout)
    assert [t["task"] for t in status["tasks"]] == list(range(5))
    for t in status["tasks"]:
        assert t["changelog_position"] == got["tasks"][str(t["task"])]["changelog_position"]
        # Whole: nothing of its partition unapplied but the last transaction's commit marker.
        assert t["changelog_position"] >= ends[t["task"]] and t["lag"] == 0, t

    # The changelog deleted: status still shows the input's lag, and no tasks.
    admin = pipe.conn.admin()  # must outlive its future
    admin.delete_topics([pipe.topics.changelog])[pipe.topics.changelog].result()
    wait_until(lambda: not topic_exists(pipe.conn, pipe.topics.changelog), 60, "the changelog to be gone")
    gone = json.loads(pipe.brew("status", "--state-dir", str(dirs["state"]), "--json", check=True).stdout)
    assert gone["tasks"] == [] and gone["lag"] == 0


def test_bad_records_go_to_the_dlq_once_with_reason_and_bytes(
        pipe: Pipeline, spark: Any, dirs: dict[str, Path]) -> None:
    good = make_orders(300, seed=2)
    records: list[tuple[bytes | None, bytes | None]] = [order_bytes(o) for o in good]
    bad_at = sorted(random.Random(3).sample(range(len(records) + len(BAD_ORDERS)), len(BAD_ORDERS)))
    for pos, (name, raw, _) in zip(bad_at, BAD_ORDERS, strict=True):
        records.insert(pos, (name.encode(), raw))
    where = produce(pipe.conn, pipe.topics.orders, records)
    assert run_available_now(pipe, spark, dirs, max_offsets_per_trigger=100) == 0

    assert counts_json(pipe.conn, dirs["state"])["counts"] == oracle(good)
    dlq = read_topic(pipe.conn, pipe.topics.dlq)
    assert len(dlq) == len(BAD_ORDERS)
    by_source = {}
    for msg in dlq:
        h = {k: v.decode() for k, v in msg.headers()}
        assert h["source-topic"] == pipe.topics.orders
        by_source[(int(h["source-partition"]), int(h["source-offset"]))] = (msg, h)
    assert len(by_source) == len(BAD_ORDERS), "a bad record reached the DLQ twice"
    for pos, (name, raw, reason) in zip(bad_at, BAD_ORDERS, strict=True):
        msg, h = by_source[where[pos]]
        assert msg.value() == raw, name  # original bytes, untouched
        assert msg.key() == name.encode()
        assert reason in h["error"], (name, h["error"])


def test_replays_apply_nothing_twice(pipe: Pipeline, spark: Any, dirs: dict[str, Path]) -> None:
    orders = make_orders(1500, seed=4)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in orders))
    assert run_available_now(pipe, spark, dirs, max_offsets_per_trigger=500) == 0
    expected = oracle(orders)
    assert counts_json(pipe.conn, dirs["state"])["counts"] == expected

    # A lost checkpoint: the query starts over from the store's offsets.
    import shutil

    shutil.rmtree(dirs["ckpt"])
    assert run_available_now(pipe, spark, dirs) == 0
    assert counts_json(pipe.conn, dirs["state"])["counts"] == expected

    # The same rows again under the same and other batch ids, straight into the sink.
    df = (spark.read.format("kafka").options(**pipe.conn.spark_options()).option("subscribe", pipe.topics.orders)
          .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    with StateDir(dirs["state"]) as sd, Store(sd.store_path) as store:
        t = pipe.topics
        writer = ChangelogWriter(pipe.conn, t.changelog, [0, 1, 2])
        writer.start()
        sink = DrinkCountSink(store, writer, t.orders, t.dlq, FaultPlan(None, lambda: None))
        for batch_id in (0, 0, 1, 99):
            sink(df, batch_id)
        writer.close()
    assert counts_json(pipe.conn, dirs["state"])["counts"] == expected


def test_changelog_agrees_with_the_store(pipe: Pipeline, spark: Any, dirs: dict[str, Path]) -> None:
    orders = make_orders(1200, seed=5)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in orders))
    assert run_available_now(pipe, spark, dirs, max_offsets_per_trigger=300) == 0
    latest: dict[bytes, bytes] = {}
    for msg in read_topic(pipe.conn, pipe.topics.changelog, committed_only=True):
        latest[msg.key()] = msg.value()
    from_changelog = {k.decode(): int.from_bytes(v, "big") for k, v in latest.items() if not is_reserved(k)}
    assert from_changelog == counts_json(pipe.conn, dirs["state"])["counts"] == oracle(orders)


def test_store_wide_offsets_of_an_earlier_brewstream_move_to_the_tasks(
        pipe: Pipeline, spark: Any, dirs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store and changelog written as before per-task offsets (one input offset per input
    partition for the whole store): the next batch moves them to every task, deletes the
    old keys in both, and nothing is counted twice or lost, restored included."""
    first = make_orders(600, seed=11)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in first))
    with monkeypatch.context() as earlier:
        earlier.setattr(commit_module, "spread_offsets", lambda entries, _tasks, legacy=(): list(entries))
        assert run_available_now(pipe, spark, dirs, max_offsets_per_trigger=250) == 0
    before = counts_json(pipe.conn, dirs["state"])
    assert before["offsets"] and all(t["offsets"] == {} for t in before["tasks"].values())

    second = make_orders(300, seed=12)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in second))
    assert run_available_now(pipe, spark, dirs) == 0
    after = counts_json(pipe.conn, dirs["state"])
    assert after["counts"] == oracle(first + second)
    assert all(t["offsets"] == after["offsets"] for t in after["tasks"].values()) and after["offsets"]
    with Store(dirs["state"] / "store", read_only=True) as store:
        assert not [k for k, _ in store.items() if is_offset_key(k)]
    latest: dict[bytes, bytes | None] = {}
    for msg in read_topic(pipe.conn, pipe.topics.changelog, committed_only=True):
        latest[msg.key()] = msg.value()
    assert {k: v for k, v in latest.items() if is_offset_key(k)} == dict.fromkeys(
        (k for k in latest if is_offset_key(k)), None), "each store-wide offset ends in a tombstone"
    pipe.brew("restore", "--state-dir", str(tmp_path / "restored"), check=True)
    restored = counts_json(pipe.conn, tmp_path / "restored")
    assert (restored["counts"], restored["offsets"]) == (after["counts"], after["offsets"])


def test_snapshot_on_the_output_topic_matches_the_store(
        pipe: Pipeline, spark: Any, dirs: dict[str, Path]) -> None:
    orders = make_orders(800, seed=6)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in orders))
    assert run_available_now(pipe, spark, dirs, top_n=4) == 0
    snapshots = [json.loads(m.value()) for m in read_topic(pipe.conn, pipe.topics.counts)]
    assert snapshots, "no top-N snapshot was produced"
    last = snapshots[-1]
    assert last["processed_orders"] == len(orders)
    counts = counts_json(pipe.conn, dirs["state"])["counts"]
    expected = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:4]
    assert [(r["drink"], r["count"]) for r in last["top"]] == expected
    assert [r["rank"] for r in last["top"]] == [1, 2, 3, 4]
    assert last["ts"].endswith("Z") and isinstance(last["seq"], int)


def test_second_daemon_on_one_state_dir_exits_and_sigterm_is_clean(
        pipe: Pipeline, tmp_path: Path) -> None:
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in make_orders(200, seed=7)))
    state, ckpt = tmp_path / "state", tmp_path / "ckpt"
    log = tmp_path / "daemon.log"
    first = pipe.spawn("run", "--state-dir", str(state), "--checkpoint-dir", str(ckpt),
                       "--flush", "1s", log=log)
    try:
        wait_until(lambda: "processed=200" in log.read_text(), 180, "the first daemon to count the orders")
        second = pipe.brew("run", "--state-dir", str(state), "--checkpoint-dir", str(tmp_path / "c2"), timeout=120)
        assert second.returncode == 1
        assert "in use by another brewstream process" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1, second.stderr
        first.send_signal(signal.SIGTERM)
        assert first.wait(120) == 0, log.read_text()[-2000:]
    finally:
        if first.poll() is None:
            first.kill()
    text = log.read_text()
    assert text.rstrip().splitlines()[-1].strip() != ""  # the final board is the last thing printed
    assert text.count("processed=200") >= 2
    # The store was closed cleanly and opens again.
    assert sum(counts_json(pipe.conn, state)["counts"].values()) > 0


def test_sigterm_under_load_lets_the_batch_in_flight_commit(pipe: Pipeline, tmp_path: Path) -> None:
    """Orders keep arriving, so a SIGTERM lands while a batch runs most of the time. The
    batch commits before the query is stopped: stopping a query mid-batch had Spark match
    the Python error against a pattern that overflowed its stack (a StackOverflowError
    on stderr at most stops under load). The stop is exact: a restart counts the rest."""
    orders = make_orders(150_000, seed=9)  # 30 s of feed: longer than the batches the test waits for
    halt = threading.Event()

    def feed() -> None:
        producer = Producer({"bootstrap.servers": pipe.conn.bootstrap, "linger.ms": 5})
        for i in range(0, len(orders), 100):
            if halt.wait(0.02):
                break
            for o in orders[i:i + 100]:
                key, value = order_bytes(o)
                producer.produce(pipe.topics.orders, key=key, value=value)
        producer.flush(30)

    state, ckpt, log = tmp_path / "state", tmp_path / "ckpt", tmp_path / "daemon.log"
    proc = pipe.spawn("run", "--state-dir", str(state), "--checkpoint-dir", str(ckpt), log=log)
    feeder = threading.Thread(target=feed, daemon=True)
    try:
        wait_until(lambda: "batch 0 " in log.read_text(), 180, "the daemon to start")
        feeder.start()
        wait_until(lambda: log.read_text().count("(seq ") >= 12, 120, "batches under load")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == 0, log.read_text()[-3000:]
    finally:
        halt.set()
        if proc.poll() is None:
            proc.kill()
    feeder.join(60)
    text = log.read_text()
    assert "Exception in thread" not in text and "StackOverflowError" not in text, text[-3000:]
    sent = orders[:len(read_topic(pipe.conn, pipe.topics.orders))]  # one producer: the first ones, all of them
    again = pipe.brew("run", "--state-dir", str(state), "--checkpoint-dir", str(ckpt), "--available-now")
    assert again.returncode == 0, again.stderr[-3000:]
    assert counts_json(pipe.conn, state)["counts"] == oracle(sent)


def test_ctrl_c_to_the_process_group_is_a_clean_stop(pipe: Pipeline, tmp_path: Path) -> None:
    """A terminal's Ctrl+C reaches the daemon, its Spark JVM and its Python workers at once:
    exit 0 after a final board, no traceback (pyspark's own SIGINT handler would cancel
    the batch and raise inside a py4j call)."""
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in make_orders(150, seed=8)))
    log = tmp_path / "daemon.log"
    proc = pipe.spawn("run", "--state-dir", str(tmp_path / "state"), "--checkpoint-dir", str(tmp_path / "ckpt"),
                      "--flush", "1s", log=log)
    try:
        wait_until(lambda: "processed=150" in log.read_text(), 180, "the daemon to count the orders")
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(120) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    text = log.read_text()
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-3000:]
    assert text.count("processed=150") >= 2  # the final board


def test_the_log_lines_readers_rely_on_match_what_the_daemon_writes(pipe: Pipeline, tmp_path: Path) -> None:
    """Drills, the benchmark and tools read the ready and batch lines with these patterns."""
    from restorer.reader import RESTORED
    from service.drink_count.pipeline import BATCH_PATTERN
    from service.engine.query import READY_PATTERN
    from service.engine.sink import ANY_BATCH

    orders = make_orders(150, seed=8)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in orders))
    state = tmp_path / "state"
    proc = pipe.brew("run", "--state-dir", str(state), "--checkpoint-dir", str(tmp_path / "ckpt"), "--available-now",
                     check=True)
    ready = READY_PATTERN.search(proc.stderr)
    assert ready is not None and ready["pipeline"] == "drink-count" and ready["input"] == pipe.topics.orders
    batches = [m for line in proc.stderr.splitlines() if (m := BATCH_PATTERN.search(line))]
    assert batches and sum(int(m["orders"]) for m in batches) == len(orders)
    assert all(ANY_BATCH.search(m.string) for m in batches)
    restored = pipe.brew("restore", "--state-dir", str(tmp_path / "r"), check=True)
    m = RESTORED.search(restored.stdout)
    assert m is not None and int(m["partitions"]) == 3
