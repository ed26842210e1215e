import contextlib
import json
import struct

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from service.drink_count.aggregate import (
    BadRecord,
    OrderRows,
    count_rows,
    merge_partials,
    partial_counts,
    read_gate_count,
    records_counted,
    small_row_bytes,
)
from tests.support.corpus import BAD_ORDERS

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


# --- the two passes of aggregate_batch ------------------------------------------------

def marked(rows: list[tuple[bytes | None, bytes | None, int, int, bool]]) -> pa.RecordBatch:
    """A first-pass batch: rows marked large arrive without key and value."""
    cols = list(zip(*rows, strict=True))
    types = [*(t.type for t in INPUT), pa.bool_()]
    return pa.RecordBatch.from_arrays([pa.array(c, t) for c, t in zip(cols, types, strict=True)],
                                      names=[*INPUT.names, "large"])


@settings(deadline=None)  # the first example pays for pyarrow's first conversions
@given(st.lists(st.tuples(st.sampled_from([order(("latte", 1)), order(("mocha", 2), ("latte", 1)), b"{", None]),
                          st.booleans()), max_size=30))
def test_the_two_passes_count_each_record_once(rows: list[tuple[bytes | None, bool]]) -> None:
    """First pass over everything (large rows only counted as left over), second pass over
    the large rows whole: combined, the same as one pass over everything."""
    whole = [(b"k", v, 0, i) for i, (v, _) in enumerate(rows)]
    if not rows:
        return
    first = run(marked([(None, None, 0, i, True) if big else (b"k", v, 0, i, False)
                        for i, (v, big) in enumerate(rows)]))
    one = merge_partials(run(batch(whole)))
    assert merge_partials(first).large == sum(big for _, big in rows)
    second = run(batch([r for r, (_, big) in zip(whole, rows, strict=True) if big]))
    both = merge_partials([*first, *second])
    assert records_counted(second) == sum(big for _, big in rows)
    assert records_counted(run(batch(whole))) == one.good_orders + len(one.bad) == len(rows)
    assert (both.deltas, both.good_orders, both.bad, both.next_offsets) == (
        one.deltas, one.good_orders, one.bad, one.next_offsets)


@given(st.one_of(st.none(), st.text(max_size=12), st.integers().map(str)),
       st.one_of(st.none(), st.text(max_size=12), st.integers().map(str)))
def test_small_row_bytes_is_total(max_bytes: str | None, max_records: str | None) -> None:
    got = small_row_bytes(max_bytes, max_records)
    try:
        bound, records = int(max_bytes or 2**31 - 1), int(max_records or 10_000)
    except ValueError:
        assert got is None
        return
    if 0 < bound < 2**31 - 1 and records > 0:
        assert (got == max(1, bound // records) and got * records <= bound) or got == 1
    else:
        assert got is None


def test_the_default_bound_sends_orders_up_to_3355_bytes_unmeasured() -> None:
    assert small_row_bytes(str(32 * 1024 * 1024), "10000") == 3355
    assert small_row_bytes("2147483647", "10000") is None


def gate_blob(counts: dict[int | None, tuple[int, dict[str, int]]], unclean: int, overflow: bool,
              highest: dict[int, int], carried: list[tuple[bytes | None, bytes | None, int, int]]) -> bytes:
    """GateCount's blob as GateCount.java writes it (its layout is stated there): per
    group (partition, None for all), its clean orders and its sums."""
    def optional(b: bytes | None) -> bytes:
        return struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + b

    orders = sum(n for n, _ in counts.values())
    out = struct.pack(">qqb", orders, unclean, overflow) + struct.pack(">i", len(counts))
    for group, (clean, sums) in counts.items():
        out += struct.pack(">iqi", -1 if group is None else group, clean, len(sums))
        for name, n in sums.items():
            raw = name.encode("latin-1")
            out += struct.pack(">i", len(raw)) + raw + struct.pack(">q", n)
    out += struct.pack(">i", len(highest)) + b"".join(struct.pack(">iq", p, o) for p, o in highest.items())
    out += struct.pack(">i", len(carried))
    for key, value, p, o in carried:
        out += struct.pack(">iq", p, o) + optional(key) + optional(value)
    return out


_i32, _i64 = st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1)
_rows = st.lists(st.tuples(st.none() | st.binary(max_size=20), st.none() | st.binary(max_size=40), _i32, _i64),
                 max_size=8)


@given(counts=st.dictionaries(st.none() | _i32,
                              st.tuples(st.integers(0, 2**60),
                                        st.dictionaries(st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E),
                                                                min_size=1), _i64, max_size=6)), max_size=3),
       unclean=_i64, overflow=st.booleans(), highest=st.dictionaries(_i32, _i64, max_size=4), carried=_rows)
def test_the_gate_count_reads_back_what_the_jvm_wrote(counts: dict[int | None, tuple[int, dict[str, int]]],
                                                        unclean: int, overflow: bool, highest: dict[int, int],
                                                        carried: list[tuple[bytes | None, bytes | None, int, int]]
                                                        ) -> None:
    got = read_gate_count(gate_blob(counts, unclean, overflow, highest, carried))
    assert (got.counts, got.group_orders, got.unclean, got.overflow, got.highest) == (
        {g: sums for g, (_, sums) in counts.items()}, {g: n for g, (n, _) in counts.items()}, unclean, overflow,
        highest)
    assert got.orders == sum(n for n, _ in counts.values())
    rows = got.carried
    assert [(rows.key_at(i), rows.values[i], rows.partitions[i], rows.offsets[i])
            for i in range(len(rows.values))] == carried


@given(blob=st.binary(max_size=80) | _rows.map(lambda rows: gate_blob({None: (1, {"latte": 2})}, len(rows), False,
                                                                       {0: 9}, rows)[:-1]))
def test_the_gate_count_reader_refuses_any_other_bytes_in_one_way(blob: bytes) -> None:
    """Total: a blob that is not one gives ValueError, never anything else."""
    with contextlib.suppress(ValueError):
        read_gate_count(blob)


_order_rows = st.lists(st.tuples(st.none() | st.binary(max_size=20),
                                 st.none() | st.binary(max_size=60) | st.sampled_from([o for _, o, _ in BAD_ORDERS])
                                 | st.builds(order, st.tuples(st.sampled_from(["latte", "mocha"]), st.integers(1, 9))),
                                 st.integers(0, 3), _i64), min_size=1, max_size=12)


@given(rows=_order_rows, dlq_record_bytes=st.integers(1, 64))
def test_the_driver_counts_carried_rows_as_the_workers_count_arrow_batches(
        rows: list[tuple[bytes | None, bytes | None, int, int]], dlq_record_bytes: int) -> None:
    """The driver's count of the gate's carried rows (plain lists, no pyarrow) gives the very
    partial rows the Python workers give for the same rows in an Arrow batch."""
    keys, values, partitions, offsets = (list(c) for c in zip(*rows, strict=True))
    by_driver = count_rows(OrderRows(values, partitions, offsets, keys.__getitem__),
                           dlq_record_bytes=dlq_record_bytes)
    (by_workers,) = partial_counts(iter([batch(rows)]), dlq_record_bytes=dlq_record_bytes)
    assert by_driver == by_workers.to_pylist()


@given(rows=_order_rows, dlq_record_bytes=st.integers(1, 64))
def test_counted_by_partition_each_partition_holds_its_own_orders(
        rows: list[tuple[bytes | None, bytes | None, int, int]], dlq_record_bytes: int) -> None:
    """By partition, the driver and the workers each give every input partition the deltas of
    its own rows (the oracle: each partition's rows counted alone), and everything else as
    counted whole: the sums, the orders, the offsets and the bad records."""
    keys, values, partitions, offsets = (list(c) for c in zip(*rows, strict=True))
    whole = merge_partials(count_rows(OrderRows(values, partitions, offsets, keys.__getitem__),
                                      dlq_record_bytes=dlq_record_bytes))
    oracle, orders = {}, {}
    for p in set(partitions):
        mine = [r for r in rows if r[2] == p]
        ks, vs, ps, os_ = (list(c) for c in zip(*mine, strict=True))
        alone = merge_partials(count_rows(OrderRows(vs, ps, os_, ks.__getitem__)))
        if alone.deltas:
            oracle[p] = alone.deltas
        orders[p] = alone.good_orders
    by_driver = merge_partials(count_rows(OrderRows(values, partitions, offsets, keys.__getitem__),
                                          dlq_record_bytes=dlq_record_bytes, by_partition=True))
    (arrow,) = partial_counts(iter([batch(rows)]), dlq_record_bytes=dlq_record_bytes, by_partition=True)
    by_workers = merge_partials(arrow.to_pylist())
    for agg in (by_driver, by_workers):
        assert agg.partition_deltas == oracle
        assert agg.partition_orders == {p: n for p, n in orders.items() if n}
        assert (agg.deltas, agg.good_orders, agg.next_offsets, agg.bad) == (whole.deltas, whole.good_orders,
                                                                            whole.next_offsets, whole.bad)
