"""Test helpers that do not reuse the code under test: their own Kafka reads, their own oracle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from sandbox.cluster_layout import ClusterLayout, KafkaCluster
from service.drills.process import ChildProcess
from topics.catalog import Topics
from topics.kafka import KafkaConnection

BREW = str(Path(sys.executable).parent / "brewstream")


@dataclass(frozen=True)
class Pipeline:
    """One test's broker connection and its own topic names."""

    conn: KafkaConnection
    topics: Topics

    @property
    def env(self) -> dict[str, str]:
        return {"BREWSTREAM_TOPIC_PREFIX": self.topics.prefix}

    def brew(self, *args: str, timeout: float = 300, check: bool = False) -> subprocess.CompletedProcess[str]:
        return brew(self.conn, *args, timeout=timeout, env=self.env, check=check)

    def spawn(self, *args: str, log: Path | None = None, env: dict[str, str] | None = None) -> ChildProcess:
        return spawn_brew(self.conn, *args, env={**self.env, **(env or {})}, log=log)


@dataclass(frozen=True)
class ClusterUnderTest:
    """The shared three-node sandbox cluster: where it lives and how to reach it."""

    cluster: KafkaCluster
    layout: ClusterLayout

    @property
    def conn(self) -> KafkaConnection:
        """Straight to the brokers: never behind a network fault."""
        return KafkaConnection(self.layout.bootstrap)

    @property
    def proxied(self) -> KafkaConnection:
        """Through the fault proxies: sees every `sandbox.faults` fault."""
        return KafkaConnection(self.layout.proxy_bootstrap)


def brew(conn: KafkaConnection, *args: str, timeout: float = 300, env: dict[str, str] | None = None,
         check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the real console script against the test broker."""
    full_env = {**os.environ, "KAFKA_BOOTSTRAP": conn.bootstrap, **(env or {})}
    proc = subprocess.run([BREW, *args], capture_output=True, text=True, timeout=timeout, env=full_env)
    if check and proc.returncode != 0:
        raise AssertionError(f"brewstream {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc


def spawn_brew(conn: KafkaConnection, *args: str, env: dict[str, str] | None = None,
               log: Path | None = None) -> ChildProcess:
    """Start the console script in its own process group (so a drill can kill it whole),
    with the driver the drills and the benchmark use (``service.drills.process``); its
    output goes to ``log`` line by line."""
    log = log or Path(os.devnull)
    return ChildProcess(f"brewstream {args[0] if args else ''}".strip(), [BREW, *args], log,
                        env={"KAFKA_BOOTSTRAP": conn.bootstrap, **(env or {})}, error=AssertionError)


def produce(conn: KafkaConnection, topic: str, records: Iterable[tuple[bytes | None, bytes | None]],
            partition: int | None = None) -> list[tuple[int, int]]:
    """Produce in order; return (partition, offset) of each record, in the same order."""
    producer = Producer({"bootstrap.servers": conn.bootstrap, "linger.ms": 5, "enable.idempotence": True})
    where: dict[int, tuple[int, int]] = {}
    n = 0
    for i, (key, value) in enumerate(records):
        def delivered(err: Any, msg: Message, i: int = i) -> None:
            assert err is None, err
            where[i] = (msg.partition(), msg.offset())
        kwargs = {} if partition is None else {"partition": partition}
        producer.produce(topic, key=key, value=value, on_delivery=delivered, **kwargs)
        n += 1
        if n % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0, "records left undelivered"
    return [where[i] for i in range(n)]


def order_bytes(order: dict[str, Any]) -> tuple[bytes, bytes]:
    return order["shop_id"].encode(), json.dumps(order).encode()


def oracle(orders: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Expected counts, summed with nothing but a loop over the orders the test built."""
    totals: dict[str, int] = {}
    for order in orders:
        for item in order["items"]:
            totals[item["drink"]] = totals.get(item["drink"], 0) + item["quantity"]
    return totals


def read_topic(conn: KafkaConnection, topic: str, committed_only: bool = True,
               timeout: float = 60) -> list[Message]:
    """Every record of ``topic`` from the beginning to the end offsets taken now."""
    consumer = Consumer({
        "bootstrap.servers": conn.bootstrap, "group.id": "brewstream-tests", "enable.auto.commit": False,
        "isolation.level": "read_committed" if committed_only else "read_uncommitted",
    })
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        ends = {}
        for p in meta.partitions:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
            ends[p] = high
        todo = {p for p, e in ends.items() if e > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in todo])
        out: list[Message] = []
        deadline = time.monotonic() + timeout
        while todo:
            assert time.monotonic() < deadline, f"reading {topic} did not reach {ends}"
            for msg in consumer.consume(1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                if msg.offset() < ends[msg.partition()]:
                    out.append(msg)
            for tp in consumer.position([TopicPartition(topic, p) for p in todo]):
                if tp.offset >= ends[tp.partition]:
                    todo.discard(tp.partition)
        return out
    finally:
        consumer.close()


def counts_json(conn: KafkaConnection, state_dir: Path) -> dict[str, Any]:
    proc = brew(conn, "counts", "--state-dir", str(state_dir), "--json", check=True)
    return json.loads(proc.stdout)


def create_topic(conn: KafkaConnection, name: str, partitions: int = 1,
                 config: dict[str, str] | None = None, replication_factor: int = 1) -> None:
    from confluent_kafka.admin import NewTopic

    admin = conn.admin()  # must outlive the future
    admin.create_topics([NewTopic(name, partitions, replication_factor, config=config or {})])[name].result()


def set_topic_config(conn: KafkaConnection, topic: str, **config: str) -> None:
    """Set topic settings on the broker; ``max_message_bytes="3000"`` sets max.message.bytes."""
    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
               for k, v in config.items()]
    admin = conn.admin()
    for f in admin.incremental_alter_configs([ConfigResource(ConfigResource.Type.TOPIC, topic,
                                                             incremental_configs=entries)]).values():
        f.result()
