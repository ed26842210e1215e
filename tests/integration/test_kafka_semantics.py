"""What the design leans on: transactions and log compaction really work on this broker."""

import time

from confluent_kafka import Producer

from tests.support.helpers import create_topic, read_topic
from topics.catalog import COMPACTED
from topics.clock import wait_until
from topics.kafka import KafkaConnection


def test_aborted_transaction_is_invisible_committed_is_visible(kafka: KafkaConnection) -> None:
    topic = f"txn-{time.time_ns()}"
    create_topic(kafka, topic)
    p = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": f"t-{topic}"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, key=b"k", value=b"aborted")
    p.flush(10)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, key=b"k", value=b"committed")
    p.commit_transaction(30)
    committed = [m.value() for m in read_topic(kafka, topic, committed_only=True)]
    everything = [m.value() for m in read_topic(kafka, topic, committed_only=False)]
    assert committed == [b"committed"]
    assert everything == [b"aborted", b"committed"]


def test_compaction_removes_older_values(kafka: KafkaConnection) -> None:
    # The changelog's settings, with segments rolling every second instead of every
    # minute so the cleaner gets closed segments within a test's patience.
    topic = f"compact-{time.time_ns()}"
    config = {**COMPACTED, "segment.ms": "1000", "min.compaction.lag.ms": "0"}
    create_topic(kafka, topic, config=config)
    p = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5})
    written = 0
    for version in range(200):
        for key in (b"latte", b"mocha", b"tea"):
            p.produce(topic, key=key, value=version.to_bytes(8, "big"))
            written += 1
    p.flush(10)

    def compacted() -> bool:
        # Keep appending: a segment only rolls when a record arrives after segment.ms.
        nonlocal written
        p.produce(topic, key=b"tick", value=b"\x00" * 8)
        p.flush(10)
        written += 1
        return len(read_topic(kafka, topic)) < written // 2

    wait_until(compacted, timeout=90, what="the log cleaner to compact the topic", every=1.0)
    latest = {m.key(): m.value() for m in read_topic(kafka, topic)}
    assert latest[b"latte"] == (199).to_bytes(8, "big")
