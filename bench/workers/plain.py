"""What both plain-consumer workers share: assign every partition from 0 and read to the
end offsets taken at start, with no consumer group, no commits and no state, with the
client tuned for a fast sequential read."""

from __future__ import annotations

from collections.abc import Iterator

from confluent_kafka import Consumer, Message, TopicPartition

POLL_BATCH = 10_000
POLL_WAIT_S = 0.02  # the restorer's short wait (topics.kafka.POLL_WAIT_S), so no tail waits out a long one


def read_all(bootstrap: str, topic: str, isolation: str) -> Iterator[list[Message]]:
    """Batches of records up to the end offsets; assignment only, so no group join."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "bench-plain-reader", "enable.auto.commit": False,
        "isolation.level": isolation, "log_level": 2,
        # A limit must not be held back by the client: librdkafka pauses fetching a
        # partition for fetch.queue.backoff.ms (1 s by default) whenever its local queue
        # is over queued.min.messages, which starves a reader of small records (a 1M-record
        # changelog read takes ~5 s instead of ~1 s on the benchmark machine).
        "fetch.queue.backoff.ms": 10,
    })
    try:
        parts = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1] for p in parts}
        todo = {p for p, e in ends.items() if e > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in sorted(todo)])
        while todo:
            batch = consumer.consume(POLL_BATCH, timeout=POLL_WAIT_S)
            for msg in batch:
                if msg.error() is not None:
                    raise RuntimeError(f"reading {topic} failed: {msg.error()}")
            yield [m for m in batch if (m.offset() or 0) < ends[m.partition() or 0]]
            # Positions, not record offsets, say when a partition is done: transaction
            # markers occupy offsets that are never delivered.
            for tp in consumer.position([TopicPartition(topic, p) for p in sorted(todo)]):
                if tp.offset >= ends[tp.partition]:
                    todo.discard(tp.partition)
    finally:
        consumer.close()

