"""The join's rule against an oracle that sees the whole menu history at once.

The oracle prices each order with the latest version at or before its time among every
menu record (the last of two at one time), with nothing but a loop. The join sees the
records a batch at a time, through the store's bytes (``step_entries`` applied to a dict,
decoded again), in any batching whose menu records each arrive less than the grace late;
then it must agree with the oracle exactly, whatever the batching.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.revenue.join import JoinConfig, JoinState, Order, Refused, StepResult, price_at, step
from service.revenue.menu import MenuUpdate
from service.revenue.state import RevenueState, decode_revenue_state, step_entries

S = 10**9
DRINKS = ("latte", "mocha", "chai", "flat white")
CFG = JoinConfig(grace_ns=10 * S, retention_ns=3600 * S, window_ns=60 * S)


def oracle_price(menu: list[MenuUpdate], drink: str, t: int) -> int | None:
    best: MenuUpdate | None = None
    for u in menu:  # in arrival order: of two at one time, the later one holds
        if u.drink == drink and u.valid_from_ns <= t and (best is None or u.valid_from_ns >= best.valid_from_ns):
            best = u
    return None if best is None else best.price_cents


@dataclass
class Outcome:
    by_drink: dict[str, int]
    by_shop: dict[str, int]
    refused: dict[tuple[int, int], str]


def oracle(menu: list[MenuUpdate], orders: list[Order]) -> Outcome:
    out = Outcome({}, {}, {})
    for o in orders:
        prices = {d: oracle_price(menu, d, o.event_ns) for d, _ in o.items}
        missing = [d for d, p in prices.items() if p is None]
        if missing:
            out.refused[o.position] = "no price"
            continue
        for d, q in o.items:
            cents = prices[d] * q  # type: ignore[operator]
            out.by_drink[d] = out.by_drink.get(d, 0) + cents
            out.by_shop[o.shop] = out.by_shop.get(o.shop, 0) + cents
    return out


Batch = tuple[list[MenuUpdate], list[Order]]


def run_join(batches: list[Batch], cfg: JoinConfig = CFG) -> tuple[RevenueState, dict[tuple[int, int], str]]:
    """Every batch through the step and the store's bytes, as the sink does."""
    store: dict[bytes, bytes] = {}
    refused: dict[tuple[int, int], str] = {}
    for menu, orders in batches:
        state = decode_revenue_state(sorted(store.items()))
        result = step(state.join, menu, orders, cfg)
        for r in result.refused:
            assert r.order.position not in refused, "refused twice"
            refused[r.order.position] = r.reason.split(":", 1)[0]
        for key, value in step_entries(state, result, cfg.window_ns, 0, 0, {}):
            if value is None:
                store.pop(key, None)
            else:
                store[key] = value
    return decode_revenue_state(sorted(store.items())), refused


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[MenuUpdate], list[Order], list[Batch]]:
    """A menu and orders in arrival order, each menu record less than the grace late, cut
    into batches anywhere."""
    events: list[tuple[int, int, object]] = []  # arrival, tie-break, record
    n_menu = draw(st.integers(1, 12))
    for i in range(n_menu):
        t = draw(st.integers(0, 300)) * S
        late = draw(st.integers(0, CFG.grace_ns - 1))
        price = draw(st.one_of(st.none(), st.integers(1, 900)))
        events.append((t + late, i, MenuUpdate(draw(st.sampled_from(DRINKS)), t, price)))
    n_orders = draw(st.integers(0, 25))
    for i in range(n_orders):
        t = draw(st.integers(0, 320)) * S + draw(st.integers(0, S - 1))
        items = draw(st.dictionaries(st.sampled_from(DRINKS), st.integers(1, 5), min_size=1, max_size=3))
        late = draw(st.integers(0, 30 * S))  # orders may arrive late too, far within the retention
        order = Order(i % 3, i, t, f"shop-{i % 4}", tuple(sorted(items.items())))
        events.append((t + late, 1000 + i, order))
    events.sort(key=lambda e: (e[0], e[1]))
    # A closing menu record far enough ahead that every order is released.
    events.append((10**6 * S, 99_999, MenuUpdate("clock", 400 * S, 1)))
    cuts = sorted(draw(st.sets(st.integers(1, len(events)), max_size=6)) | {len(events)})
    batches, start = [], 0
    for cut in cuts:
        chunk = [e[2] for e in events[start:cut]]
        batches.append(([m for m in chunk if isinstance(m, MenuUpdate)], [o for o in chunk if isinstance(o, Order)]))
        start = cut
    menu = [e[2] for e in events if isinstance(e[2], MenuUpdate)]
    orders = [e[2] for e in events if isinstance(e[2], Order)]
    return menu, orders, batches  # type: ignore[return-value]


@settings(max_examples=300, deadline=None)
@given(histories())
def test_late_by_less_than_the_grace_prices_with_the_whole_history(
        case: tuple[list[MenuUpdate], list[Order], list[Batch]]) -> None:
    menu, orders, batches = case
    state, refused = run_join(batches)
    expected = oracle(menu, orders)
    assert state.by_drink == expected.by_drink
    assert state.by_shop == expected.by_shop
    assert refused == expected.refused
    assert not state.join.pending  # the closing record released every order


def test_a_price_change_later_than_the_grace_does_not_reprice_released_orders() -> None:
    latte = Order(0, 0, 100 * S, "shop-1", (("latte", 2),))
    batches = [([MenuUpdate("latte", 0, 300)], [latte]), ([MenuUpdate("clock", 200 * S, 1)], []),
               ([MenuUpdate("latte", 50 * S, 500)], [])]  # 150 s late: past the grace
    state, refused = run_join(batches)
    assert state.by_drink == {"latte": 600} and not refused


def test_an_order_older_than_the_retention_is_too_late_and_never_priced() -> None:
    cfg = JoinConfig(grace_ns=10 * S, retention_ns=60 * S, window_ns=60 * S)
    new, old = Order(0, 0, 100 * S, "shop-1", (("latte", 1),)), Order(0, 1, 10 * S, "shop-1", (("latte", 1),))
    batches = [([MenuUpdate("latte", 0, 300), MenuUpdate("clock", 200 * S, 1)], [new]), ([], [old])]
    state, refused = run_join(batches, cfg)
    assert refused == {(0, 1): "too late"} and state.by_drink == {"latte": 300}


def test_a_menu_far_ahead_of_the_orders_makes_no_order_too_late() -> None:
    """Reading a backlog, the whole menu comes first: its newest record is no clock for
    which orders are too late."""
    cfg = JoinConfig(grace_ns=10 * S, retention_ns=60 * S, window_ns=60 * S)
    menu = [MenuUpdate("latte", 0, 300), MenuUpdate("latte", 5000 * S, 350)]
    orders = [Order(0, i, (10 + i) * S, "s", (("latte", 1),)) for i in range(3)]
    state, refused = run_join([(menu, orders)], cfg)
    assert not refused and state.by_drink == {"latte": 900}


def test_versions_past_the_retention_go_but_the_one_that_still_holds_stays() -> None:
    cfg = JoinConfig(grace_ns=0, retention_ns=60 * S, window_ns=60 * S)
    menu = [MenuUpdate("latte", t * S, 100 + t) for t in (0, 10, 20)] + [MenuUpdate("clock", 200 * S, 1)]
    state, _ = run_join([(menu, [Order(0, 0, 200 * S, "s", (("latte", 1),))])], cfg)
    assert state.join.versions["latte"] == {20 * S: 120}
    assert price_at(state.join.versions["latte"], 150 * S) == 120


def test_a_withdrawn_drink_has_no_price_until_it_is_listed_again() -> None:
    menu = [MenuUpdate("mocha", 0, 400), MenuUpdate("mocha", 50 * S, None), MenuUpdate("mocha", 80 * S, 450)]
    orders = [Order(0, i, t * S, "s", (("mocha", 1),)) for i, t in enumerate((10, 60, 90))]
    result = step(JoinState(), [*menu, MenuUpdate("clock", 500 * S, 1)], orders, CFG)
    assert [p.cents for p in result.priced] == [400, 450]
    (no_price,) = result.refused
    assert isinstance(no_price, Refused) and no_price.reason.startswith("no price: 'mocha' was withdrawn")


def test_an_order_waits_for_the_grace_and_a_replayed_one_is_not_taken_twice() -> None:
    o = Order(0, 0, 100 * S, "s", (("latte", 1),))
    first = step(JoinState(), [MenuUpdate("latte", 0, 300)], [o], CFG)
    assert first.waiting == [o] and not first.priced
    state = JoinState(versions={"latte": {0: 300}}, pending={o.position: o}, orders_time=100 * S, menu_time=0)
    again: StepResult = step(state, [], [o], CFG)
    assert not again.waiting and not again.priced


def test_the_grace_may_not_exceed_the_retention() -> None:
    with pytest.raises(ValueError):
        JoinConfig(grace_ns=2, retention_ns=1, window_ns=1)


def test_of_two_versions_at_one_time_the_later_record_holds() -> None:
    menu = [MenuUpdate("latte", 0, 300), MenuUpdate("latte", 0, 350), MenuUpdate("clock", 100 * S, 1)]
    result = step(JoinState(), menu, [Order(0, 0, 50 * S, "s", (("latte", 1),))], CFG)
    assert [p.cents for p in result.priced] == [350]


def test_the_docs_timeline() -> None:
    """docs/concepts/revenue.md's worked timeline, step by step (grace 10 s, retention 1 h)."""
    cfg = JoinConfig(grace_ns=10 * S, retention_ns=3600 * S, window_ns=3600 * S)

    def at(hms: str) -> int:
        h, m, s = map(int, hms.split(":"))
        return ((h * 60 + m) * 60 + s) * S

    def order(name: str, hms: str, drink: str, qty: int) -> Order:
        return Order(0, ord(name), at(hms), "shop-1", ((drink, qty),))

    steps: list[tuple[MenuUpdate | Order, dict[str, int | str]]] = [
        (MenuUpdate("latte", at("10:00:00"), 300), {}),
        (order("A", "10:04:58", "latte", 1), {}),
        (order("B", "10:05:02", "latte", 2), {}),
        (MenuUpdate("latte", at("10:05:00"), 350), {}),  # 2 s behind the join: within the grace
        (order("C", "10:05:09", "mocha", 1), {"A": 300}),
        (order("D", "10:05:13", "latte", 1), {"B": 700}),
        (MenuUpdate("latte", at("10:05:01"), 330), {}),  # 12 s behind: B keeps 350, D takes 330
        (order("E", "09:04:00", "latte", 1), {"E": "too late"}),
        (order("F", "10:05:30", "latte", 1), {"C": "no price", "D": 330}),
    ]
    state = JoinState()
    store: dict[bytes, bytes] = {}
    for record, outcome in steps:
        menu, orders = ([record], []) if isinstance(record, MenuUpdate) else ([], [record])
        result = step(state, menu, orders, cfg)
        got: dict[str, int | str] = {chr(p.order.offset): p.cents for p in result.priced}
        got.update({chr(r.order.offset): r.reason.split(":", 1)[0] for r in result.refused})
        assert got == outcome, record
        rev = decode_revenue_state(sorted(store.items()))
        for key, value in step_entries(rev, result, cfg.window_ns, 0, 0, {}):
            store.pop(key, None) if value is None else store.__setitem__(key, value)
        state = decode_revenue_state(sorted(store.items())).join
