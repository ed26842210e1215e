"""However Spark cuts a batch into tasks (one per Kafka partition, or more with
--min-partitions, or a task run again after its executor died), the driver's merge of
the tasks' partial rows is the same: each task's rows depend on its own input range
only, and the driver sees exactly one successful attempt per task."""

from __future__ import annotations

import json
from itertools import pairwise

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from service.drink_count.aggregate import merge_partials, partial_counts
from service.windows.aggregate import merge_window_partials, partial_windows
from service.windows.assign import WindowSpec
from topics.event_time import encode_event_time

ORDERS = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("partition", pa.int32()), ("offset", pa.int64())])
EVENTS = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("partition", pa.int32()), ("offset", pa.int64()),
                    ("ts_us", pa.int64()),
                    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))])
MIN = 60 * 10**9

values = st.one_of(
    st.builds(lambda items: json.dumps({"order_id": "o", "shop_id": "s", "items": items}).encode(),
              st.lists(st.fixed_dictionaries({"drink": st.sampled_from(["latte", "tea", "mocha"]),
                                              "quantity": st.integers(1, 5)}), min_size=1, max_size=3)),
    st.sampled_from([b"not json", b"", b'{"order_id": "o", "shop_id": "s", "items": []}']),
)


def split(rows: list[tuple], cuts: list[int]) -> list[list[tuple]]:
    """Contiguous pieces of each partition's rows, like Spark's offset-range split."""
    pieces: list[list[tuple]] = []
    for p in sorted({r[2] for r in rows}):
        mine = [r for r in rows if r[2] == p]
        edges = sorted({0, len(mine), *(c % (len(mine) + 1) for c in cuts)})
        pieces += [mine[a:b] for a, b in pairwise(edges) if b > a]
    return pieces


def arrow(rows: list[tuple], schema: pa.Schema) -> pa.RecordBatch:
    cols = list(zip(*rows, strict=True)) if rows else [[] for _ in schema]
    return pa.RecordBatch.from_arrays([pa.array(c, f.type) for c, f in zip(cols, schema, strict=True)], schema=schema)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(values, st.integers(0, 2)), max_size=40), st.lists(st.integers(0, 50), max_size=6))
def test_drink_counts_do_not_depend_on_the_task_split(records: list[tuple[bytes, int]], cuts: list[int]) -> None:
    offsets: dict[int, int] = {}
    rows = []
    for value, p in records:
        rows.append((b"k", value, p, offsets.setdefault(p, 100)))
        offsets[p] += 1

    def merged(tasks: list[list[tuple]]) -> object:
        partials = [r for t in tasks for b in partial_counts(iter([arrow(t, ORDERS)])) for r in b.to_pylist()]
        return merge_partials(partials)

    assert merged(split(rows, cuts)) == merged([rows])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 10 * MIN)), max_size=40),
       st.lists(st.integers(0, 50), max_size=6))
def test_windows_do_not_depend_on_the_task_split(events: list[tuple[int, int]], cuts: list[int]) -> None:
    offsets: dict[int, int] = {}
    rows = []
    for p, t in events:
        value = json.dumps({"shop_id": f"s{p}", "drink": "latte", "amount": 1.5}).encode()
        header = {"key": "event-time", "value": encode_event_time(t)}
        rows.append((b"s", value, p, offsets.setdefault(p, 0), t // 1000, [header]))
        offsets[p] += 1
    spec = WindowSpec.tumbling(MIN)
    watermark = 4 * MIN  # events before it are late: the late output must not depend on the split either

    def merged(tasks: list[list[tuple]]) -> object:
        partials = [r for t in tasks for b in partial_windows(iter([arrow(t, EVENTS)]), spec, watermark, MIN)
                    for r in b.to_pylist()]
        return merge_window_partials(partials)

    assert merged(split(rows, cuts)) == merged([rows])
