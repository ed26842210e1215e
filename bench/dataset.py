"""The data every scenario runs on: seeded orders, bad records, and a synthetic changelog.

Orders come from the project's own generator (``OrderGenerator``), so the benchmark
sees the same shape of data as the daemon does in the demo and the drills; the oracle
is summed here while they are generated. The ingest backlog also holds bad records, one
in ``BAD_EVERY``, of the 24 kinds in ``BAD_KINDS`` in turn: every system must skip each
of them (brewstream sends them to its DLQ) and count the good orders exactly. A fed
stream can carry latency probes (``OrderStream.probe_every``): orders with one extra
item of a drink named after their index, whose first appearance in a system's output
says when that order became visible.
"""

from __future__ import annotations

import functools
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
BadRecord = tuple[bytes, bytes | None]


def orders(seed: int) -> Iterator[dict[str, Any]]:
    return OrderGenerator(seed, run_id=f"bench{seed}")


def _order(items: bytes, head: bytes = b'"order_id": "o-bad", "shop_id": "shop-01", ') -> bytes:
    return b"{" + head + b'"items": ' + items + b"}"


_LATTE = b'[{"drink": "latte", "quantity": 1}]'
# One bad record of each kind, each breaking one rule of the order format (DESIGN.md: order)
# and otherwise a good order of lattes, so a system that lets one through miscounts.
BAD_KINDS: tuple[tuple[str, bytes | None], ...] = (
    ("null value", None),
    ("empty value", b""),
    ("not JSON", b"latte please"),
    ("truncated JSON", b'{"order_id": "o-bad", "shop_id": "shop-01", "items": [{"drink": "latte", "quantity": 1}'),
    ("invalid UTF-8", b'{"order_id": "o-\xff\xfe", "shop_id": "shop-01", "items": ' + _LATTE + b"}"),
    ("a JSON array", _LATTE),
    ("order_id missing", _order(_LATTE, b'"shop_id": "shop-01", ')),
    ("order_id a number", _order(_LATTE, b'"order_id": 7, "shop_id": "shop-01", ')),
    ("shop_id missing", _order(_LATTE, b'"order_id": "o-bad", ')),
    ("shop_id null", _order(_LATTE, b'"order_id": "o-bad", "shop_id": null, ')),
    ("items missing", b'{"order_id": "o-bad", "shop_id": "shop-01"}'),
    ("items null", _order(b"null")),
    ("items an object", _order(b'{"drink": "latte", "quantity": 1}')),
    ("items empty", _order(b"[]")),
    ("an item not an object", _order(b'["latte"]')),
    ("drink empty", _order(b'[{"drink": "", "quantity": 1}]')),
    ("drink a number", _order(b'[{"drink": 5, "quantity": 1}]')),
    ("quantity missing", _order(b'[{"drink": "latte"}]')),
    ("quantity a string", _order(b'[{"drink": "latte", "quantity": "2"}]')),
    ("quantity a float", _order(b'[{"drink": "latte", "quantity": 2.0}]')),
    ("quantity a boolean", _order(b'[{"drink": "latte", "quantity": true}]')),
    ("quantity 0", _order(b'[{"drink": "latte", "quantity": 0}]')),
    ("quantity 2^31", _order(b'[{"drink": "latte", "quantity": 2147483648}]')),
    ("one bad item among good", _order(b'[{"drink": "latte", "quantity": 1}, {"drink": "mocha", "quantity": null}]')),
)
BAD_EVERY = 1000  # one record in this many is bad


def bad_record(n: int) -> BadRecord:
    """The ``n``-th bad record: the kinds in turn, spread over the shops (so the partitions)."""
    return f"shop-{n % 80 + 1:02d}".encode(), BAD_KINDS[n % len(BAD_KINDS)][1]


@dataclass(frozen=True)
class Backlog:
    """An input topic filled before anything reads it, and what counting it must give:
    ``orders`` records in all, ``bad`` of them bad, ``items`` items in the good ones."""

    topic: str
    orders: int
    items: int
    expected: dict[str, int]
    bad: int = 0

    @property
    def good(self) -> int:
        return self.orders - self.bad


def produce_backlog(conn: KafkaConnection, topic: str, count: int, seed: int, bad_every: int = BAD_EVERY) -> Backlog:
    """``count`` records: seeded orders, with every ``bad_every``-th one a bad record (0: none)."""
    expected: dict[str, int] = {}
    items = 0
    bad = 0

    def records() -> Iterator[BadRecord]:
        nonlocal items, bad
        good = iter(orders(seed))
        for i in range(count):
            if bad_every and i % bad_every == bad_every - 1:
                yield bad_record(bad)
                bad += 1
                continue
            order = next(good)
            for item in order["items"]:
                expected[item["drink"]] = expected.get(item["drink"], 0) + item["quantity"]
                items += 1
            yield order["shop_id"].encode(), orjson.dumps(order)

    # A bulk load on a broker nobody faults: plain idempotent produces, the input every
    # system of the comparison reads the same way.
    result = produce(conn, records(), topic=topic, count=count, interval_s=0, transactional=False)
    if result.sent != count:
        raise BenchError(f"only {result.sent} of {count} orders reached {topic}: {result.first_error}")
    return Backlog(topic, count, items, expected, bad)


PROBE_PREFIX = "probe-"


def probe_drink(i: int) -> str:
    return f"{PROBE_PREFIX}{i:09d}"


@dataclass(frozen=True)
class OrderStream:
    """Orders fed at a rate (latency, recovery), in the order they are fed. A feed that
    outlasts the stream starts it again from the top: the systems count records, not
    order ids, so the oracle simply counts the repeated orders again.

    With ``probe_every``, every such record (index 0 first) carries one more item, of a
    drink named after the index (``probe_drink``), quantity 1: its first appearance in a
    system's output says when the order became visible. Only a stream fed once from the
    start may carry probes (their names are unique per index, not per record)."""

    records: list[Record]
    probe_every: int = 0

    def record(self, i: int) -> Record:
        key, value = self.records[i % len(self.records)]
        if self.probe_every and i % self.probe_every == 0:
            # orjson writes an order as {..."items":[...]}: the probe goes last in the list.
            value = value[:-2] + b',{"drink":"' + probe_drink(i).encode() + b'","quantity":1}]}'
        return key, value

    def is_probe(self, i: int) -> bool:
        return bool(self.probe_every) and i % self.probe_every == 0

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
        if self.probe_every:
            totals.update({probe_drink(i): 1 for i in range(0, upto, self.probe_every)})
        return totals

    def with_probes(self, every: int) -> OrderStream:
        return OrderStream(self.records, every)

    @functools.cached_property
    def _cups_prefix(self) -> list[int]:
        out = [0]
        for _key, value in self.records:
            out.append(out[-1] + sum(item["quantity"] for item in orjson.loads(value)["items"]))
        return out

    def cups(self, upto: int) -> int:
        """Cups (quantities summed over every item) in the first ``upto`` fed records, probes aside."""
        rounds, rest = divmod(upto, len(self.records))
        prefix = self._cups_prefix
        return rounds * prefix[-1] + prefix[rest]

    @property
    def cups_per_order(self) -> float:
        return self._cups_prefix[-1] / len(self.records)


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
