"""Fixtures on real parts: a KRaft broker started for the session (and a three-node KRaft
cluster for the tests that ask for one), real Spark, real RocksDB."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from sandbox import cluster as kafka_cluster_sandbox
from sandbox import faults
from sandbox.broker import Sandbox, down, free_port, up
from sandbox.cluster_layout import KafkaCluster
from sandbox.kraft import free_port_run
from service.spark.cache_files import CACHE_ENV, cache_dir
from tests.support.helpers import ClusterUnderTest, Pipeline, brew
from topics.admin import create_topics
from topics.catalog import Topics
from topics.kafka import KafkaConnection

# The properties hold or fail whatever the machine's speed: a slow CI machine, or a first
# run with cold imports, must not fail a test on the time its examples took to make or run
# (a generated blob's nested lists once tripped hypothesis' too_slow check that way).
settings.register_profile("brewstream", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("brewstream")


# The session's brokers keep nothing past it (their data dirs are temp dirs): a controlled
# shutdown that drags, three nodes at once losing their quorum, is cut short by a SIGKILL.
SESSION_END_STOP_S = 5.0


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
        down(box, SESSION_END_STOP_S)


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterUnderTest]:
    """A three-node KRaft cluster (replication factor 3, min.insync.replicas=2) with the fault
    proxy in front, on free ports in a temp dir: started the first time a test asks for it,
    shared by every test after, stopped at the end. Tests that fault it use
    ``healthy_kafka_cluster``, which puts it right again."""
    kc = KafkaCluster(tmp_path_factory.mktemp("kafka-cluster"))
    kafka_cluster_sandbox.up(kc, free_port_run(3), 3, fault_proxy=True)
    try:
        yield ClusterUnderTest(kc, kc.layout())
    finally:
        kafka_cluster_sandbox.down(kc, SESSION_END_STOP_S)


@pytest.fixture
def healthy_kafka_cluster(kafka_cluster: ClusterUnderTest) -> Iterator[ClusterUnderTest]:
    """``kafka_cluster`` with every node up and no network fault, before the test and after it,
    whatever the test killed, paused or faulted."""
    _make_healthy(kafka_cluster)
    yield kafka_cluster
    _make_healthy(kafka_cluster)


def _make_healthy(c: ClusterUnderTest) -> None:
    # Idempotent: starts the nodes that are down (and the proxy), resumes the paused ones,
    # waits until every node lists every other and the quorum has a leader.
    kafka_cluster_sandbox.up(c.cluster, c.layout.base_port, len(c.layout.nodes), fault_proxy=True)
    faults.heal(c.cluster)


@pytest.fixture(scope="session", autouse=True)
def jvm_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Spark's class archive of this suite (``service.spark.jvm_archive``), in a folder of its own
    unless the caller chose one (``off`` included)."""
    folder = Path(os.environ.setdefault(CACHE_ENV, str(tmp_path_factory.mktemp("jvm-cache"))))
    yield folder


@pytest.fixture(scope="session")
def jvm_archive_built(kafka: KafkaConnection, jvm_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The archive written once, up front, by a daemon of its own: otherwise whichever test
    first stopped a daemon cleanly would write it, and its run would last longer and log more
    than the same test's run at another place in the order."""
    if cache_dir() is None or list(jvm_cache.glob("*.jsa")):
        return
    topics = Topics(f"t{os.getpid()}-jvm-archive.")
    create_topics(kafka, 3, 1, topics)
    d = tmp_path_factory.mktemp("jvm-archive-run")
    brew(kafka, "run", "--available-now", "--state-dir", str(d / "state"), "--checkpoint-dir", str(d / "ckpt"),
         env={"BREWSTREAM_TOPIC_PREFIX": topics.prefix}, check=True)
    assert list(jvm_cache.glob("*.jsa")), f"no class archive in {jvm_cache}"


@pytest.fixture(autouse=True)
def _archive_before_any_daemon(request: pytest.FixtureRequest) -> None:
    """Every test that has a broker, and so may start a daemon, finds the archive written."""
    if "kafka" in request.fixturenames:
        request.getfixturevalue("jvm_archive_built")


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
    from service.spark.session import build_session

    session = build_session("local[2]", "brewstream-tests")
    yield session
    session.stop()


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    return {"state": tmp_path / "state" / "drink-count", "ckpt": tmp_path / "state" / "checkpoints"}
