"""The order gate in the JVM (service/drink_count/jvm/brewstream/OrderGate.java), called
through Spark's own JVM: it never counts what ``count_drinks`` or the oracle refuses, what
it counts it counts the same, and it takes the clean majority; its sums (GateTotals.java)
are the gate's verdicts added up, however the values are split; and a batch counted by
the gate and the Python workers together gives the oracle's counts and ``count_drinks``'s
DLQ reasons."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.drink_count.aggregate import Carry, aggregate_batch, order_gate
from service.records.limits import MAX_NAME_BYTES
from service.records.orders import BadOrder, count_drinks
from tests.support.corpus import BAD_ORDERS, GOOD_EDGE_ORDERS
from tests.support.orders import (
    JSON_PREFIXES,
    PLAIN_EDGES,
    PROPERTY,
    agrees_when_counted,
    json_text,
    near_valid_orders,
    oracle_counts,
    to_bytes,
    verdicts,
)
from topics.orders_gen import OrderGenerator

# Integers of thousands of digits are generated on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")


def gate(spark: Any, raw: bytes, max_name_bytes: int = MAX_NAME_BYTES) -> dict[str, int] | None:
    return as_counts(spark._jvm.brewstream.OrderGate.gate(bytearray(raw), max_name_bytes))


def as_counts(counted: Any) -> dict[str, int] | None:
    """The gate's map (a Java map, or a dict from a Spark row) as drink -> quantity."""
    return None if counted is None else {str(k): int(v) for k, v in counted.items()}


def check_gate(spark: Any, raw: bytes, max_name_bytes: int = MAX_NAME_BYTES) -> bool:
    """The gate counts only what count_drinks (and, at the default limit, the oracle)
    counts, and the same; True when it counted the order."""
    return agrees_when_counted(gate(spark, raw, max_name_bytes), raw, max_name_bytes)


def check_gate_all(spark: Any, raws: list[bytes]) -> int:
    """``check_gate`` on many values, the gate called as Spark calls it (the registered
    function, in one job; a py4j call per value costs milliseconds): how many it counted."""
    df = spark.createDataFrame([(i, bytearray(raw)) for i, raw in enumerate(raws)], "i int, value binary")
    rows = df.select("i", order_gate(spark, MAX_NAME_BYTES).alias("c")).collect()
    assert sorted(row["i"] for row in rows) == list(range(len(raws)))
    return sum(agrees_when_counted(as_counts(row["c"]), raws[row["i"]], MAX_NAME_BYTES) for row in rows)


@settings(PROPERTY, max_examples=600)
@given(raw=near_valid_orders())
def test_the_gate_never_passes_a_bad_order(spark: Any, raw: bytes) -> None:
    check_gate(spark, raw)


@PROPERTY
@given(raw=json_text.map(to_bytes))
def test_the_gate_on_any_json(spark: Any, raw: bytes) -> None:
    check_gate(spark, raw)


@PROPERTY
@given(prefix=st.sampled_from(JSON_PREFIXES) | st.just(b""), tail=st.binary(max_size=100))
def test_the_gate_on_any_bytes(spark: Any, prefix: bytes, tail: bytes) -> None:
    check_gate(spark, prefix + tail)


@PROPERTY
@given(raw=near_valid_orders(), limit=st.integers(1, 12))
def test_the_gate_keeps_a_smaller_name_limit(spark: Any, raw: bytes, limit: int) -> None:
    check_gate(spark, raw, limit)


@pytest.mark.parametrize("raw", [*PLAIN_EDGES, *(raw for _, raw, _ in BAD_ORDERS if raw is not None),
                                 *(raw for raw, _ in GOOD_EDGE_ORDERS)])
def test_the_gate_at_the_edges(spark: Any, raw: bytes) -> None:
    check_gate(spark, raw)


# Every byte that means something to a JSON scanner, and some that must never pass.
EDIT_BYTES = b'{}[]":, \t\n\r\\/0123456789-+.eEtrufalsn' + bytes([0x00, 0x1F, 0x7F, 0x80, 0xC3, 0xE9, 0xFF])
EDITED = [
    b'{"order_id":"o-1","shop_id":"s","items":[{"drink":"latte","quantity":12}]}',
    b'{ "items" : [ {"quantity": 2147483647, "drink": "x"}, {"drink":"x","quantity":1} ],\n'
    b' "shop_id": "", "order_id": "a b" }',
]


@pytest.mark.parametrize("raw", EDITED)
def test_every_one_byte_edit_of_a_clean_order(spark: Any, raw: bytes) -> None:
    """Exhaustively: each byte replaced by, or preceded by, each of ``EDIT_BYTES``, and each
    byte dropped. A scanner's slips (a closing bracket taken for a brace, a digit too many,
    a quote left open) are one byte away from a clean order."""
    assert check_gate(spark, raw)
    variants = []
    for i in range(len(raw) + 1):
        variants += [raw[:i] + bytes([b]) + raw[i:] for b in EDIT_BYTES]
        if i < len(raw):
            variants += [raw[:i] + bytes([b]) + raw[i + 1:] for b in EDIT_BYTES] + [raw[:i] + raw[i + 1:]]
    # some edits keep an order clean (a longer id, a space): the gate still takes them
    assert check_gate_all(spark, variants) > 0


def test_the_gate_takes_the_clean_majority(spark: Any) -> None:
    """Every order of the project's generator passes, written compactly or the way
    Python's json module writes it, and so do many of the near-valid generator's good
    orders (the rest have escapes, other characters or fields of their own)."""
    generated = OrderGenerator(7)
    orders = [next(generated) for _ in range(500)]
    ours = [raw for order in orders for raw in (orjson.dumps(order), json.dumps(order, indent=1).encode())]
    assert check_gate_all(spark, ours) == len(ours)
    good = [raw for raw, ok in zip(*[verdicts(near_valid_orders(), f) for f in (lambda r: r, oracle_counts)],
                                   strict=True) if ok is not None]
    passed = check_gate_all(spark, good)
    assert passed >= len(good) // 10, (passed, len(good))


def clean_orders() -> st.SearchStrategy[bytes]:
    return st.integers(0, 2**32).map(lambda seed: orjson.dumps(next(OrderGenerator(seed))))


@PROPERTY
@given(values=st.lists(st.none() | clean_orders() | near_valid_orders() | st.binary(max_size=40), max_size=25),
       cuts=st.lists(st.integers(0, 25), max_size=3), limit=st.sampled_from([MAX_NAME_BYTES, 3]))
def test_the_totals_add_up_the_gate_however_split(spark: Any, values: list[bytes | None], cuts: list[int],
                                                  limit: int) -> None:
    """GateTotals' reduce and merge, as Spark calls them per task and then across tasks:
    the drinks, orders and unclean values of the gate's verdicts, value by value."""
    totals = spark.sparkContext._jvm.brewstream.GateTotals(limit)
    bounds = [0, *sorted(min(c, len(values)) for c in cuts), len(values)]
    parts = []
    for start, end in itertools.pairwise(bounds):
        part = totals.zero()
        for v in values[start:end]:
            part = totals.reduce(part, None if v is None else bytearray(v))
        parts.append(part)
    summed = parts[0]
    for part in parts[1:]:
        summed = totals.merge(summed, part)
    summed = totals.finish(summed)

    expected: dict[str, int] = {}
    verdicts_ = [None if v is None else gate(spark, v, limit) for v in values]
    for counted in verdicts_:
        for drink, qty in (counted or {}).items():
            expected[drink] = expected.get(drink, 0) + qty
    assert {str(k): int(v) for k, v in summed.getCounts().items()} == expected
    assert summed.getOrders() == sum(c is not None for c in verdicts_)
    assert summed.getUnclean() == sum(c is None for c in verdicts_)


# Names the gate takes as they are (printable ASCII without a quote or a backslash), many
# of them alike: the same length and first bytes, so that probing meets near-misses.
_plain_names = st.text("abc", min_size=1, max_size=6) | st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0x7E, exclude_characters='"\\'), min_size=1, max_size=12)


@settings(PROPERTY, max_examples=60)
@given(orders=st.lists(st.lists(st.tuples(_plain_names, st.integers(1, 2**31 - 1)), min_size=1, max_size=4),
                       max_size=300))
def test_the_totals_keep_many_drinks_apart(spark: Any, orders: list[list[tuple[str, int]]]) -> None:
    """Hundreds of names, many sharing a hash slot, across the table's growth: each drink
    gets exactly the sum of its own quantities."""
    totals = spark.sparkContext._jvm.brewstream.GateTotals(MAX_NAME_BYTES)
    part = totals.zero()
    expected: dict[str, int] = {}
    for k, items in enumerate(orders):
        raw = orjson.dumps({"order_id": f"o{k}", "shop_id": "s", "items": [{"drink": d, "quantity": q}
                                                                          for d, q in items]})
        part = totals.reduce(part, bytearray(raw))
        for drink, qty in items:
            expected[drink] = expected.get(drink, 0) + qty
    summed = totals.finish(part)
    assert {str(k): int(v) for k, v in summed.getCounts().items()} == expected
    assert summed.getOrders() == len(orders) and summed.getUnclean() == 0


@pytest.mark.parametrize("by_partition", [False, True], ids=["merged", "by-partition"])
@pytest.mark.parametrize("carry", [Carry(), Carry(rows=0), Carry(bytes=600)], ids=["driver", "workers", "some-tasks"])
def test_a_batch_counts_like_the_oracle_whichever_path_takes_an_order(spark: Any, carry: Carry,
                                                                      by_partition: bool) -> None:
    """Clean orders, orders only Python can count, and every kind of bad order, shuffled
    over three partitions: the gate and Python together count what the oracle counts, and
    each bad order gets count_drinks's reason, once; whether the JVM carries every unclean
    row to the driver, none (the workers count them), or some tasks' but not others'. By
    partition, each partition's deltas are its own rows' (Spark's tasks here each read
    rows of every partition)."""
    rng = random.Random(20261124)
    generated = OrderGenerator(11)
    values: list[bytes | None] = [orjson.dumps(next(generated)) for _ in range(3000)]
    values += [raw for _, raw, _ in BAD_ORDERS] + [raw for raw, _ in GOOD_EDGE_ORDERS] + PLAIN_EDGES
    values += [b'{"order_id":"o","shop_id":"s","items":[{"drink":"caf\\u00e9","quantity":2}]}',
               b'{"order_id":"o","shop_id":"s","note":1,"items":[{"drink":"latte","quantity":5}]}']
    rng.shuffle(values)
    rows = [(b"k", v, i % 3, i // 3) for i, v in enumerate(values)]
    df = spark.createDataFrame(rows, "key binary, value binary, partition int, offset long")
    agg = aggregate_batch(df, {}, carry=carry, by_partition=by_partition)

    expected: dict[str, int] = {}
    per_partition: dict[int, dict[str, int]] = {}
    reasons: dict[tuple[int, int], str] = {}
    for _, v, p, o in rows:
        try:
            drinks = count_drinks(v)
        except BadOrder as exc:
            reasons[(p, o)] = str(exc)
            continue
        for drink, qty in drinks.items():
            expected[drink] = expected.get(drink, 0) + qty
            per_partition.setdefault(p, {})[drink] = per_partition.get(p, {}).get(drink, 0) + qty
    assert agg.deltas == expected
    assert agg.partition_deltas == (per_partition if by_partition else {})
    assert agg.good_orders == len(rows) - len(reasons)
    assert {(b.partition, b.offset): b.reason for b in agg.bad} == reasons and len(agg.bad) == len(reasons)
    assert agg.next_offsets == {p: max(o for _, _, q, o in rows if q == p) + 1 for p in range(3)}
