"""Produce orders to the input topic: generated at a rate, or a file's lines verbatim."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson
from confluent_kafka import KafkaError, Message

from topics.catalog import ORDERS
from topics.dlq_lines import SOURCE_HEADER, BadExportLine, ExportLine, decode_line
from topics.errors import BrewError
from topics.kafka import KafkaConnection, partitions_of
from topics.orders_gen import OrderGenerator
from topics.records import produce_waiting

Headers = list[tuple[str, bytes]]
Record = tuple[bytes | None, bytes | None] | tuple[bytes | None, bytes | None, Headers]  # key, value[, headers]


@dataclass
class FeedResult:
    sent: int = 0
    failed: int = 0
    first_error: str = ""


def generated_records(seed: int | None = None) -> Iterable[Record]:
    for order in OrderGenerator(seed):
        yield order["shop_id"].encode(), orjson.dumps(order)


def file_records(path: Path) -> Iterable[Record]:
    """One record per line, bytes untouched (malformed lines included, for DLQ tests).

    A line of ``brewstream dlq export`` (repaired or not) is produced as the record it
    holds: its key and value, and a ``dlq-source`` header naming the original. The whole
    file is checked first, so a line that cannot go back in stops it before anything is sent.
    """
    if path.is_file():  # a pipe can be read only once: its lines are checked as they come
        for _ in _lines(path, emit=False):
            pass
    yield from _lines(path, emit=True)


def _lines(path: Path, emit: bool) -> Iterator[Record]:
    with open(path, "rb") as fh:
        for n, line in enumerate(fh, start=1):
            value = line[:-1] if line.endswith(b"\n") else line
            try:
                exported = decode_line(value)
                if exported is not None:
                    _check_exported(exported)
            except BadExportLine as exc:
                raise BrewError(f"line {n} of {path} is a DLQ export line that cannot go back in: {exc}") from None
            if not emit:
                continue
            if exported is None:
                yield _key_of(value), value
            else:
                yield exported.key, exported.value, [(SOURCE_HEADER, exported.source.encode())]


def _check_exported(line: ExportLine) -> None:
    if line.truncated:
        raise BadExportLine("it holds only part of the record (cut to fit the DLQ, and the source no longer had "
                            "the original); repair it whole or delete the line")
    if not line.source_topic.endswith(ORDERS):
        raise BadExportLine(f"it comes from {line.source_topic}, and seed-orders feeds orders; use "
                            "`brewstream dlq replay` for it")


def _key_of(value: bytes) -> bytes | None:
    try:
        shop = orjson.loads(value).get("shop_id")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return shop.encode() if isinstance(shop, str) else None


def produce(
    conn: KafkaConnection,
    records: Iterable[Record],
    *,
    topic: str = ORDERS,
    count: int | None = None,
    interval_s: float = 1.0,
    per_tick: int = 12,
    stop: threading.Event | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> FeedResult:
    """Send ``per_tick`` records every ``interval_s`` (0: as fast as possible).

    Stops after ``count`` records, when ``records`` runs out, or when ``stop`` is set,
    and always waits for every delivery report before returning.
    """
    partitions_of(conn, topic)  # a missing topic is an error, not an auto-create
    producer = conn.producer({"linger.ms": 5, "enable.idempotence": True, "acks": "all"})
    result = FeedResult()
    stop = stop or threading.Event()

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        if err is None:
            result.sent += 1
        else:
            result.failed += 1
            result.first_error = result.first_error or err.str()

    queued = 0
    next_tick = time.monotonic()
    it = iter(records)
    while not stop.is_set() and (count is None or queued < count):
        batch = per_tick if interval_s > 0 else 10_000
        if count is not None:
            batch = min(batch, count - queued)
        exhausted = False
        for _ in range(batch):
            try:
                key, value, *headers = next(it)
            except StopIteration:
                exhausted = True
                break
            produce_waiting(producer, topic, key, value, headers=headers[0] if headers else None,
                            on_delivery=delivered)
            queued += 1
        producer.poll(0)
        if on_progress is not None:
            on_progress(queued)
        if exhausted:
            break
        if interval_s > 0:
            next_tick += interval_s
            stop.wait(max(0.0, next_tick - time.monotonic()))
    remaining = producer.flush(60)
    if remaining:
        raise BrewError(f"{remaining} records were not delivered to {topic} within 60s")
    return result



class PacedFeeder(threading.Thread):
    """``produce`` on a thread of its own, for drills and tests: ``per_tick`` records every
    ``interval_s`` until the records run out or ``stop``. ``finish`` proves every record it
    queued was delivered (an idempotent producer with acks=all: a produce the cluster
    refuses is retried, never lost or doubled), so an oracle summed over the records holds."""

    def __init__(self, conn: KafkaConnection, topic: str, records: Iterable[Record], interval_s: float = 0.1,
                 per_tick: int = 1, name: str = "feeder") -> None:
        super().__init__(name=name, daemon=True)
        self.conn, self.topic, self.interval_s, self.per_tick = conn, topic, interval_s, per_tick
        self.queued = 0
        self.halt = threading.Event()
        self.result: FeedResult | None = None
        self.error = ""
        self._records = records

    @classmethod
    def spread(cls, conn: KafkaConnection, topic: str, records: Sequence[Record], seconds: float,
               name: str = "feeder") -> PacedFeeder:
        """``records`` spread evenly over about ``seconds``, in ticks of 0.1 s."""
        ticks = max(1, int(seconds / 0.1))
        return cls(conn, topic, records, 0.1, max(1, -(-len(records) // ticks)), name)

    def _counted(self) -> Iterator[Record]:
        for record in self._records:
            self.queued += 1
            yield record

    def run(self) -> None:
        try:
            self.result = produce(self.conn, self._counted(), topic=self.topic, interval_s=self.interval_s,
                                  per_tick=self.per_tick, stop=self.halt)
        except Exception as exc:
            self.error = str(exc)

    def stop(self) -> None:
        self.halt.set()

    def finish(self, timeout: float = 120) -> FeedResult:
        """Stop feeding and wait; a ``BrewError`` unless every record queued was delivered."""
        self.halt.set()
        self.join(timeout)
        if self.error or self.result is None:
            raise BrewError(f"feeding {self.topic} failed: {self.error or 'the feeder did not finish'}")
        if self.result.failed or self.result.sent != self.queued:
            raise BrewError(f"{self.result.failed} of {self.queued} records were not delivered to {self.topic} "
                            f"({self.result.first_error})")
        return self.result
