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


class _Follower(threading.Thread):
    """Follows ``topic`` from its start, ``read_committed``, stamping each batch of records
    on arrival (CLOCK_MONOTONIC); ``_take`` is what a watcher makes of one record. Started,
    it reads until ``stop``; not started, ``read_to_end`` reads up to the end offsets of now."""

    def __init__(self, conn: KafkaConnection, topic: str, name: str) -> None:
        super().__init__(name=f"{name}-{topic}", daemon=True)
        self.conn = conn
        self.topic = topic
        self.error = ""
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._consumer = conn.consumer({"isolation.level": "read_committed", "fetch.wait.max.ms": 10,
                                        "fetch.queue.backoff.ms": 10})
        self._consumer.assign([TopicPartition(topic, p, 0) for p in partitions_of(conn, topic)])

    def _take(self, key: bytes | None, value: bytes | None, now: float) -> None:
        raise NotImplementedError

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
                self._take(msg.key(), msg.value(), now)
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


class OutputWatcher(_Follower):
    def __init__(self, conn: KafkaConnection, topic: str) -> None:
        super().__init__(conn, topic, "output")
        self.first_seen: dict[int, float] = {}  # probe index -> first arrival
        self.arrivals: list[float] = []  # arrival of every record (a timeline of output)
        self._latest: dict[str, int] = {}
        self.cups = 0  # sum of the latest sums of every ordinary drink

    def _take(self, key: bytes | None, value: bytes | None, now: float) -> None:
        if not key or key[0] == RESERVED or not value or len(value) != 8:
            return
        drink = key.decode("utf-8", "replace")
        total = int.from_bytes(value, "big")
        self.arrivals.append(now)
        if drink.startswith(PROBE_PREFIX):
            self.first_seen.setdefault(int(drink[len(PROBE_PREFIX):]), now)
        else:
            self.cups += total - self._latest.get(drink, 0)
        self._latest[drink] = total

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


class WindowWatcher(_Follower):
    """Every result ``parse`` makes of a record of a topic of window results, in arrival
    order (a window seen twice is kept twice, for the scenario to refuse); ``records``
    counts every committed record read."""

    def __init__(self, conn: KafkaConnection, topic: str, parse: WindowParser) -> None:
        super().__init__(conn, topic, "windows")
        self.parse = parse
        self.results: list[WindowResult] = []
        self.records = 0

    def _take(self, key: bytes | None, value: bytes | None, now: float) -> None:
        self.records += 1
        result = self.parse(key, value, now)
        if result is not None:
            self.results.append(result)

    def seen(self) -> list[WindowResult]:
        with self._lock:
            return list(self.results)


class _RecordCounter(_Follower):
    def __init__(self, conn: KafkaConnection, topic: str) -> None:
        super().__init__(conn, topic, "count")
        self.records = 0

    def _take(self, key: bytes | None, value: bytes | None, now: float) -> None:
        self.records += 1


def committed_records(conn: KafkaConnection, topic: str, timeout: float = 120.0) -> int:
    """How many committed records ``topic`` holds now (read ``read_committed`` to its end
    offsets, which count transaction markers too)."""
    counter = _RecordCounter(conn, topic)
    try:
        counter.read_to_end(timeout)
    except TimeoutError as exc:
        raise BenchError(str(exc)) from exc
    return counter.records
