"""How brewstream's revenue result is judged against the oracle's whole-order rule
(``bench.revenue_ours.agreement``), and how its DLQ reasons are sorted."""

from __future__ import annotations

from bench.revenue_data import Oracle
from bench.revenue_ours import Dlq, _error_header, agreement

EXPECTED = Oracle(whole_order_by_drink={"latte": 600, "mocha": 800}, whole_order_by_shop={"s1": 1400},
                  refused_orders=2)


def test_equal_sums_and_the_refused_orders_plus_the_flush_order_are_exact() -> None:
    got = agreement(EXPECTED, {"latte": 600, "mocha": 800}, {"s1": 1400}, Dlq(no_price=2, flush=1), waiting=0)
    assert got.exact and got.per_shop_diff == []


def test_each_difference_makes_it_inexact() -> None:
    sums = ({"latte": 600, "mocha": 800}, {"s1": 1400})
    cases = [
        agreement(EXPECTED, {"latte": 600, "mocha": 805}, sums[1], Dlq(no_price=2, flush=1), 0),
        agreement(EXPECTED, sums[0], {"s1": 1400, "s2": 5}, Dlq(no_price=2, flush=1), 0),
        agreement(EXPECTED, *sums, Dlq(no_price=1, flush=1), 0),
        agreement(EXPECTED, *sums, Dlq(no_price=2, too_late=1, flush=1), 0),
        agreement(EXPECTED, *sums, Dlq(no_price=2), 0),  # the flush order was never released
        agreement(EXPECTED, *sums, Dlq(no_price=2, flush=1, other={"bad menu record": 1}), 0),
        agreement(EXPECTED, *sums, Dlq(no_price=2, flush=1), 3),
    ]
    assert [c.exact for c in cases] == [False] * len(cases)
    assert cases[1].per_shop_diff == [("s2", 0, 5)]


def test_the_error_header_is_the_reason() -> None:
    assert _error_header([("source.topic", b"t"), ("error", b"no price: 'x' has no price at 1")]) == \
        "no price: 'x' has no price at 1"
    assert _error_header(None) == "" and _error_header([("error", None)]) == ""
