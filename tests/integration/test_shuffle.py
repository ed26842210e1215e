"""A shuffle's two stages on real Spark and Kafka, against an oracle of the orders fed.

The input stage counts orders (a few malformed) per input partition over several batches;
it is killed mid-transaction, then after its commit but before Spark's checkpoint, then
started once more with its checkpoint lost, each time as a new process would be. The
repartition topic then holds every share of an input offset once, the DLQ each malformed
order once, and the stage's progress is the input's end.

The task stage applies those parts to the drink counts in small batches (shares cut into
parts that batches end between), each task committing in a transaction of its own: killed
before the last task's commit (the others committed), after its changelog commit and
after its store commit, its store lost once, and a share written to the repartition topic a second time
cut otherwise (an input stage that lost its progress), beside two records no input stage
wrote: the store and the changelog each hold the oracle's counts and counters (good and
bad orders), every count in its task's changelog partition, and the DLQ each stray record
once."""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from restorer.catchup import bring_store_up_to_date
from restorer.changelog import ChangelogWriter
from restorer.codec import commit_key, decode_u64, meta_key
from restorer.faults import FaultPlan
from restorer.repartition import PartWriter, parts_of, resume_offsets
from restorer.shuffle import admit_all, cut_share
from restorer.store import Store
from restorer.tasks import task_of
from service.drills.recovery import stream
from service.drink_count.counts import BAD_ORDERS, PROCESSED_ORDERS, check_count, drink_key
from service.drink_count.shuffle import add_shares, shares_counter
from service.engine.sink import SinkOptions
from service.shuffle.input_stage import InputStageSink, StageOptions
from service.shuffle.task_stage import NOT_A_PART, TaskStageSink
from tests.support.helpers import create_topic
from topics.catalog import COMPACTED, REPARTITION
from topics.kafka import KafkaConnection, end_offsets
from topics.records import read_from

TASKS, INPUTS = 3, 3


class Crash(Exception):
    """The stage's process dying at a fault point."""


def crash() -> None:
    raise Crash("killed at a fault point")


def run_query(spark: Any, kafka: KafkaConnection, topic: str, checkpoint: Path, per_batch: int, sink: Any,
              partitions: list[int] | None = None) -> None:
    """The stage's query to the end of ``topic`` (of its ``partitions`` only, when given)."""
    source = (("assign", json.dumps({topic: partitions})) if partitions is not None else ("subscribe", topic))
    query = (spark.readStream.format("kafka").options(**kafka.spark_options()).option(*source)
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", str(per_batch))
             .option("kafka.isolation.level", "read_committed").load()
             .writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    with contextlib.suppress(Exception):  # the query's failure is the sink's, read by the caller
        query.awaitTermination(300)


def input_stage(spark: Any, kafka: KafkaConnection, topics: dict[str, str], checkpoint: Path, fault: str | None,
                per_batch: int = 400) -> BaseException | None:
    """One life of the input stage: a new writer (fencing the last), a new sink, the query
    from the checkpoint to the input's end; the sink's failure, if any."""
    writer = PartWriter(kafka, topics["repartition"], TASKS)
    writer.start()
    sink = InputStageSink(writer, shares_counter(), StageOptions(kafka, topics["orders"], topics["dlq"], checkpoint,
                                                                 part_bytes=48), FaultPlan(fault, crash))
    run_query(spark, kafka, topics["orders"], checkpoint, per_batch, sink)
    if fault is None:
        writer.close()  # a killed process leaves its transaction open: the next writer aborts it
    return sink.failure


def task_stage(spark: Any, kafka: KafkaConnection, topics: dict[str, str], state: Path, checkpoint: Path,
               fault: str | None, tasks: list[int] | None = None) -> BaseException | None:
    """One life of the task stage owning every task (or ``tasks`` only: its query assigned
    their repartition partitions, its writer their transactional ids): the store brought
    up to date with the changelog (restored when lost), a new writer, the query to the
    repartition topic's end."""
    store = Store(state)
    changelog = ChangelogWriter(kafka, topics["changelog"], list(range(TASKS)), by_task=True, tasks=tasks)
    try:
        changelog.start()
        bring_store_up_to_date(kafka, store, changelog, auto_restore=True, check_value=check_count)
        sink = TaskStageSink(store, changelog, FaultPlan(fault, crash), SinkOptions(kafka, checkpoint),
                             topics["repartition"], topics["orders"], add_shares, topics["dlq"])
        run_query(spark, kafka, topics["repartition"], checkpoint, 25, sink, tasks)
        return sink.failure
    finally:
        store.close()
        if fault is None:
            changelog.close()


def split_markers(kafka: KafkaConnection, topic: str) -> bool:
    """Whether the changelog's partitions name different batches (committed task by task)."""
    seqs = {m.partition(): decode_u64(m.value() or b"") for m in read_from(kafka, topic)
            if m.key() == commit_key(m.partition() or 0)}
    return len(set(seqs.values())) > 1


def make_topics(kafka: KafkaConnection) -> dict[str, str]:
    stamp = time.time_ns()
    topics = {name: f"sh-{name}-{stamp}" for name in ("orders", "repartition", "dlq", "changelog")}
    create_topic(kafka, topics["orders"], INPUTS)
    create_topic(kafka, topics["repartition"], TASKS, REPARTITION)
    create_topic(kafka, topics["dlq"])
    create_topic(kafka, topics["changelog"], TASKS, COMPACTED)
    return topics


@pytest.mark.spark
def test_each_order_is_counted_once_through_both_stages_whatever_dies(
        spark: Any, kafka: KafkaConnection, tmp_path: Path) -> None:
    topics = make_topics(kafka)
    records, expected, bad = stream(1500, 49)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for key, value in records:
        producer.produce(topics["orders"], key=key, value=value)
    assert producer.flush(30) == 0 and bad > 0
    oracle = {drink_key(d): n for d, n in expected.items()}
    oracle |= {meta_key(PROCESSED_ORDERS): len(records) - bad, meta_key(BAD_ORDERS): bad}

    # The input stage, killed twice, then without its checkpoint.
    checkpoint = tmp_path / "input-checkpoint"
    assert isinstance(input_stage(spark, kafka, topics, checkpoint, "mid-transaction@2"), Crash)
    assert isinstance(input_stage(spark, kafka, topics, checkpoint, "after-changelog-commit@1"), Crash)
    shutil.rmtree(checkpoint)  # Spark reads from the input's start again, cut otherwise
    assert input_stage(spark, kafka, topics, checkpoint, None, per_batch=250) is None

    consumer = kafka.consumer()
    try:
        ends = {p: high for p, (_, high) in end_offsets(consumer, topics["orders"], list(range(INPUTS))).items()}
    finally:
        consumer.close()
    assert resume_offsets(kafka, topics["repartition"]) == ends
    assert len(list(read_from(kafka, topics["dlq"]))) == bad
    written = list(read_from(kafka, topics["repartition"]))
    handed: dict[bytes, int] = {}
    for task in range(TASKS):
        parts, strays = parts_of(sorted((m.offset() or 0, m.value()) for m in written if m.partition() == task))
        assert not strays
        shares = [(p.partition, p.start, p.index) for p in parts]
        assert len(shares) == len(set(shares)), "a share was handed on twice"
        assert any(p.count > 1 for p in parts), "no share was cut into parts: the task stage's cursors go untried"
        done = admit_all({}, parts)
        assert len(done.parts) == len(parts) and {p: c.offset for p, c in done.cursors.items()} == ends
        for p in done.parts:
            for key, value in p.entries:
                assert task_of(key, TASKS) == task
                handed[key] = handed.get(key, 0) + decode_u64(value)
    assert handed == oracle

    # A share of each task written again, cut otherwise: an input stage that lost its progress.
    recut = {}
    for task in range(TASKS):
        parts, strays = parts_of(sorted((m.offset() or 0, m.value()) for m in written if m.partition() == task))
        assert not strays
        first = [p for p in parts if (p.partition, p.start) == (parts[0].partition, parts[0].start)]
        recut[task] = cut_share(first[0].partition, first[0].start, first[0].end,
                                [e for p in first for e in p.entries], 10_000)
    again = PartWriter(kafka, topics["repartition"], TASKS)
    again.start()
    again.publish(recut)
    again.close()
    # Two records no input stage wrote, each on a task's partition: each goes to the DLQ
    # once, with its reason, and its task goes on.
    producer.produce(topics["repartition"], key=b"k", value=b'{"drink": "latte"}', partition=0)
    producer.produce(topics["repartition"], key=b"t", value=None, partition=2)
    assert producer.flush(30) == 0

    # The task stage, killed after each of its commits, its store lost once.
    state, checkpoint = tmp_path / "store", tmp_path / "task-checkpoint"
    # Killed before the last task's commit: the other tasks committed that batch, and the
    # next life's catch-up takes the changelog's partitions at different batches.
    assert isinstance(task_stage(spark, kafka, topics, state, checkpoint, "mid-transaction@2"), Crash)
    assert split_markers(kafka, topics["changelog"]), "the kill left no task behind the others"
    assert isinstance(task_stage(spark, kafka, topics, state, checkpoint, "after-changelog-commit@2"), Crash)
    assert isinstance(task_stage(spark, kafka, topics, state, checkpoint, "after-store-commit@3"), Crash)
    shutil.rmtree(state)
    assert isinstance(task_stage(spark, kafka, topics, state, checkpoint, "after-store-commit@2"), Crash)
    assert task_stage(spark, kafka, topics, state, checkpoint, None) is None

    with Store(state, read_only=True) as store:
        assert store.get_u64(oracle) == oracle
        assert sum(not k.startswith(b"\xff") for k, _ in store.items()) == len(expected)
    passed = [dict(m.headers() or []) for m in read_from(kafka, topics["dlq"])
              if dict(m.headers() or []).get("source-topic") == topics["repartition"].encode()]
    assert sorted((h["source-partition"], h["error"]) for h in passed) == [
        (b"0", NOT_A_PART.encode()), (b"2", NOT_A_PART.encode())]
    latest: dict[bytes, bytes] = {}
    for m in read_from(kafka, topics["changelog"]):
        key = m.key() or b""
        if key in oracle:
            assert m.partition() == task_of(key, TASKS), f"{key!r} outside its task's partition"
            latest[key] = m.value() or b""
    assert {k: decode_u64(v) for k, v in latest.items()} == oracle


@pytest.mark.spark
def test_tasks_held_by_two_instances_count_each_order_once(spark: Any, kafka: KafkaConnection,
                                                           tmp_path: Path) -> None:
    """Two instances of the task stage hold the tasks between them ({0, 1} and {2}), each
    with a store of its own, committing to the one changelog at once; the first is killed
    after a changelog commit and starts again. Each store holds only its tasks' keys, the
    two together the oracle, and so do the changelog and a store restored from all of it
    (its partitions left at different batches)."""
    topics = make_topics(kafka)
    records, expected, bad = stream(900, 53)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for key, value in records:
        producer.produce(topics["orders"], key=key, value=value)
    assert producer.flush(30) == 0
    oracle = {drink_key(d): n for d, n in expected.items()}
    oracle |= {meta_key(PROCESSED_ORDERS): len(records) - bad, meta_key(BAD_ORDERS): bad}
    assert input_stage(spark, kafka, topics, tmp_path / "input-checkpoint", None) is None

    held = {"a": [0, 1], "b": [2]}

    def life(name: str, fault: str | None) -> BaseException | None:
        return task_stage(spark, kafka, topics, tmp_path / name, tmp_path / f"{name}-checkpoint", fault, held[name])

    with ThreadPoolExecutor(2) as pool:
        a, b = pool.submit(life, "a", "after-changelog-commit@2"), pool.submit(life, "b", None)
        assert isinstance(a.result(), Crash) and b.result() is None
    assert life("a", None) is None

    counted: dict[bytes, int] = {}
    for name, tasks in held.items():
        with Store(tmp_path / name, read_only=True) as store:
            mine = {k: decode_u64(v) for k, v in store.items() if not k.startswith(b"\xff")}
            counters = store.get_u64([k for k in oracle if k.startswith(b"\xff")])
        assert mine and all(task_of(k, TASKS) in tasks for k in mine), f"{name} holds another instance's keys"
        counted |= mine | counters
    assert counted == oracle

    latest = {m.key(): decode_u64(m.value() or b"") for m in read_from(kafka, topics["changelog"]) if m.key() in oracle}
    assert latest == oracle
    whole = Store(tmp_path / "whole")
    writer = ChangelogWriter(kafka, topics["changelog"], list(range(TASKS)), by_task=True)
    try:
        bring_store_up_to_date(kafka, whole, writer, auto_restore=True, check_value=check_count)
        assert whole.get_u64(oracle) == oracle
    finally:
        whole.close()
        writer.close()
