"""An order as the revenue join reads it: total over any bytes, and the same judgement as
drink-count's (``service.records.orders``) plus the shop id's bound and the event time."""

from __future__ import annotations

import json

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from service.records.orders import BadOrder, count_drinks
from service.revenue.orders import BAD, ORD, merge_partials, parse_order, partial_orders
from topics.event_time import encode_event_time

NOW = 1_790_000_000 * 10**9
AHEAD = 60 * 10**9


def order(shop: str = "shop-1", items: object = None) -> bytes:
    return json.dumps({"order_id": "o-1", "shop_id": shop,
                       "items": items if items is not None else [{"drink": "latte", "quantity": 2}]}).encode()


def test_an_order_with_its_time() -> None:
    o = parse_order(order(), encode_event_time(NOW - 7), NOW, 2, 9, max_ahead_ns=AHEAD)
    assert (o.partition, o.offset, o.event_ns, o.shop, o.items) == (2, 9, NOW - 7, "shop-1", (("latte", 2),))
    assert parse_order(order(), None, NOW, 0, 0, max_ahead_ns=AHEAD).event_ns == NOW


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.none(), st.binary(max_size=60),
                 st.builds(order, st.text(max_size=300), st.lists(st.fixed_dictionaries(
                     {"drink": st.text(max_size=5), "quantity": st.one_of(st.integers(-2, 2**32), st.floats())}),
                     max_size=3))),
       st.one_of(st.none(), st.binary(max_size=9)))
def test_total_and_as_strict_as_drink_count(value: bytes | None, header: bytes | None) -> None:
    try:
        o = parse_order(value, header, NOW, 0, 0, max_ahead_ns=AHEAD, max_name_bytes=256)
    except BadOrder:
        return
    assert value is not None
    assert dict(o.items) == count_drinks(value)  # never accepts what drink-count refuses
    assert len(o.shop.encode()) <= 256


def test_the_spark_partials_carry_orders_bad_records_and_offsets() -> None:
    rows = pa.RecordBatch.from_pydict({
        "key": [b"shop-1", b"shop-2"], "value": [order(), b"not json"], "partition": [0, 1], "offset": [5, 8],
        "ts_us": [NOW // 1000, NOW // 1000],
        "headers": [[{"key": "event-time", "value": encode_event_time(NOW - 1)}], []],
    })
    (out,) = list(partial_orders([rows], AHEAD))
    assert sorted(out.column("kind").to_pylist()) == sorted([ORD, BAD, "part", "part"])
    batch = merge_partials(out.to_pylist())
    assert [o.event_ns for o in batch.orders] == [NOW - 1]
    assert [(b.partition, b.offset) for b in batch.bad] == [(1, 8)]
    assert batch.next_offsets == {0: 6, 1: 9}
