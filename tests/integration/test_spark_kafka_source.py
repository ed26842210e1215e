"""Spark's Kafka source on our broker: headers included, every record once across a restart."""

import time
from pathlib import Path
from typing import Any

from tests.support.helpers import create_topic
from topics.kafka import KafkaConnection


def run_once(spark: Any, kafka: KafkaConnection, topic: str, ckpt: Path, seen: list[tuple[int, int, Any]]) -> None:
    def sink(df: Any, _batch_id: int) -> None:
        for r in df.select("partition", "offset", "headers").collect():
            seen.append((r.partition, r.offset, [(h.key, bytes(h.value)) for h in r.headers]))

    q = (spark.readStream.format("kafka").options(**kafka.spark_options()).option("subscribe", topic)
         .option("startingOffsets", "earliest").option("includeHeaders", "true").load()
         .writeStream.foreachBatch(sink).option("checkpointLocation", str(ckpt))
         .trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None


def test_every_record_exactly_once_across_restart(spark: Any, kafka: KafkaConnection, tmp_path: Path) -> None:
    topic = f"spark-src-{time.time_ns()}"
    create_topic(kafka, topic, 3)
    from confluent_kafka import Producer

    def send(start: int, n: int) -> None:
        p = Producer({"bootstrap.servers": kafka.bootstrap})
        for i in range(start, start + n):
            p.produce(topic, key=str(i).encode(), value=b"v", headers=[("event-time", i.to_bytes(8, "big"))])
        assert p.flush(10) == 0

    seen: list[tuple[int, int, Any]] = []
    send(0, 500)
    run_once(spark, kafka, topic, tmp_path / "ckpt", seen)
    assert len(seen) == 500
    send(500, 300)
    run_once(spark, kafka, topic, tmp_path / "ckpt", seen)
    assert len(seen) == 800
    assert len({(p, o) for p, o, _ in seen}) == 800, "a record was seen twice"
    header_values = sorted(int.from_bytes(h[0][1], "big") for _, _, h in seen)
    assert header_values == list(range(800))
    assert all(h[0][0] == "event-time" for _, _, h in seen)
