"""The sandbox broker: a real KRaft node from Maven jars, started and stopped by us."""

from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from sandbox.broker import Sandbox, down, free_port, serves, status, up
from tests.support.helpers import create_topic
from topics.errors import BrewError
from topics.kafka import KafkaConnection


def test_up_produce_consume_down_and_up_twice(tmp_path: Path) -> None:
    box = Sandbox(free_port(), tmp_path / "kafka")
    assert "sandbox up" in up(box)
    try:
        assert "already running" in up(box)  # idempotent
        assert status(box)[0]
        create_topic(KafkaConnection(box.bootstrap), "hello")
        producer = Producer({"bootstrap.servers": box.bootstrap})
        producer.produce("hello", key=b"k", value=b"brewed")
        assert producer.flush(10) == 0
        consumer = Consumer({"bootstrap.servers": box.bootstrap, "group.id": "t", "enable.auto.commit": False})
        consumer.assign([TopicPartition("hello", 0, 0)])
        msg = None
        for _ in range(40):
            msg = consumer.poll(0.5)
            if msg is not None:
                break
        consumer.close()
        assert msg is not None and msg.error() is None and msg.value() == b"brewed"
    finally:
        assert "stopped" in down(box)
    assert not serves(box.bootstrap, timeout=2)
    assert not status(box)[0]
    assert down(box) == "sandbox not running"


def test_up_on_a_used_port_says_so(kafka: KafkaConnection, tmp_path: Path) -> None:
    port = int(kafka.bootstrap.rsplit(":", 1)[1])
    with pytest.raises(BrewError, match=f"port {port} is already in use"):
        up(Sandbox(port, tmp_path / "other"))
