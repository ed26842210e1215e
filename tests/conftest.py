"""Fixtures on real parts: a KRaft broker started for the session, real Spark, real RocksDB."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.broker import Sandbox, down, free_port, up
from tests.helpers import Pipeline
from topics.admin import create_topics
from topics.catalog import Topics
from topics.kafka import KafkaConnection


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaConnection]:
    """The broker under test: KAFKA_BOOTSTRAP when set, else a fresh sandbox on a free
    port in a temp dir, stopped at the end. Tests use topics under prefixes of their own,
    apart from the one that creates the fixed names."""
    if os.environ.get("KAFKA_BOOTSTRAP"):
        yield KafkaConnection(os.environ["KAFKA_BOOTSTRAP"])
        return
    box = Sandbox(free_port(), tmp_path_factory.mktemp("kafka"))
    up(box)
    try:
        yield KafkaConnection(box.bootstrap)
    finally:
        down(box)


@pytest.fixture
def pipe(kafka: KafkaConnection, request: pytest.FixtureRequest) -> Pipeline:
    """Fresh, empty topics (3 partitions) under a prefix of this test's own."""
    global _pipelines
    _pipelines += 1
    name = re.sub(r"[^a-zA-Z0-9-]", "-", request.node.name)[:40]
    p = Pipeline(kafka, Topics(f"t{os.getpid()}-{_pipelines}-{name}."))
    create_topics(kafka, 3, 1, p.topics)
    return p


_pipelines = 0


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from service.spark_session import build_session

    session = build_session("local[2]", "brewstream-tests")
    yield session
    session.stop()


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    return {"state": tmp_path / "state" / "drink-count", "ckpt": tmp_path / "state" / "checkpoints"}
