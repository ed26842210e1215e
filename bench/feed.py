"""A steady feed of orders at a fixed rate that remembers when each one was produced.

Records go out in ticks of 10 ms. Each record's produce time (CLOCK_MONOTONIC, taken
just before ``produce``) and the partition and offset from its delivery report are
kept by index, so every order can later be matched with the moment the store
committed it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from confluent_kafka import KafkaError, Message

from bench.dataset import OrderStream
from topics.kafka import KafkaConnection
from topics.records import DeliveryCallback, produce_waiting

TICK_S = 0.01



class _FeedThread(threading.Thread):
    """A producing thread: ``_feed`` until ``halt``; an exception ends it and is kept."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.sent = 0
        self.failed = 0
        self.halt = threading.Event()
        self.error = ""

    def run(self) -> None:
        try:
            self._feed()
        except Exception as exc:
            self.error = str(exc)

    def _feed(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self.halt.set()
        self.join()


class Source(Protocol):
    """What a paced feed produces: record ``i`` (key, value)."""

    def record(self, i: int) -> tuple[bytes, bytes]: ...


class PacedFeed(_FeedThread):
    def __init__(self, conn: KafkaConnection, topic: str, stream: Source, rate: int, start_index: int = 0,
                 stop_index: int | None = None,
                 headers: Callable[[int], list[tuple[str, bytes]]] | None = None) -> None:
        """Feed records ``start_index`` up to ``stop_index`` (default: until stopped);
        ``headers``: the headers of record ``i``, if the records have any."""
        super().__init__("paced-feed")
        self.topic = topic
        self.stream = stream
        self.headers = headers
        self.rate = rate
        self.start_index = start_index
        self.stop_index = stop_index
        # Idempotent produces, each visible as soon as written: a transaction per tick (as
        # topics/feed.py sends) would add its commit to every latency measured.
        self._producer = conn.producer({"linger.ms": 5, "enable.idempotence": True, "acks": "all"})
        self.produced_at: dict[int, float] = {}
        self.placed: dict[int, tuple[int, int]] = {}
        # self.sent: records handed to the producer, in order from start_index

    def _feed(self) -> None:
        per_tick = max(1, round(self.rate * TICK_S))
        next_tick = time.monotonic()
        i = self.start_index
        while (self.stop_index is None or i < self.stop_index) and not self.halt.is_set():
            for _ in range(per_tick if self.stop_index is None else min(per_tick, self.stop_index - i)):
                key, value = self.stream.record(i)
                headers = self.headers(i) if self.headers is not None else None
                self.produced_at[i] = time.monotonic()
                produce_waiting(self._producer, self.topic, key, value, headers=headers,
                                on_delivery=self._delivered(i))
                i += 1
                self.sent += 1
            self._producer.poll(0)
            next_tick += per_tick / self.rate
            delay = next_tick - time.monotonic()
            if delay > 0:
                self.halt.wait(delay)
        self._producer.flush(60)

    def _delivered(self, i: int) -> DeliveryCallback:
        def done(err: KafkaError | None, msg: Message) -> None:
            if err is None:
                self.placed[i] = (msg.partition() or 0, msg.offset() or 0)
            else:
                self.failed += 1
        return done

    @property
    def last_index(self) -> int:
        return self.start_index + self.sent


class SteppedFeed(_FeedThread):
    """Orders at a rate that can be raised while it runs, remembering only how many were
    sent: the sustained-rate scenario produces millions, and it checks delivery at the
    end by comparing the store's order count with ``sent``; the producer reports failed
    deliveries only (``delivery.report.only.error``), so a good record costs no callback.
    A tick's records go to librdkafka in one ``produce_batch`` call, about a fifth less
    CPU than one ``produce`` call each: the feed shares the machine with the daemon it
    measures."""

    def __init__(self, conn: KafkaConnection, topic: str, stream: OrderStream) -> None:
        super().__init__("stepped-feed")
        self.topic = topic
        self.stream = stream
        self.rate = 0
        self._producer = conn.producer({"linger.ms": 5, "batch.size": 1_000_000, "enable.idempotence": True,
                                        "acks": "all", "delivery.report.only.error": True,
                                        "on_delivery": self._delivered})

    def _feed(self) -> None:
        topic = self.topic
        # Built once: produce_batch takes dicts. It marks a record it could not queue (the
        # local queue was full) with "_error" and goes on; those are produced again, one
        # by one, waiting for room.
        messages = [{"key": key, "value": value} for key, value in self.stream.records]
        next_tick = time.monotonic()
        owed = 0.0  # records due but not yet sent: a rate that is not a multiple of the tick
        while not self.halt.is_set():
            owed += self.rate * TICK_S
            due = int(owed)
            owed -= due
            chunk = _cyclic_slice(messages, self.sent, due)
            if chunk and self._producer.produce_batch(topic, chunk, on_delivery=self._delivered) < len(chunk):
                for message in chunk:
                    if message.pop("_error", None) is not None:
                        produce_waiting(self._producer, topic, message["key"], message["value"])
            self.sent += due
            self._producer.poll(0)
            next_tick += TICK_S
            delay = next_tick - time.monotonic()
            if delay > 0:
                self.halt.wait(delay)
            elif delay < -1.0:  # a second behind: the feed itself is the limit; do not burst
                next_tick = time.monotonic()
        self.failed += self._producer.flush(60)  # records still undelivered after a minute

    def _delivered(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self.failed += 1


def _cyclic_slice(items: list[dict[str, bytes]], start: int, count: int) -> list[dict[str, bytes]]:
    """``count`` items from ``start``, going round ``items`` as often as needed."""
    n = len(items)
    out: list[dict[str, bytes]] = []
    while count > 0:
        i = start % n
        take = min(count, n - i)
        out += items[i:i + take]
        start, count = start + take, count - take
    return out
