"""Fixtures on real parts: a KRaft broker started for the session, real Spark, real RocksDB."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic

from sandbox.broker import Sandbox, down, free_port, up
from service.kafka import KafkaConnection
from topics.catalog import ALL_TOPICS


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaConnection]:
    """The broker under test: KAFKA_BOOTSTRAP when set (its project topics get recreated!),
    else a fresh sandbox on a free port in a temp dir, stopped at the end."""
    if os.environ.get("KAFKA_BOOTSTRAP"):
        yield KafkaConnection(os.environ["KAFKA_BOOTSTRAP"])
        return
    box = Sandbox(free_port(), tmp_path_factory.mktemp("kafka"))
    up(box)
    try:
        yield KafkaConnection(box.bootstrap)
    finally:
        down(box)


def recreate_topics(conn: KafkaConnection, partitions: int = 3, timeout: float = 60) -> None:
    """Delete every project topic and create it again, empty (deletion is asynchronous)."""
    admin = conn.admin()
    names = [t.name for t in ALL_TOPICS]
    existing = set(admin.list_topics(timeout=10).topics)
    doomed = [n for n in names if n in existing]
    if doomed:
        for f in admin.delete_topics(doomed, request_timeout=30).values():
            f.result()
    deadline = time.monotonic() + timeout
    todo = list(ALL_TOPICS)
    while todo:
        futures = admin.create_topics(
            [NewTopic(t.name, partitions, 1, config=dict(t.config)) for t in todo], request_timeout=30)
        retry = []
        for spec, f in zip(todo, futures.values(), strict=True):
            try:
                f.result()
            except KafkaException as exc:
                code = exc.args[0].code()
                if code == KafkaError.TOPIC_ALREADY_EXISTS and spec.name not in doomed:
                    continue
                retry.append(spec)  # still being deleted
        todo = retry
        if todo:
            assert time.monotonic() < deadline, f"could not recreate {[t.name for t in todo]}"
            time.sleep(0.3)


@pytest.fixture
def topics(kafka: KafkaConnection) -> KafkaConnection:
    """A clean slate: every project topic empty, 3 partitions."""
    recreate_topics(kafka)
    return kafka


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from service.spark_session import build_session

    session = build_session("local[2]", "brewstream-tests")
    yield session
    session.stop()


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    return {"state": tmp_path / "state" / "drink-count", "ckpt": tmp_path / "state" / "checkpoints"}
