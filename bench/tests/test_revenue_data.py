"""The revenue join's data and its as-of oracle (``bench.revenue_data``), and the partition
Kafka Streams gives a drink (the flush order must reach every one)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.revenue_data import (
    MS,
    NEVER_PRICED,
    SEASONAL,
    SUB_MS,
    WITHDRAWN,
    AsOf,
    MenuVersion,
    Order,
    Plan,
    flush_drinks,
    generate,
    murmur2_partition,
    oracle,
)

SMALL = Plan(orders=2_000, span_s=600, changes=60)

versions = st.lists(st.tuples(st.integers(0, 50), st.one_of(st.none(), st.integers(0, 1000))), max_size=30)


@given(versions, st.integers(-5, 60))
def test_as_of_is_the_latest_version_at_or_before_the_time(history: list[tuple[int, int | None]], t: int) -> None:
    """Checked against a plain scan: the last produced version with the greatest time <= t;
    none before the first version."""
    menu = [MenuVersion("latte", time, price) for time, price in history]
    at_or_before = [(time, i) for i, (time, _price) in enumerate(history) if time <= t]
    want = history[max(at_or_before)[1]][1] if at_or_before else None
    assert AsOf(menu).price("latte", t) == want


@given(versions, st.integers(0, 50))
def test_the_arrival_order_of_different_times_does_not_matter(history: list[tuple[int, int | None]], t: int) -> None:
    distinct = list({time: price for time, price in history}.items())
    menu = [MenuVersion("latte", time, price) for time, price in distinct]
    assert AsOf(menu).price("latte", t) == AsOf(list(reversed(menu))).price("latte", t)


def test_in_milliseconds_a_later_version_of_the_same_millisecond_counts() -> None:
    menu = [MenuVersion("latte", 0, 300), MenuVersion("latte", 5 * MS + 600_000, 310)]
    order_at = 5 * MS + 100_000
    assert AsOf(menu).price("latte", order_at) == 300
    assert AsOf(menu, MS).price("latte", order_at) == 310


def test_the_oracle_prices_items_and_counts_the_unpriced() -> None:
    menu = [MenuVersion("latte", 10, 300), MenuVersion("latte", 20, None), MenuVersion("mocha", 0, 400)]
    orders = [Order("o1", "s1", 15, (("latte", 2), ("mocha", 1))),
              Order("o2", "s2", 25, (("latte", 1), ("mocha", 3))),
              Order("o3", "s1", 5, (("mocha", 1),))]
    data = generate(replace(SMALL, orders=100))
    got = oracle(replace(data, menu=menu, orders=orders))
    assert got.by_drink == {"latte": 600, "mocha": 400 + 1200 + 400}
    assert got.by_shop == {"s1": 600 + 400 + 400, "s2": 1200}
    assert got.unpriced == {"latte": 1} and got.unpriced_items == 1 and got.priced_items == 4
    # o2 has an unpriced latte: a whole-order DLQ keeps its mocha out too.
    assert got.whole_order_by_drink == {"latte": 600, "mocha": 800}
    assert got.whole_order_by_shop == {"s1": 600 + 400 + 400}
    assert got.partly_priced_orders == 1 and got.refused_orders == 1


@given(st.integers(0, 2**32 - 1))
def test_the_two_rules_differ_by_the_priced_items_of_the_refused_orders(seed: int) -> None:
    """Per drink and per shop, the item rule's sums are the whole-order rule's plus what the
    refused orders' priced items add; both rules count every refused order's unpriced items."""
    data = generate(replace(SMALL, orders=300, seed=seed))
    got = oracle(data)
    menu = AsOf(data.menu)
    extra_drink: dict[str, int] = {}
    extra_shop: dict[str, int] = {}
    refused = 0
    for order in data.orders:
        prices = [(d, q, menu.price(d, order.time_ns)) for d, q in order.items]
        if all(p is not None for _, _, p in prices):
            continue
        refused += 1
        for d, q, p in prices:
            if p is not None:
                extra_drink[d] = extra_drink.get(d, 0) + p * q
                extra_shop[order.shop_id] = extra_shop.get(order.shop_id, 0) + p * q
    assert got.refused_orders == refused
    assert all(got.by_drink[d] == got.whole_order_by_drink.get(d, 0) + extra_drink.get(d, 0) for d in got.by_drink)
    assert all(got.by_shop[s] == got.whole_order_by_shop.get(s, 0) + extra_shop.get(s, 0) for s in got.by_shop)


def test_the_generated_history_has_every_kind_of_case() -> None:
    data = generate(SMALL)
    got = oracle(data)
    assert len(data.orders) == SMALL.orders
    assert got.priced_items + got.unpriced_items == data.items
    assert NEVER_PRICED in got.unpriced and NEVER_PRICED not in got.by_drink
    assert SEASONAL in got.unpriced and SEASONAL in got.by_drink  # before its first price, and after
    assert WITHDRAWN in got.unpriced and WITHDRAWN in got.by_drink
    assert any(not v.header for v in data.menu)
    assert all(o.time_ns % MS == 0 for o in data.orders) and all(v.time_ns % MS == 0 for v in data.menu)


def test_late_menu_records_arrive_after_younger_ones_but_within_the_bound() -> None:
    data = generate(SMALL)
    times = [v.time_ns for v in data.menu]
    assert times != sorted(times), "some arrive late"
    for i, v in enumerate(data.menu):
        younger_before = [w.time_ns for w in data.menu[:i] if w.time_ns > v.time_ns]
        assert not younger_before or max(younger_before) - v.time_ns <= SMALL.late_max_ms * MS


def test_the_live_feed_keeps_every_record_once_in_arrival_order() -> None:
    data = generate(SMALL)
    feed = data.arrivals()
    assert len(feed) == len(data.menu) + len(data.orders)
    arrivals = [r.arrival_ns if r.arrival_ns is not None else r.time_ns for r in feed]
    assert arrivals == sorted(arrivals)


def test_same_millisecond_edges_put_a_later_version_in_the_order_s_millisecond() -> None:
    data = generate(replace(SMALL, sub_ms_edges=5))
    edges = [o for o in data.orders if o.items[0][0] == SUB_MS]
    assert len(edges) == 5
    exact, per_ms = AsOf(data.menu), AsOf(data.menu, MS)
    assert all(exact.price(SUB_MS, o.time_ns) != per_ms.price(SUB_MS, o.time_ns) for o in edges)


@given(st.integers(0, 2**32 - 1))
def test_a_record_without_the_header_has_a_time_in_whole_milliseconds(seed: int) -> None:
    """Its Kafka timestamp is all it carries; an edge always has its header (its time is
    inside a millisecond)."""
    data = generate(replace(SMALL, orders=200, seed=seed, sub_ms_edges=20))
    bare = [v for v in data.menu if not v.header]
    assert bare and all(v.time_ns % MS == 0 for v in bare)
    assert all(v.header for v in data.menu if v.drink == SUB_MS)


@pytest.mark.parametrize(("key", "partition"), [
    # Java's Utils.toPositive(Utils.murmur2(key)) % 1000003, computed with kafka-clients 4.1.1 and 4.4.0.
    (b"", 645856), (b"a", 100772), (b"ab", 154486), (b"abc", 468670), (b"latte", 831174),
    (b"flat white", 158048), (b"~flush-0", 195653),
])
def test_murmur2_partition_is_java_s(key: bytes, partition: int) -> None:
    assert murmur2_partition(key, 1000003) == partition


@given(st.integers(1, 64))
def test_the_flush_drinks_reach_every_partition(partitions: int) -> None:
    names = flush_drinks(partitions)
    assert [murmur2_partition(n.encode(), partitions) for n in names] == list(range(partitions))
