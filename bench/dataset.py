"""The data every scenario runs on: seeded orders, and a synthetic changelog.

Orders come from the project's own generator (``OrderGenerator``), so the benchmark
sees the same shape of data as the daemon does in the demo and the drills; the oracle
is summed here while they are generated.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

import orjson

from bench.errors import BenchError
from restorer.codec import encode_u64
from topics.feed import produce
from topics.kafka import KafkaConnection
from topics.orders_gen import OrderGenerator
from topics.records import produce_waiting

Record = tuple[bytes, bytes]


def orders(seed: int) -> Iterator[dict[str, Any]]:
    return OrderGenerator(seed, run_id=f"bench{seed}")


@dataclass(frozen=True)
class Backlog:
    """An input topic filled before anything reads it, and what counting it must give."""

    topic: str
    orders: int
    items: int
    expected: dict[str, int]


def produce_backlog(conn: KafkaConnection, topic: str, count: int, seed: int) -> Backlog:
    expected: dict[str, int] = {}
    items = 0

    def records() -> Iterator[Record]:
        nonlocal items
        for order in islice(orders(seed), count):
            for item in order["items"]:
                expected[item["drink"]] = expected.get(item["drink"], 0) + item["quantity"]
                items += 1
            yield order["shop_id"].encode(), orjson.dumps(order)

    result = produce(conn, records(), topic=topic, count=count, interval_s=0)
    if result.sent != count:
        raise BenchError(f"only {result.sent} of {count} orders reached {topic}: {result.first_error}")
    return Backlog(topic, count, items, expected)


@dataclass(frozen=True)
class OrderStream:
    """Orders fed at a rate (latency, recovery), in the order they are fed. A feed that
    outlasts the stream starts it again from the top: the daemon counts records, not
    order ids, so the oracle simply counts the repeated orders again."""

    records: list[Record]

    def record(self, i: int) -> Record:
        return self.records[i % len(self.records)]

    def oracle(self, upto: int) -> dict[str, int]:
        """What counting the first ``upto`` fed records must give (parsed again: the
        stream is kept as bytes only, to stay small)."""
        rounds, rest = divmod(upto, len(self.records))
        totals: dict[str, int] = {}
        for i, (_key, value) in enumerate(self.records):
            times = rounds + (1 if i < rest else 0)
            if not times:
                break
            for item in orjson.loads(value)["items"]:
                totals[item["drink"]] = totals.get(item["drink"], 0) + item["quantity"] * times
        return totals


def order_stream(seed: int, count: int) -> OrderStream:
    return OrderStream([(o["shop_id"].encode(), orjson.dumps(o)) for o in islice(orders(seed), count)])


def changelog_key(k: int) -> bytes:
    return f"drink-{k:04d}".encode()


def produce_changelog(conn: KafkaConnection, topic: str, records: int, keys: int, partitions: int) -> dict[str, int]:
    """``records`` brewstream changelog records over ``keys`` drink keys, round-robin, each
    value the round it was written in (8-byte big-endian). Plain idempotent produces, no
    transaction. Returns the last value per key: what a restore must end with."""
    producer = conn.producer({"linger.ms": 20, "batch.size": 1_000_000, "enable.idempotence": True, "acks": "all"})
    latest: dict[str, int] = {}
    for i in range(records):
        k, rnd = i % keys, i // keys
        # Every write of a key goes to one partition, so "last value" is well defined.
        produce_waiting(producer, topic, changelog_key(k), encode_u64(rnd), partition=k % partitions)
        latest[changelog_key(k).decode()] = rnd
        if i % 50_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise BenchError(f"the changelog records were not all delivered to {topic}")
    return latest
