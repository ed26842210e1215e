"""Read the daemon's top-N snapshots as a consumer would, stamping each on arrival."""

from __future__ import annotations

import bisect
import threading
import time

import orjson
from confluent_kafka import TopicPartition

from topics.kafka import KafkaConnection, partitions_of


class SnapshotReader(threading.Thread):
    def __init__(self, conn: KafkaConnection, topic: str) -> None:
        super().__init__(name="snapshots", daemon=True)
        self.conn = conn
        self.topic = topic
        self.arrivals: list[tuple[float, int]] = []  # (received, processed_orders), in order
        self._halt = threading.Event()

    def run(self) -> None:
        consumer = self.conn.consumer({"fetch.wait.max.ms": 10})
        try:
            consumer.assign([TopicPartition(self.topic, p, 0) for p in partitions_of(self.conn, self.topic)])
            while not self._halt.is_set():
                for msg in consumer.consume(100, timeout=0.05):
                    if msg.error() is None and msg.value():
                        processed = int(orjson.loads(msg.value() or b"{}").get("processed_orders", 0))
                        self.arrivals.append((time.monotonic(), processed))
        finally:
            consumer.close()

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive():
            self.join()

    def first_covering(self, processed: int) -> float | None:
        """Arrival time of the first snapshot that counts at least ``processed`` orders.

        The counter only grows within one daemon, so a snapshot counting that many was
        read from the store after the batch that brought the counter there.
        """
        counts = [p for _, p in self.arrivals]
        # processed_orders is non-decreasing across snapshots of one process.
        i = bisect.bisect_left(counts, processed)
        return self.arrivals[i][0] if i < len(self.arrivals) else None
