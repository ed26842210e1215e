"""Topics of a benchmark run: create, reset and measure them.

Everything a run creates carries ``bench-<stamp>`` in its name (Quix's own changelog and
repartition topics too, through its consumer group), so a run on an existing broker
can remove exactly what it made.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from functools import partial

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import NewTopic

from bench.errors import BenchError
from topics.admin import create_topics
from topics.catalog import Topics
from topics.clock import wait_until
from topics.kafka import KafkaConnection, end_offsets, partitions_of

READY_TIMEOUT_S = 30.0


def create_pipeline(conn: KafkaConnection, topics: Topics, partitions: int) -> None:
    """All of brewstream's topics under the prefix, with the catalog's settings."""
    create_topics(conn, partitions, 1, topics)
    wait_ready(conn, [s.name for s in topics.specs()])


def reset_outputs(conn: KafkaConnection, topics: Topics, partitions: int) -> None:
    """Empty changelog, snapshot and DLQ topics, keeping the input: each repetition of an
    ingest run must start from empty state, and an old changelog would be restored."""
    outputs = [topics.changelog, topics.counts, topics.dlq]
    admin = conn.admin()  # must outlive its futures
    _settle(admin.delete_topics(outputs, request_timeout=30), ignore=KafkaError.UNKNOWN_TOPIC_OR_PART)
    wait_until(lambda: not any(t in conn.admin().list_topics(timeout=10).topics for t in outputs),
               READY_TIMEOUT_S, f"topics {outputs} to be deleted", every=0.1)
    create_pipeline(conn, topics, partitions)


def create_plain(conn: KafkaConnection, name: str, partitions: int, config: Mapping[str, str] | None = None) -> None:
    admin = conn.admin()
    _settle(admin.create_topics([NewTopic(name, partitions, 1, config=dict(config or {}))], request_timeout=30))
    wait_ready(conn, [name])


def wait_ready(conn: KafkaConnection, names: Iterable[str]) -> None:
    """Until every partition answers a watermark query: a new topic's metadata takes a
    moment to reach every client, and the daemon fails fast on a missing partition."""
    consumer = conn.consumer()

    def answers(name: str) -> bool:
        try:
            end_offsets(consumer, name, partitions_of(conn, name), timeout=2.0)
        except Exception:
            return False
        return True

    try:
        for name in names:
            wait_until(partial(answers, name), READY_TIMEOUT_S, f"topic {name} to be ready", every=0.1)
    finally:
        consumer.close()


def high_watermarks(conn: KafkaConnection, topic: str) -> dict[int, int]:
    consumer = conn.consumer()
    try:
        return {p: high for p, (_, high) in end_offsets(consumer, topic, partitions_of(conn, topic)).items()}
    finally:
        consumer.close()


def committed_messages(conn: KafkaConnection, topic: str, timeout: float = 120.0) -> Iterator[Message]:
    """Every committed record of ``topic`` up to its end offsets of now, as it comes."""
    consumer = conn.consumer({"isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        parts = partitions_of(conn, topic)
        ends = {p: high for p, (_low, high) in end_offsets(consumer, topic, parts).items()}
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        todo = {p for p, e in ends.items() if e > 0}
        deadline = time.monotonic() + timeout
        while todo:
            if time.monotonic() > deadline:
                raise BenchError(f"{topic} was not read to its end within {timeout:.0f}s")
            for msg in consumer.consume(10_000, timeout=0.2):
                if msg.error() is not None:
                    raise BenchError(f"reading {topic} failed: {msg.error()}")
                yield msg
            for tp in consumer.position([TopicPartition(topic, p) for p in sorted(todo)]):
                if tp.offset >= ends[tp.partition]:
                    todo.discard(tp.partition)
    finally:
        consumer.close()


def topics_containing(conn: KafkaConnection, text: str) -> list[str]:
    return sorted(t for t in conn.admin().list_topics(timeout=10).topics if text in t)


def delete_containing(conn: KafkaConnection, text: str) -> int:
    names = topics_containing(conn, text)
    if names:
        admin = conn.admin()
        _settle(admin.delete_topics(names, request_timeout=30), ignore=KafkaError.UNKNOWN_TOPIC_OR_PART)
    return len(names)


def _settle(futures: Mapping[str, object], ignore: int | None = None) -> None:
    for name, future in futures.items():
        try:
            future.result()  # type: ignore[attr-defined]
        except KafkaException as exc:
            if ignore is None or exc.args[0].code() != ignore:
                raise BenchError(f"admin request on {name} failed: {exc.args[0].str()}") from None
