"""Produce orders to the input topic: generated at a rate, or a file's lines verbatim."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson
from confluent_kafka import KafkaError, KafkaException, Message, Producer

from topics.catalog import ORDERS
from topics.dlq_lines import SOURCE_HEADER, BadExportLine, ExportLine, decode_line
from topics.errors import BrewError
from topics.event_time import EVENT_TIME, encode_event_time
from topics.kafka import KafkaConnection, failed, partitions_of
from topics.orders_gen import OrderGenerator
from topics.records import call_until, close_transactional, is_fatal, produce_waiting

Headers = list[tuple[str, bytes]]
Record = tuple[bytes | None, bytes | None] | tuple[bytes | None, bytes | None, Headers]  # key, value[, headers]


@dataclass
class FeedResult:
    sent: int = 0
    failed: int = 0
    first_error: str = ""


def generated_records(seed: int | None = None, event_times: Iterable[int] | None = None) -> Iterable[Record]:
    """Random orders keyed by shop; with ``event_times``, each stamped with the next of them
    in an ``event-time`` header (without, no header: the order's time is its Kafka timestamp)."""
    orders = OrderGenerator(seed)
    if event_times is None:
        for order in orders:
            yield order["shop_id"].encode(), orjson.dumps(order)
        return
    for ns, order in zip(event_times, orders, strict=False):  # the orders never run out
        yield order["shop_id"].encode(), orjson.dumps(order), [(EVENT_TIME, encode_event_time(ns))]


def order_event_times(first_ns: int, step_ns: int | None = None,
                      clock_ns: Callable[[], int] = time.monotonic_ns) -> Iterator[int]:
    """Event times from ``first_ns`` on, each above the one before: ``step_ns`` apart, or
    without a step, ``first_ns`` plus the time since the first was taken (orders placed that
    long ago, at the pace they are sent; a monotonic clock, so a clock set back changes nothing)."""
    if step_ns is not None and step_ns <= 0:
        raise ValueError("the event-time step must be above 0")
    if step_ns is not None:
        return itertools.count(first_ns, step_ns)
    return _paced_times(first_ns, clock_ns)


def _paced_times(first_ns: int, clock_ns: Callable[[], int]) -> Iterator[int]:
    began = clock_ns()
    last = first_ns - 1
    while True:
        last = max(last + 1, first_ns + clock_ns() - began)  # +1: a coarse clock still rises
        yield last


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


# An idempotent producer alone may still write a record twice: when a partition's leader
# changes under it, librdkafka may bump its epoch and send again what the old leader had
# written already (a rolling restart did this once in the broker drill). A transaction
# makes a send all-or-nothing for read_committed readers, which is how the daemon reads
# its input: so every tick is one transaction, and a tick Kafka aborts is sent again whole.
FEED_TXN_TIMEOUT_S = 60.0
# How long one tick may wait for the cluster to heal (a lost quorum, a leader election)
# before the feed gives up with an error.
FEED_SEND_WAIT_S = 300.0


def feed_transactional_id(topic: str) -> str:
    """One per feed: two feeds of one topic never fence each other."""
    return f"brewstream:feed:{topic}:{uuid.uuid4().hex[:12]}"


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
    transactional: bool = True,
) -> FeedResult:
    """Send ``per_tick`` records every ``interval_s`` (0: as fast as possible).

    Stops after ``count`` records, when ``records`` runs out, or when ``stop`` is set. Each
    tick is one transaction (why: above ``FEED_TXN_TIMEOUT_S``), so every record is in the
    topic once when this returns; ``transactional=False`` sends with an idempotent producer only
    and waits for every delivery report (a bulk load into a topic nobody faults).
    """
    partitions_of(conn, topic)  # a missing topic is an error, not an auto-create
    txn_id = feed_transactional_id(topic) if transactional else None
    settings: dict[str, object] = {"linger.ms": 5, "enable.idempotence": True, "acks": "all"}
    if txn_id is not None:
        settings |= {"transactional.id": txn_id, "transaction.timeout.ms": int(FEED_TXN_TIMEOUT_S * 1000)}
    sender = TickSender(conn, conn.producer(settings), topic, txn_id)
    stop = stop or threading.Event()
    queued = 0
    next_tick = time.monotonic()
    it = iter(records)
    try:
        while not stop.is_set() and (count is None or queued < count):
            size = per_tick if interval_s > 0 else 10_000
            if count is not None:
                size = min(size, count - queued)
            tick = list(itertools.islice(it, size))
            sender.send(tick)
            queued += len(tick)
            if on_progress is not None:
                on_progress(queued)
            if len(tick) < size:
                break  # the records ran out
            if interval_s > 0:
                next_tick += interval_s
                stop.wait(max(0.0, next_tick - time.monotonic()))
        return sender.finish()
    finally:
        sender.close()


class TickSender:
    """One tick of records at a time: in a transaction of its own (``txn_id``), sent again
    whole when Kafka aborts it; or, without one, idempotent produces flushed at the end."""

    def __init__(self, conn: KafkaConnection, producer: Producer, topic: str, txn_id: str | None) -> None:
        self.topic = topic
        self.result = FeedResult()
        self._txn_id = txn_id
        self._conn, self._producer = conn, producer
        if self._txn_id is not None:
            self._until(lambda left: self._producer.init_transactions(left), time.monotonic() + FEED_SEND_WAIT_S,
                        f"cannot start transactions as {self._txn_id}")

    def send(self, tick: list[Record]) -> None:
        if not tick:
            return
        if self._txn_id is None:
            for key, value, *headers in tick:
                produce_waiting(self._producer, self.topic, key, value, headers=headers[0] if headers else None,
                                on_delivery=self._delivered)
            self._producer.poll(0)
            return
        deadline = time.monotonic() + FEED_SEND_WAIT_S
        while True:
            try:
                self._producer.begin_transaction()
                for key, value, *headers in tick:
                    produce_waiting(self._producer, self.topic, key, value, headers=headers[0] if headers else None)
            except KafkaException as exc:
                if is_fatal(exc.args[0]):
                    raise BrewError(f"{len(tick)} records could not be sent to {self.topic}: "
                                    f"{exc.args[0].str()}") from None
                self._abort(deadline)
            else:
                if self._commit(deadline):
                    self.result.sent += len(tick)
                    return
            # Aborted: none of the tick is visible to a read_committed reader; send it again.
            if time.monotonic() >= deadline:
                raise BrewError(f"{len(tick)} records could not be committed to {self.topic} within "
                                f"{FEED_SEND_WAIT_S:.0f}s; is the cluster healthy?")

    def finish(self) -> FeedResult:
        if self._txn_id is None:
            remaining = self._producer.flush(60)
            if remaining:
                raise BrewError(f"{remaining} records were not delivered to {self.topic} within 60s")
        return self.result

    def close(self) -> None:
        close_transactional(self._producer, 0)

    def _delivered(self, err: KafkaError | None, _msg: Message) -> None:
        if err is None:
            self.result.sent += 1
        else:
            self.result.failed += 1
            self.result.first_error = self.result.first_error or err.str()

    def _commit(self, deadline: float) -> bool:
        """True once committed; False when Kafka aborted the transaction instead."""
        try:
            self._until(lambda left: self._producer.commit_transaction(left), deadline,
                        f"{self.topic}: a transaction of the feed could not be committed")
            return True
        except _Abortable:
            self._abort(deadline)
            return False

    def _abort(self, deadline: float) -> None:
        self._until(lambda left: self._producer.abort_transaction(left), deadline,
                    f"{self.topic}: a transaction of the feed could not be aborted", abortable_ok=False)

    def _until(self, call: Callable[[float], None], deadline: float, what: str, abortable_ok: bool = True) -> None:
        """``call_until``; ``_Abortable`` when the transaction must be aborted, a
        ``BrewError`` for the rest."""
        try:
            call_until(call, deadline)
        except KafkaException as exc:
            err = exc.args[0]
            if abortable_ok and err.txn_requires_abort() and not is_fatal(err):
                raise _Abortable(err.str()) from None
            raise failed(self._conn, what, exc, self._producer) from None


class _Abortable(Exception):
    """Kafka aborted (or must abort) the transaction in flight."""


class PacedFeeder(threading.Thread):
    """``produce`` on a thread of its own, for drills and tests: ``per_tick`` records every
    ``interval_s`` until the records run out or ``stop``. ``finish`` proves every record it
    queued was committed, each tick in one transaction (a tick the cluster aborts is sent
    again whole: never lost or doubled), so an oracle summed over the records holds."""

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
        """Stop feeding and wait; a ``BrewError`` unless every record queued was committed."""
        self.halt.set()
        self.join(timeout)
        if self.error or self.result is None:
            raise BrewError(f"feeding {self.topic} failed: {self.error or 'the feeder did not finish'}")
        if self.result.failed or self.result.sent != self.queued:
            raise BrewError(f"{self.result.failed} of {self.queued} records were not committed to {self.topic} "
                            f"({self.result.first_error})")
        return self.result
