import json

import pyarrow as pa

from service.drink_count.aggregate import BadRecord, merge_partials, partial_counts
from tests.corpus import BAD_ORDERS

INPUT = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("partition", pa.int32()),
                   ("offset", pa.int64())])


def order(*items: tuple[str, int]) -> bytes:
    return json.dumps({"order_id": "o", "shop_id": "s",
                       "items": [{"drink": d, "quantity": q} for d, q in items]}).encode()


def batch(rows: list[tuple[bytes | None, bytes | None, int, int]]) -> pa.RecordBatch:
    cols = list(zip(*rows, strict=True)) if rows else [[], [], [], []]
    return pa.RecordBatch.from_arrays([pa.array(c, t.type) for c, t in zip(cols, INPUT, strict=True)], schema=INPUT)


def run(*batches: pa.RecordBatch) -> list[dict]:
    out = list(partial_counts(iter(batches)))
    assert len(out) == 1, "one partial batch per task"
    return out[0].to_pylist()


def test_partials_sum_drinks_across_orders_and_arrow_batches() -> None:
    rows = run(
        batch([(b"s", order(("latte", 2), ("mocha", 1)), 0, 10), (b"s", order(("latte", 1)), 0, 11)]),
        batch([(b"s", order(("latte", 4)), 1, 3)]),
    )
    agg = merge_partials(rows)
    assert agg.deltas == {"latte": 7, "mocha": 1}
    assert agg.good_orders == 3
    assert agg.next_offsets == {0: 12, 1: 4}
    assert agg.bad == []


def test_bad_orders_travel_whole_and_still_advance_offsets() -> None:
    raw_bad = BAD_ORDERS[0][1], BAD_ORDERS[2][1]
    rows = run(batch([(b"k1", raw_bad[0], 2, 5), (b"s", order(("latte", 1)), 2, 6), (None, raw_bad[1], 2, 7)]))
    agg = merge_partials(rows)
    assert agg.deltas == {"latte": 1}
    assert agg.next_offsets == {2: 8}
    assert agg.bad == [BadRecord(2, 5, b"k1", None, "null value"), BadRecord(2, 7, None, raw_bad[1], "not JSON")]


def test_merge_of_several_tasks() -> None:
    a = run(batch([(b"s", order(("latte", 1)), 0, 0)]))
    b = run(batch([(b"s", order(("latte", 2), ("tea", 5)), 1, 9)]))
    agg = merge_partials(a + b)
    assert agg.deltas == {"latte": 3, "tea": 5}
    assert agg.next_offsets == {0: 1, 1: 10}


def test_empty_input_is_an_empty_aggregate() -> None:
    agg = merge_partials(run(batch([])))
    assert agg.is_empty and agg.deltas == {} and agg.good_orders == 0
