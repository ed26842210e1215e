"""What every system under test publishes, read as a downstream consumer reads it.

Each system writes per-drink sums to a Kafka topic, key the drink (UTF-8) and value the
absolute sum as an 8-byte big-endian integer: brewstream's changelog (its transaction
also carries offset markers under keys that start with 0xFF, which are skipped), Kafka
Streams' output topic, Spark's Kafka sink. A reader with ``isolation.level=read_committed``
sees a sum once the system has committed it (Spark's sink is not transactional: its
rows are visible as soon as they are written).

``OutputWatcher`` follows such a topic from its start in a thread, stamping each record
on arrival (CLOCK_MONOTONIC): the first arrival of each latency probe's drink
(``dataset.OrderStream.probe_every``), the latest sum per drink, and the sum of all
ordinary drinks (cups counted), which the sustained-rate scenario compares with the
cups produced. ``WindowWatcher`` does the same for the window results of the event-time
windows scenario, each parsed by its system's own reader.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import TopicPartition

from bench.dataset import PROBE_PREFIX
from bench.errors import BenchError
from topics.kafka import KafkaConnection, end_offsets, partitions_of

RESERVED = 0xFF  # brewstream's store-only and marker keys start with this byte


def latest_sums(conn: KafkaConnection, topic: str) -> dict[str, int]:
    """The last committed sum of every drink in ``topic``, read to its end offsets now."""
    watcher = OutputWatcher(conn, topic)
    watcher.read_to_end()
    return watcher.sums()


class OutputWatcher(threading.Thread):
    def __init__(self, conn: KafkaConnection, topic: str) -> None:
        super().__init__(name=f"output-{topic}", daemon=True)
        self.conn = conn
        self.topic = topic
        self.first_seen: dict[int, float] = {}  # probe index -> first arrival
        self.arrivals: list[float] = []  # arrival of every record (a timeline of output)
        self._latest: dict[str, int] = {}
        self.cups = 0  # sum of the latest sums of every ordinary drink
        self.error = ""
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._consumer = conn.consumer({"isolation.level": "read_committed", "fetch.wait.max.ms": 10,
                                        "fetch.queue.backoff.ms": 10})
        self._consumer.assign([TopicPartition(topic, p, 0) for p in partitions_of(conn, topic)])

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                self._poll(0.05)
        except Exception as exc:  # kept for the scenario to report
            self.error = str(exc)
        finally:
            self._consumer.close()

    def _poll(self, timeout: float) -> int:
        batch = self._consumer.consume(1000, timeout=timeout)
        now = time.monotonic()
        with self._lock:
            for msg in batch:
                if msg.error() is not None:
                    raise RuntimeError(f"reading {self.topic} failed: {msg.error()}")
                key, value = msg.key(), msg.value()
                if not key or key[0] == RESERVED or not value or len(value) != 8:
                    continue
                drink = key.decode("utf-8", "replace")
                total = int.from_bytes(value, "big")
                self.arrivals.append(now)
                if drink.startswith(PROBE_PREFIX):
                    self.first_seen.setdefault(int(drink[len(PROBE_PREFIX):]), now)
                else:
                    self.cups += total - self._latest.get(drink, 0)
                self._latest[drink] = total
        return len(batch)

    def read_to_end(self, timeout: float = 120.0) -> None:
        """Read (in this thread, not started) up to the end offsets of now."""
        consumer = self.conn.consumer()
        try:
            parts = partitions_of(self.conn, self.topic)
            ends = {p: high for p, (_low, high) in end_offsets(consumer, self.topic, parts).items()}
        finally:
            consumer.close()
        deadline = time.monotonic() + timeout
        todo = {p for p, e in ends.items() if e > 0}
        try:
            while todo and time.monotonic() < deadline:
                self._poll(0.05)
                for tp in self._consumer.position([TopicPartition(self.topic, p) for p in sorted(todo)]):
                    if tp.offset >= ends[tp.partition]:
                        todo.discard(tp.partition)
        finally:
            self._consumer.close()
        if todo:
            raise TimeoutError(f"{self.topic} was not read to its end within {timeout:.0f}s")

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive():
            self.join()

    def sums(self) -> dict[str, int]:
        """The latest sum of every drink seen, probes included."""
        with self._lock:
            return dict(self._latest)

    def counted_cups(self) -> int:
        with self._lock:
            return self.cups


@dataclass(frozen=True)
class WindowResult:
    """One final window result as a reader of a system's output sees it."""

    start_ns: int
    end_ns: int
    count: int
    cents: int
    arrived: float  # CLOCK_MONOTONIC, when the reader got it
    late_accepted: int | None = None  # brewstream says how many came after the watermark passed the end


WindowParser = Callable[[bytes | None, bytes | None, float], WindowResult | None]


class WindowWatcher(threading.Thread):
    """Follows a topic of window results from its start, ``read_committed``, in a thread:
    every result ``parse`` makes of a record, in arrival order (a window seen twice is kept
    twice, for the scenario to refuse); ``records`` counts every committed record read."""

    def __init__(self, conn: KafkaConnection, topic: str, parse: WindowParser) -> None:
        super().__init__(name=f"windows-{topic}", daemon=True)
        self.topic = topic
        self.parse = parse
        self.results: list[WindowResult] = []
        self.records = 0
        self.error = ""
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._consumer = conn.consumer({"isolation.level": "read_committed", "fetch.wait.max.ms": 10,
                                        "fetch.queue.backoff.ms": 10})
        self._consumer.assign([TopicPartition(topic, p, 0) for p in partitions_of(conn, topic)])

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                batch = self._consumer.consume(1000, timeout=0.05)
                now = time.monotonic()
                with self._lock:
                    for msg in batch:
                        if msg.error() is not None:
                            raise RuntimeError(f"reading {self.topic} failed: {msg.error()}")
                        self.records += 1
                        result = self.parse(msg.key(), msg.value(), now)
                        if result is not None:
                            self.results.append(result)
        except Exception as exc:  # kept for the scenario to report
            self.error = str(exc)
        finally:
            self._consumer.close()

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive():
            self.join()

    def seen(self) -> list[WindowResult]:
        with self._lock:
            return list(self.results)


def committed_records(conn: KafkaConnection, topic: str, timeout: float = 120.0) -> int:
    """How many committed records ``topic`` holds now (read ``read_committed`` to its end
    offsets, which count transaction markers too)."""
    consumer = conn.consumer({"isolation.level": "read_committed", "fetch.queue.backoff.ms": 10})
    try:
        parts = partitions_of(conn, topic)
        ends = {p: high for p, (_low, high) in end_offsets(consumer, topic, parts).items()}
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        todo = {p for p, e in ends.items() if e > 0}
        count = 0
        deadline = time.monotonic() + timeout
        while todo and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.05):
                if msg.error() is not None:
                    raise RuntimeError(f"reading {topic} failed: {msg.error()}")
                count += 1
            for tp in consumer.position([TopicPartition(topic, p) for p in sorted(todo)]):
                if tp.offset >= ends[tp.partition]:
                    todo.discard(tp.partition)
    finally:
        consumer.close()
    if todo:
        raise BenchError(f"{topic} was not read to its end within {timeout:.0f}s")
    return count
