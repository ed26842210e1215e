"""An order as the revenue join reads it, and one micro-batch of them parsed inside Spark.

An order is a Brew order (``service.records.orders``: the same checks, the same reasons)
with a shop id of at most ``max_name_bytes`` (it becomes a key of the revenue by shop) and
an event time (``service.records.event_time``: its ``event-time`` header, else its Kafka
timestamp). ``parse_order`` is total: an ``Order`` or ``BadOrder``, never anything else.

``partial_orders`` runs on the executors (mapInArrow): every order travels to the driver
parsed (the join must hold it until the grace has passed), every bad one as a DLQ row, cut
or as its position once the task's budget is spent (``service.records.badrecords``).
Per-record code is total (DESIGN.md invariant 8): an unexpected exception in one record
makes it a bad record with the reason ``internal: <type>``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec
import orjson

from service.records.badrecords import BadRecord, CarryBudget, carry, internal_reason
from service.records.event_time import BadTime, event_time_ns
from service.records.limits import MAX_NAME_BYTES, name_fault
from service.records.orders import BadOrder, count_drinks, count_order
from service.revenue.join import Order
from service.spark.ddl import arrow_schema, ddl_columns
from topics.event_time import EVENT_TIME

if TYPE_CHECKING:
    # Only the Python workers build Arrow batches (``partial_orders``); the driver reads
    # them back through pyarrow (``collect_rows``), and plans them without pandas
    # (``service.spark.arrow_map``).
    import pyarrow as pa
    from pyspark.sql import DataFrame

ORD, BAD, PART = "ord", "bad", "part"
DDL = ("kind string, part int, off long, t long, shop string, items binary, rkey binary, value binary, "
       "ksize long, vsize long, carried boolean")
COLUMNS = ddl_columns(DDL)
DEFAULT_RECORD_BYTES = 1_000_000
_items = msgspec.msgpack.Encoder()
_read_items = msgspec.msgpack.Decoder(list[tuple[str, int]])


def parse_order(value: object, event_time: object, kafka_ts_ns: object, partition: int, offset: int, *,
                max_ahead_ns: int, max_name_bytes: int = MAX_NAME_BYTES) -> Order:
    """The order in one record; ``event_time`` None: the record has no header."""
    if not isinstance(value, bytes | bytearray | memoryview) or not value:
        count_drinks(value, max_name_bytes=max_name_bytes)  # type: ignore[arg-type]  # raises with the reason
        raise BadOrder("not an order")  # unreachable: count_drinks refuses both
    raw = bytes(value)
    try:
        doc = orjson.loads(raw)
        drinks = count_order(doc, max_name_bytes)
    except (orjson.JSONDecodeError, BadOrder):
        count_drinks(raw, max_name_bytes=max_name_bytes)  # raises BadOrder with the exact reason
        raise BadOrder("not an order") from None  # unreachable: what orjson refuses count_drinks refuses
    shop = doc["shop_id"]
    fault = name_fault(shop, max_name_bytes)
    if fault is not None:
        raise BadOrder(f"shop_id {fault}")
    try:
        t, _ = event_time_ns(event_time, kafka_ts_ns, max_ahead_ns)
    except BadTime as exc:
        raise BadOrder(str(exc)) from None
    return Order(partition, offset, t, shop, tuple(sorted(drinks.items())))


@dataclass
class OrderBatch:
    orders: list[Order] = field(default_factory=list)
    bad: list[BadRecord] = field(default_factory=list)
    next_offsets: dict[int, int] = field(default_factory=dict)

    @property
    def is_empty(self) -> bool:
        return not self.next_offsets


def partial_orders(batches: Iterable[pa.RecordBatch], max_ahead_ns: int, max_name_bytes: int = MAX_NAME_BYTES,
                   record_bytes: int = DEFAULT_RECORD_BYTES) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: (key, value, partition, offset, ts_us, headers) in, parsed rows out."""
    import pyarrow as pa

    out: dict[str, list[Any]] = {name: [] for name in COLUMNS}
    budget = CarryBudget()
    highest: dict[int, int] = {}

    def row(kind: str, **cols: Any) -> None:
        for name in COLUMNS:
            out[name].append(kind if name == "kind" else cols.get(name))

    for batch in batches:
        cols = {name: batch.column(name).to_pylist() for name in ("key", "value", "partition", "offset", "ts_us",
                                                                  "headers")}
        for i in range(batch.num_rows):
            p, o, key, value = cols["partition"][i], cols["offset"][i], cols["key"][i], cols["value"][i]
            highest[p] = max(highest.get(p, -1), o)
            try:
                stamps = [h["value"] for h in cols["headers"][i] or [] if h["key"] == EVENT_TIME]
                if stamps and stamps[0] is None:
                    raise BadOrder("event-time header is null")
                ts_us = cols["ts_us"][i]
                order = parse_order(value, stamps[0] if stamps else None, ts_us * 1000 if ts_us is not None else None,
                                    p, o, max_ahead_ns=max_ahead_ns, max_name_bytes=max_name_bytes)
            except Exception as exc:  # total per record: see the module docstring
                reason = str(exc) if isinstance(exc, BadOrder) else internal_reason(exc)
                ksize, vsize = len(key or b""), len(value or b"")
                k, v = carry(key, value, record_bytes)
                carried = budget.take(k, v)
                row(BAD, part=p, off=o, shop=reason, rkey=k if carried else None, value=v if carried else None,
                    ksize=ksize, vsize=vsize, carried=carried)
                continue
            row(ORD, part=p, off=o, t=order.event_ns, shop=order.shop, items=_items.encode(order.items))
    for p, top in highest.items():
        row(PART, part=p, off=top)
    yield pa.RecordBatch.from_pydict(out, schema=arrow_schema(DDL))


def merge_partials(rows: Iterable[Mapping[str, Any]]) -> OrderBatch:
    b = OrderBatch()
    for r in rows:
        kind = r["kind"]
        if kind == ORD:
            b.orders.append(Order(r["part"], r["off"], r["t"], r["shop"], tuple(_read_items.decode(r["items"]))))
        elif kind == BAD:
            b.bad.append(BadRecord(r["part"], r["off"], _bytes(r["rkey"]), _bytes(r["value"]), r["shop"],
                                   r["ksize"], r["vsize"], bool(r["carried"])))
        elif kind == PART:
            b.next_offsets[r["part"]] = max(b.next_offsets.get(r["part"], 0), r["off"] + 1)
        else:
            raise ValueError(f"unknown partial row kind {kind!r}")
    b.orders.sort(key=lambda o: o.position)
    b.bad.sort(key=lambda x: (x.partition, x.offset))
    return b


def _bytes(v: Any) -> bytes | None:
    return None if v is None else bytes(v)


def parse_orders(df: DataFrame, applied: Mapping[int, int], max_ahead_ns: int, max_name_bytes: int = MAX_NAME_BYTES,
                 record_bytes: int = DEFAULT_RECORD_BYTES) -> OrderBatch:
    """Drop rows below the store's next offsets, then parse the rest in Spark."""
    from functools import partial

    from pyspark.sql import functions as F

    from service.spark.arrow_map import map_in_arrow
    from service.spark.session import collect_rows, unapplied

    columns = df.select("key", "value", "partition", "offset", F.unix_micros("timestamp").alias("ts_us"), "headers")
    fresh = unapplied(columns, applied)
    fn = partial(partial_orders, max_ahead_ns=max_ahead_ns, max_name_bytes=max_name_bytes, record_bytes=record_bytes)
    return merge_partials(collect_rows(map_in_arrow(fresh, fn, DDL)))
