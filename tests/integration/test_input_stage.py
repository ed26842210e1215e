"""A shuffle's input stage on real Spark and Kafka: orders (a few malformed) counted per
input partition over several batches, a stage killed mid-transaction and another killed
after its commit but before Spark's checkpoint, each started again as a new process would
be, the last with its checkpoint lost. Read back by each task with the shuffle's rule, the repartition topic holds every
drink's count once (against an oracle of the orders fed), each share of an input offset
once, the DLQ each malformed order once, and the stage's progress is the input's end."""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from restorer.faults import FaultPlan
from restorer.repartition import PartWriter, parts_of, resume_offsets
from restorer.shuffle import admit_all
from restorer.tasks import task_of
from service.drills.recovery import stream
from service.drink_count.counts import drink_key
from service.drink_count.input_stage import shares_counter
from service.shuffle.input_stage import InputStageSink, StageOptions
from tests.support.helpers import create_topic
from topics.catalog import REPARTITION
from topics.kafka import KafkaConnection, end_offsets
from topics.records import read_from

TASKS, INPUTS = 3, 3


class Crash(Exception):
    """The stage's process dying at a fault point."""


def crash() -> None:
    raise Crash("killed at a fault point")


def run_stage(spark: Any, kafka: KafkaConnection, topics: dict[str, str], checkpoint: Path,
              fault: str | None, per_batch: int = 400) -> BaseException | None:
    """One life of the input stage: a new writer (fencing the last), a new sink, the query
    from the checkpoint to the input's end; the query's failure, if any."""
    writer = PartWriter(kafka, topics["repartition"], TASKS, topics["orders"])
    writer.start()
    sink = InputStageSink(writer, shares_counter(), StageOptions(kafka, topics["orders"], topics["dlq"], checkpoint),
                          FaultPlan(fault, crash))
    query = (spark.readStream.format("kafka").options(**kafka.spark_options()).option("subscribe", topics["orders"])
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", str(per_batch))
             .option("kafka.isolation.level", "read_committed").load()
             .writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    with contextlib.suppress(Exception):  # the query's failure is the sink's, read below
        query.awaitTermination(300)
    failure = sink.failure
    if fault is None:
        writer.close()  # a killed process leaves its transaction open: the next writer aborts it
    return failure


@pytest.mark.spark
def test_each_order_reaches_its_task_once_through_a_crash_mid_transaction_and_after_the_commit(
        spark: Any, kafka: KafkaConnection, tmp_path: Path) -> None:
    stamp = time.time_ns()
    topics = {"orders": f"is-orders-{stamp}", "repartition": f"is-rp-{stamp}", "dlq": f"is-dlq-{stamp}"}
    create_topic(kafka, topics["orders"], INPUTS)
    create_topic(kafka, topics["repartition"], TASKS, REPARTITION)
    create_topic(kafka, topics["dlq"])
    records, expected, bad = stream(2000, 49)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for key, value in records:
        producer.produce(topics["orders"], key=key, value=value)
    assert producer.flush(30) == 0 and bad > 0

    checkpoint = tmp_path / "checkpoint"
    assert isinstance(run_stage(spark, kafka, topics, checkpoint, "mid-transaction@2"), Crash)
    assert isinstance(run_stage(spark, kafka, topics, checkpoint, "after-changelog-commit@1"), Crash)
    # The checkpoint lost: Spark reads from the input's start again, in batches cut
    # otherwise, one of them across the stage's progress.
    shutil.rmtree(checkpoint)
    assert run_stage(spark, kafka, topics, checkpoint, None, per_batch=250) is None

    consumer = kafka.consumer()
    try:
        ends = {p: high for p, (_, high) in end_offsets(consumer, topics["orders"], list(range(INPUTS))).items()}
    finally:
        consumer.close()
    assert resume_offsets(kafka, topics["repartition"], topics["orders"], range(INPUTS)) == ends

    messages = list(read_from(kafka, topics["repartition"]))
    got: dict[str, int] = {}
    for task in range(TASKS):
        parts = parts_of(sorted((m.offset() or 0, m.value()) for m in messages if m.partition() == task))
        shares = [(p.partition, p.start, p.index) for p in parts]
        assert len(shares) == len(set(shares)), "a share was handed on twice"
        done = admit_all({}, parts)
        assert len(done.parts) == len(parts)
        assert {p: c.offset for p, c in done.cursors.items()} == ends
        for p in done.parts:
            for key, value in p.entries:
                assert task_of(key, TASKS) == task
                got[key.decode()] = got.get(key.decode(), 0) + int.from_bytes(value, "big")
    assert got == expected
    assert all(task_of(drink_key(d), TASKS) in range(TASKS) for d in expected)
    assert len(list(read_from(kafka, topics["dlq"]))) == bad
