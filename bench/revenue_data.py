"""The revenue join's data and its oracle (pure: no I/O).

A menu history (brew.menu.v1's shape: key the drink, value ``{"drink","price_cents",
"currency"}``, an empty value withdraws the drink, each version valid from its event time)
and orders with event times (brew.orders.v1's shape, key the shop), both seeded. The oracle
prices every item with the latest menu version whose time is <= the order's time, over the
whole history, whatever order the versions arrived in: what a join that waited for every
menu record would compute.

The history, over ``span_s`` of event time from ``t0``:

- every drink of ``topics.orders_gen.MENU`` priced a minute before the first order;
- ``changes`` price changes at random times, on random drinks; a ``late_fraction`` of
  them arrive late, after menu records up to ``late_max_ms`` younger (the runner keeps that
  within the join's grace);
- ``WITHDRAWN`` is withdrawn (empty value) from 40 % to 60 % of the span, then priced again;
- ``SEASONAL`` is priced only from half the span on; ``NEVER_PRICED`` never is;
- one menu record in ``NO_HEADER_EVERY`` has no event-time header: its Kafka timestamp
  carries the time, in whole milliseconds (never one of the ``SUB_MS`` edges).

Orders are spread evenly over the span, each moved by up to ``order_jitter_ms`` either way,
and produced in index order (so their event times are slightly out of order). A live feed
(``Dataset.arrivals``) interleaves both by arrival: an order at its nominal place on the
span, a menu record at its time plus its delay, so a late price change really comes after
orders it applies to. Every time is
a whole millisecond unless ``sub_ms_edges`` asks for the edge cases of ``SUB_MS``: an order
and a price change of that drink in the same millisecond, the change a little after the
order in nanoseconds (the oracle gives the order the old price; a clock in milliseconds
cannot tell which came first).
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

import orjson

from topics.orders_gen import MENU

MS = 1_000_000  # ns
WITHDRAWN = "affogato"
SEASONAL = "pumpkin spice latte"
NEVER_PRICED = "mystery blend"
SUB_MS = "edge: same millisecond"
CURRENCY = "EUR"
NO_HEADER_EVERY = 7
SHOPS = 50


@dataclass(frozen=True)
class MenuVersion:
    """One menu record: ``price_cents`` None withdraws the drink."""

    drink: str
    time_ns: int
    price_cents: int | None
    header: bool = True
    arrival_ns: int | None = None  # where it comes in a live feed, on the event-time axis (None: at its time)

    def value(self) -> bytes:
        if self.price_cents is None:
            return b""
        return orjson.dumps({"drink": self.drink, "price_cents": self.price_cents, "currency": CURRENCY})


@dataclass(frozen=True)
class Order:
    order_id: str
    shop_id: str
    time_ns: int
    items: tuple[tuple[str, int], ...]
    arrival_ns: int | None = None  # where it comes in a live feed, on the event-time axis (None: at its time)

    def value(self) -> bytes:
        return orjson.dumps({"order_id": self.order_id, "shop_id": self.shop_id,
                             "items": [{"drink": d, "quantity": q} for d, q in self.items]})


@dataclass(frozen=True)
class Plan:
    orders: int = 200_000
    seed: int = 7
    t0_ns: int = 1_780_000_000_000 * MS
    span_s: float = 3600.0
    changes: int = 400
    late_fraction: float = 0.1
    late_max_ms: int = 8_000
    order_jitter_ms: int = 2_000
    sub_ms_edges: int = 0


@dataclass(frozen=True)
class Dataset:
    """The menu records in the order they are produced, and the orders likewise."""

    plan: Plan
    menu: list[MenuVersion]
    orders: list[Order]

    @property
    def items(self) -> int:
        return sum(len(o.items) for o in self.orders)

    def arrivals(self) -> list[MenuVersion | Order]:
        """Menu records and orders merged as a live feed brings them: by arrival, the menu
        first on a tie (a price change announced with the first orders it applies to)."""
        keyed: list[tuple[int, int, int, MenuVersion | Order]] = []
        keyed += [(_arrival(v), 0, i, v) for i, v in enumerate(self.menu)]
        keyed += [(_arrival(o), 1, i, o) for i, o in enumerate(self.orders)]
        keyed.sort(key=lambda k: k[:3])
        return [k[3] for k in keyed]

    @property
    def max_time_ns(self) -> int:
        return max(max(o.time_ns for o in self.orders), max(v.time_ns for v in self.menu))


def generate(plan: Plan) -> Dataset:
    rng = random.Random(plan.seed)
    span_ns = int(plan.span_s * 1e9)
    t0 = plan.t0_ns
    drinks = [d for d, _ in MENU]
    prices = {d: 250 + 25 * rng.randrange(0, 12) for d in drinks}
    menu: list[MenuVersion] = [MenuVersion(d, t0 - 60_000 * MS, prices[d]) for d in drinks]
    timed: list[MenuVersion] = []
    for _ in range(plan.changes):
        drink = rng.choice(drinks)
        prices[drink] = max(50, prices[drink] + 5 * rng.randrange(-10, 11))
        timed.append(MenuVersion(drink, t0 + _ms(rng.randrange(0, span_ns)), prices[drink]))
    timed += [MenuVersion(WITHDRAWN, t0 + _ms(span_ns * 2 // 5), None),
              MenuVersion(WITHDRAWN, t0 + _ms(span_ns * 3 // 5), 400),
              MenuVersion(SEASONAL, t0 + _ms(span_ns // 2), 525)]
    orders = list(_orders(rng, plan, [*drinks, SEASONAL, NEVER_PRICED], span_ns))
    if plan.sub_ms_edges:
        edge_menu, edge_orders = _sub_ms_edges(rng, plan, span_ns)
        timed += edge_menu
        orders += edge_orders
    menu += _arrival_order(rng, plan, timed)
    # A record without the header carries its time in its Kafka timestamp, in milliseconds:
    # that is its time, for the oracle too. The same-millisecond edges keep theirs, or they
    # would be no edge.
    menu = [v if i % NO_HEADER_EVERY or v.drink == SUB_MS else
            MenuVersion(v.drink, _ms(v.time_ns), v.price_cents, False, v.arrival_ns) for i, v in enumerate(menu)]
    return Dataset(plan, menu, orders)


def _arrival(record: MenuVersion | Order) -> int:
    return record.time_ns if record.arrival_ns is None else record.arrival_ns


def _ms(ns: int) -> int:
    return ns - ns % MS


def _orders(rng: random.Random, plan: Plan, drinks: list[str], span_ns: int) -> Iterator[Order]:
    # Popular drinks sell most, the seasonal one some, the never-priced one rarely.
    weights = [w for _, w in MENU] + [20, 2]
    step = span_ns // plan.orders
    jitter = plan.order_jitter_ms * MS
    for i in range(plan.orders):
        t = plan.t0_ns + i * step + rng.randrange(-jitter, jitter + 1)
        n = rng.choice((1, 1, 1, 2, 2, 3))
        items = tuple((d, rng.choice((1, 1, 1, 2, 2, 3))) for d in rng.choices(drinks, weights=weights, k=n))
        yield Order(f"o-{plan.seed}-{i}", f"shop-{rng.randrange(1, SHOPS + 1):02d}", max(plan.t0_ns, _ms(t)), items,
                    arrival_ns=plan.t0_ns + i * step)


def _sub_ms_edges(rng: random.Random, plan: Plan, span_ns: int) -> tuple[list[MenuVersion], list[Order]]:
    menu = [MenuVersion(SUB_MS, plan.t0_ns - 60_000 * MS, 300)]
    orders = []
    for k in range(plan.sub_ms_edges):
        at = plan.t0_ns + _ms(span_ns * (k + 1) // (plan.sub_ms_edges + 1))
        orders.append(Order(f"o-edge-{k}", "shop-edge", at + 100_000, ((SUB_MS, 1),)))
        menu.append(MenuVersion(SUB_MS, at + 600_000, 300 + 10 * (k + 1)))
    return menu, orders


def _arrival_order(rng: random.Random, plan: Plan, timed: list[MenuVersion]) -> list[MenuVersion]:
    """In event-time order, except that the late ones arrive after records up to
    ``late_max_ms`` younger than them."""
    arrival = []
    for v in timed:
        delay = rng.randrange(1, plan.late_max_ms + 1) * MS if rng.random() < plan.late_fraction else 0
        arrival.append((v.time_ns + delay, v.time_ns, v))
    arrival.sort(key=lambda a: (a[0], a[1]))
    return [MenuVersion(v.drink, v.time_ns, v.price_cents, v.header, at) for at, _, v in arrival]


@dataclass
class Oracle:
    """Revenue as the as-of rule gives it, under both systems' rules for an item without a
    price. The item rule (Kafka Streams' join works item by item): every priced item counts,
    each unpriced one goes to the DLQ on its own (``by_drink``, ``by_shop``, ``unpriced``).
    The whole-order rule (brewstream's): an order any of whose items has no price goes to
    the DLQ whole, and none of its items counts (``whole_order_*``, ``refused_orders``).
    They differ by the priced items of the ``partly_priced_orders``."""

    by_drink: dict[str, int] = field(default_factory=dict)
    by_shop: dict[str, int] = field(default_factory=dict)
    unpriced: dict[str, int] = field(default_factory=dict)
    unpriced_items: int = 0
    priced_items: int = 0
    whole_order_by_drink: dict[str, int] = field(default_factory=dict)
    whole_order_by_shop: dict[str, int] = field(default_factory=dict)
    refused_orders: int = 0  # orders with an item without a price: the whole-order DLQ
    partly_priced_orders: int = 0


class AsOf:
    """The menu as a versioned table: every version per drink, looked up as of a time.
    Two versions of a drink with the same time: the one produced later wins, as a later
    put at the same timestamp replaces the earlier one in a versioned store."""

    def __init__(self, menu: list[MenuVersion], unit_ns: int = 1) -> None:
        self.unit_ns = unit_ns
        by_drink: dict[str, dict[int, int | None]] = {}
        for v in menu:
            by_drink.setdefault(v.drink, {})[v.time_ns // unit_ns] = v.price_cents
        self._times = {d: sorted(vs) for d, vs in by_drink.items()}
        self._prices = {d: [vs[t] for t in self._times[d]] for d, vs in by_drink.items()}

    def price(self, drink: str, time_ns: int) -> int | None:
        times = self._times.get(drink)
        if not times:
            return None
        i = bisect.bisect_right(times, time_ns // self.unit_ns)
        return self._prices[drink][i - 1] if i else None


def oracle(data: Dataset, unit_ns: int = 1) -> Oracle:
    menu = AsOf(data.menu, unit_ns)
    out = Oracle()
    for order in data.orders:
        priced = [(d, q, menu.price(d, order.time_ns)) for d, q in order.items]
        whole = all(p is not None for _, _, p in priced)
        if not whole and any(p is not None for _, _, p in priced):
            out.partly_priced_orders += 1
        for drink, quantity, price in priced:
            if price is None:
                out.unpriced[drink] = out.unpriced.get(drink, 0) + 1
                out.unpriced_items += 1
                continue
            out.priced_items += 1
            cents = price * quantity
            out.by_drink[drink] = out.by_drink.get(drink, 0) + cents
            out.by_shop[order.shop_id] = out.by_shop.get(order.shop_id, 0) + cents
            if whole:
                out.whole_order_by_drink[drink] = out.whole_order_by_drink.get(drink, 0) + cents
                out.whole_order_by_shop[order.shop_id] = out.whole_order_by_shop.get(order.shop_id, 0) + cents
        if not whole:
            out.refused_orders += 1
    return out


def murmur2_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner (Java's, and librdkafka's ``murmur2``)
    gives a key: where a Kafka Streams repartition topic puts it."""
    m, r = 0x5BD1E995, 24
    length = len(key)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = key[i] | key[i + 1] << 8 | key[i + 2] << 16 | key[i + 3] << 24
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail = length - length % 4
    rest = length % 4
    if rest == 3:
        h ^= key[tail + 2] << 16
    if rest >= 2:
        h ^= key[tail + 1] << 8
    if rest >= 1:
        h ^= key[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return (h & 0x7FFFFFFF) % partitions


def flush_drinks(partitions: int) -> list[str]:
    """One drink name per partition of the items' repartition topic, none of them on the
    menu: an order of these, later than everything by more than the grace, moves the join's
    clock on every task."""
    names: dict[int, str] = {}
    n = 0
    while len(names) < partitions:
        name = f"~flush-{n}"
        names.setdefault(murmur2_partition(name.encode(), partitions), name)
        n += 1
    return [names[p] for p in range(partitions)]
