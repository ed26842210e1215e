"""A menu and orders for the revenue join, built so that its result does not depend on how
the daemon batches them, and the oracle that prices them.

Every record has an arrival time: orders arrive at their event time plus up to a minute,
menu records at theirs plus less than the grace. They are produced in arrival order, and
each menu record is flushed before anything after it is sent: whatever the daemon has read
of the orders, it has read every menu record sent before them. So a menu record is never
later than the grace when the join reads it, and the join must price every order with the
whole history: the latest version at or before the order's time, over every menu record
(the later of two at one time). The oracle does exactly that, with nothing but loops.

Orders of a drink never on the menu, or of a drink while it is withdrawn, have no price.
Orders stamped far in the past, sent only once every other order is applied (the latest
order time read is then past them plus the retention), are too late.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Producer

from topics.event_time import EVENT_TIME, encode_event_time
from topics.kafka import KafkaConnection
from topics.menu_gen import menu_record

S = 10**9
DRINKS = ("latte", "cappuccino", "mocha", "chai latte", "flat white")
UNLISTED = "unicorn frappe"
CLOCK = "zz-closing-bell"  # a drink only the closing menu record names: it moves the join's time


@dataclass(frozen=True)
class MenuRow:
    drink: str
    t: int
    price: int | None


@dataclass(frozen=True)
class OrderRow:
    order_id: str
    shop: str
    t: int
    items: tuple[tuple[str, int], ...]

    def value(self) -> bytes:
        return json.dumps({"order_id": self.order_id, "shop_id": self.shop,
                           "items": [{"drink": d, "quantity": q} for d, q in self.items]}).encode()


@dataclass
class Scenario:
    sequence: list[MenuRow | OrderRow] = field(default_factory=list)  # in arrival order
    bad_menu: list[tuple[bytes | None, bytes, int]] = field(default_factory=list)  # key, value, event time
    end_t: int = 0  # the closing menu record's time: every order is released at it

    @property
    def menu(self) -> list[MenuRow]:
        return [r for r in self.sequence if isinstance(r, MenuRow)]

    @property
    def orders(self) -> list[OrderRow]:
        return [r for r in self.sequence if isinstance(r, OrderRow)]


def build(seed: int, n_orders: int, start_ns: int, grace_ns: int, span_s: int = 600) -> Scenario:
    rng = random.Random(seed)
    timed: list[tuple[int, int, MenuRow | OrderRow]] = []
    for i, d in enumerate(DRINKS):
        timed.append((start_ns - 60 * S, i, MenuRow(d, start_ns - 60 * S, rng.randrange(150, 650))))
    # Price changes, some arriving late (less than the grace), one drink withdrawn for a while.
    for i in range(40):
        t = start_ns + rng.randrange(span_s) * S
        late = rng.randrange(grace_ns // 2) if rng.random() < 0.4 else 0
        timed.append((t + late, 100 + i, MenuRow(rng.choice(DRINKS[:4]), t, rng.randrange(150, 650))))
    timed.append((start_ns + span_s // 3 * S, 200, MenuRow("flat white", start_ns + span_s // 3 * S, None)))
    timed.append((start_ns + span_s // 2 * S, 201, MenuRow("flat white", start_ns + span_s // 2 * S, 515)))
    for i in range(n_orders):
        t = start_ns + rng.randrange(span_s * 1000) * 10**6
        drinks = rng.sample(DRINKS, rng.choice((1, 1, 2, 3)))
        if rng.random() < 0.02:
            drinks.append(UNLISTED)
        items = tuple((d, rng.randrange(1, 4)) for d in drinks)
        timed.append((t + rng.randrange(60) * S, 1000 + i, OrderRow(f"o-{seed}-{i}", f"shop-{rng.randrange(12):02d}",
                                                                   t, items)))
    timed.sort(key=lambda x: (x[0], x[1]))
    s = Scenario([row for _, _, row in timed])
    s.end_t = max(r.t for r in s.orders) + 2 * grace_ns + 120 * S
    now = start_ns + span_s * S
    s.bad_menu = [(b"latte", json.dumps({"drink": "latte", "price_cents": 0, "currency": "EUR"}).encode(), now),
                  (b"latte", json.dumps({"drink": "latte", "price_cents": 4.2, "currency": "EUR"}).encode(), now),
                  (b"mocha", json.dumps({"drink": "mocha", "price_cents": 300, "currency": "USD"}).encode(), now),
                  (b"", b"{}", now),  # a compacted topic refuses a null key; an empty one it takes
                  # A clock a year ahead: refused, and it never moves the join's time.
                  (b"chai latte", json.dumps({"drink": "chai latte", "price_cents": 1, "currency": "EUR"}).encode(),
                   now + 365 * 86_400 * S)]
    return s


def too_late_orders(seed: int, n: int, before_ns: int) -> list[OrderRow]:
    rng = random.Random(seed)
    return [OrderRow(f"late-{seed}-{i}", "shop-00", before_ns - rng.randrange(1, 3600) * S,
                     (("latte", 1),)) for i in range(n)]


@dataclass
class Expected:
    revenue: dict[str, int] = field(default_factory=dict)
    by_shop: dict[str, int] = field(default_factory=dict)
    no_price: set[str] = field(default_factory=set)  # order ids


def oracle(menu: list[MenuRow], orders: list[OrderRow]) -> Expected:
    out = Expected()
    for o in orders:
        prices: dict[str, int | None] = {}
        for d, _ in o.items:
            best: MenuRow | None = None
            for m in menu:
                if m.drink == d and m.t <= o.t and (best is None or m.t >= best.t):
                    best = m
            prices[d] = None if best is None else best.price
        if any(p is None for p in prices.values()):
            out.no_price.add(o.order_id)
            continue
        for d, q in o.items:
            cents = prices[d] * q  # type: ignore[operator]
            out.revenue[d] = out.revenue.get(d, 0) + cents
            out.by_shop[o.shop] = out.by_shop.get(o.shop, 0) + cents
    return out


class Sender:
    """Produces rows in order; each menu record is delivered before anything after it is sent."""

    def __init__(self, conn: KafkaConnection, orders_topic: str, menu_topic: str) -> None:
        self.orders_topic, self.menu_topic = orders_topic, menu_topic
        self.producer = Producer({"bootstrap.servers": conn.bootstrap, "linger.ms": 5, "enable.idempotence": True})
        self.errors: list[str] = []

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))

    def send(self, rows: list[MenuRow | OrderRow]) -> None:
        for row in rows:
            if isinstance(row, MenuRow):
                self.menu(*menu_record(row.drink, row.price, row.t)[:2], row.t)
            else:
                self.producer.produce(self.orders_topic, key=row.shop.encode(), value=row.value(),
                                      headers=[(EVENT_TIME, encode_event_time(row.t))], on_delivery=self._delivered)
                self.producer.poll(0)
        assert self.producer.flush(60) == 0 and not self.errors, self.errors

    def menu(self, key: bytes | None, value: bytes, t: int) -> None:
        assert self.producer.flush(60) == 0  # what was sent before it lands before it
        self.producer.produce(self.menu_topic, key=key, value=value, headers=[(EVENT_TIME, encode_event_time(t))],
                              on_delivery=self._delivered)
        assert self.producer.flush(60) == 0 and not self.errors, self.errors


def order_id(value: bytes | None) -> str:
    doc: dict[str, Any] = json.loads(value or b"{}")
    return str(doc.get("order_id"))
