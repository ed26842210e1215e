"""Parse and count one micro-batch of orders inside Spark.

Most orders never reach Python: the JVM counts those its order gate proves clean, in one
stage (``GateCount``, service/drink_count/jvm/), and carries the few it cannot prove clean
to the driver, where ``count_rows`` counts them or gives their DLQ reasons. Only a
batch whose unclean rows exceed a task's carry budget sends those rows to the Python
workers instead, where each Spark task runs ``partial_counts`` over its share and only a
handful of rows per task cross to the driver: one per drink, one per input partition for
its highest offset, one for the number of good orders, and the bad orders (cut to what the
DLQ holds, or only their position once the task's budget is spent: see
``service.records.badrecords``). Both count with one ``Tally``; it and ``merge_partials``
are pure and tested without Spark.

Per-record code is total (DESIGN.md invariant 8): whatever a record holds, it is
counted or becomes a bad record with a reason; an unexpected exception in one record is
the reason ``internal: <type>``, never a failed batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from service.records.badrecords import TASK_CARRY_BUDGET, BadRecord, CarryBudget, carry, internal_reason
from service.records.limits import MAX_NAME_BYTES
from service.records.orders import BadOrder, count_drinks, count_plain
from service.spark.blob import BlobReader, handed_over
from service.spark.ddl import arrow_schema, ddl_columns

if TYPE_CHECKING:
    # Only the Python workers build Arrow batches: the driver counts the gate's carried rows
    # from plain lists (``count_rows``), so a daemon's driver never loads pyarrow and numpy,
    # whose memory and import time it would pay for nothing.
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

# Row kinds of the partial output: BAD carries the record's (cut) bytes, REF only its position;
# LARGE counts the records a first pass left to the second (see ``aggregate_batch``).
DRINK, ORDERS, OFFSET, BAD, REF, LARGE = "drink", "orders", "offset", "bad", "ref", "large"

# The partial rows' columns: n is a quantity, an order count, the highest offset seen or a
# bad value's size; name a drink or a bad order's reason; ksize a bad record's key size.
PARTIAL_DDL = ("kind string, name string, n long, partition int, offset long, "
               "key binary, value binary, ksize long")
PARTIAL_COLUMNS = ddl_columns(PARTIAL_DDL)
DEFAULT_DLQ_RECORD_BYTES = 1_000_000


@dataclass
class BatchAggregate:
    deltas: dict[str, int] = field(default_factory=dict)
    # The same deltas per input partition, when counted by partition (a shuffle's input
    # stage), and the good orders of each.
    partition_deltas: dict[int, dict[str, int]] = field(default_factory=dict)
    partition_orders: dict[int, int] = field(default_factory=dict)
    good_orders: int = 0
    bad: list[BadRecord] = field(default_factory=list)
    next_offsets: dict[int, int] = field(default_factory=dict)  # partition -> highest offset + 1
    large: int = 0  # records left uncounted for the second pass (see aggregate_batch)

    @property
    def is_empty(self) -> bool:
        return not self.next_offsets


@dataclass(frozen=True)
class OrderRows:
    """(key, value, partition, offset) rows as Python lists, as a ``Tally`` reads them;
    ``marks``: the rows a first pass left for later (their key and value did not travel).
    ``key_at`` reads one row's key: only a bad record needs its key, so an Arrow batch's keys
    are never all converted."""

    values: Sequence[bytes | None]
    partitions: Sequence[int]
    offsets: Sequence[int]
    key_at: Callable[[int], bytes | None]
    marks: Sequence[bool] | None = None

    def by_partition(self) -> Iterator[tuple[int, OrderRows]]:
        """These rows per input partition (a Kafka source's task reads one: no copy then)."""
        partitions = self.partitions
        if partitions.count(partitions[0]) == len(partitions):
            yield partitions[0], self
            return
        at: dict[int, list[int]] = {}
        for i, p in enumerate(partitions):
            at.setdefault(p, []).append(i)
        for p, idx in at.items():
            marks = self.marks
            yield p, OrderRows([self.values[i] for i in idx], [p] * len(idx), [self.offsets[i] for i in idx],
                               partial(_key_at, self.key_at, idx),
                               None if marks is None else [marks[i] for i in idx])

    @classmethod
    def of_arrow(cls, batch: pa.RecordBatch) -> OrderRows:
        keys = batch.column("key")
        return cls(batch.column("value").to_pylist(), batch.column("partition").to_pylist(),
                   batch.column("offset").to_pylist(), lambda i: keys[i].as_py(),
                   batch.column(LARGE).to_pylist() if LARGE in batch.schema.names else None)


def _key_at(key_at: Callable[[int], bytes | None], idx: Sequence[int], j: int) -> bytes | None:
    return key_at(idx[j])


class Tally:
    """The partial counts of one task's rows, fed in turn (``add``), read as partial rows;
    ``by_partition``: the drinks' sums kept apart per input partition."""

    def __init__(self, max_name_bytes: int, dlq_record_bytes: int, by_partition: bool = False) -> None:
        self.max_name_bytes, self.dlq_record_bytes = max_name_bytes, dlq_record_bytes
        self.by_partition = by_partition
        self.groups: dict[int | None, dict[str, int]] = {}  # input partition (None: all) -> drink -> sum
        self.good: dict[int | None, int] = {}  # input partition (None: all) -> good orders
        self.large = 0
        self.highest: dict[int, int] = {}
        self.bad: list[BadRecord] = []
        self.budget = CarryBudget()

    def add(self, rows: OrderRows) -> None:
        if not rows.values:
            return
        track_highest(rows.partitions, rows.offsets, self.highest)
        if not self.by_partition:
            self._add(rows, None)
            return
        for p, part in rows.by_partition():
            self._add(part, p)

    def _add(self, rows: OrderRows, group: int | None) -> None:
        totals = self.groups.setdefault(group, {})
        # The clean majority on a shorter path that counts only what count_drinks
        # counts, and the same (tests/unit/service/records/test_orders.py checks both on any bytes);
        # the rest, marked rows among them (their value did not travel), below.
        counted, rest = count_plain(rows.values, self.max_name_bytes, totals)
        good = counted
        for i in rest:
            if rows.marks is not None and rows.marks[i]:
                self.large += 1
                continue
            raw = rows.values[i]
            try:
                drinks = count_drinks(raw, max_name_bytes=self.max_name_bytes)
            except BadOrder as exc:
                self.bad.append(self._bad(rows, i, str(exc)))
                continue
            except Exception as exc:  # total per record: see the module docstring
                self.bad.append(self._bad(rows, i, internal_reason(exc)))
                continue
            good += 1
            for drink, qty in drinks.items():
                totals[drink] = totals.get(drink, 0) + qty
        if good:
            self.good[group] = self.good.get(group, 0) + good

    def _bad(self, rows: OrderRows, i: int, reason: str) -> BadRecord:
        key, raw = rows.key_at(i), rows.values[i]
        key_size, value_size = len(key or b""), len(raw or b"")
        cut_key, cut_value = carry(key, raw, self.dlq_record_bytes)
        p, o = rows.partitions[i], rows.offsets[i]
        if self.budget.take(cut_key, cut_value):
            return BadRecord(p, o, cut_key, cut_value, reason, key_size, value_size)
        return BadRecord(p, o, None, None, reason, key_size, value_size, carried=False)

    def rows(self) -> list[dict[str, Any]]:
        """The partial rows, as ``merge_partials`` reads them."""
        out = [partial_row(DRINK, name=drink, n=qty, partition=p) for p, totals in self.groups.items()
               for drink, qty in totals.items()]
        out += [partial_row(ORDERS, n=n, partition=p) for p, n in self.good.items()]
        if self.large:
            out.append(partial_row(LARGE, n=self.large))
        out += [partial_row(OFFSET, n=top, partition=p) for p, top in self.highest.items()]
        out += [partial_row(BAD if b.carried else REF, name=b.reason, n=b.value_size, partition=b.partition,
                            offset=b.offset, key=b.key, value=b.value, ksize=b.key_size) for b in self.bad]
        return out


def partial_counts(batches: Iterable[pa.RecordBatch], max_name_bytes: int = MAX_NAME_BYTES,
                   dlq_record_bytes: int = DEFAULT_DLQ_RECORD_BYTES,
                   by_partition: bool = False) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: (key, value, partition, offset) rows in, one partial batch out. With
    a ``large`` column, the rows it marks are only counted as left for later (their key and
    value did not travel) and their offsets tracked."""
    import pyarrow as pa

    tally = Tally(max_name_bytes, dlq_record_bytes, by_partition)
    for batch in batches:
        if batch.num_rows:
            tally.add(OrderRows.of_arrow(batch))
    rows = tally.rows()
    columns = {c: [row[c] for row in rows] for c in PARTIAL_COLUMNS}
    yield pa.RecordBatch.from_pydict(columns, schema=arrow_schema(PARTIAL_DDL))


def count_rows(rows: OrderRows, max_name_bytes: int = MAX_NAME_BYTES,
               dlq_record_bytes: int = DEFAULT_DLQ_RECORD_BYTES, by_partition: bool = False) -> list[dict[str, Any]]:
    """``partial_counts`` of rows already in Python (the gate's carried rows, on the driver):
    the same partial rows, without Arrow."""
    tally = Tally(max_name_bytes, dlq_record_bytes, by_partition)
    tally.add(rows)
    return tally.rows()


def track_highest(partitions: Sequence[int], offsets: Sequence[int], highest: dict[int, int]) -> None:
    """The highest offset per partition of these rows, folded into ``highest``."""
    if partitions.count(partitions[0]) == len(partitions):
        # A Kafka task reads one partition: one max() in C instead of a loop in Python.
        top = max(offsets)
        if top > highest.get(partitions[0], -1):
            highest[partitions[0]] = top
        return
    # A plain loop: pyarrow.compute would import pandas into every Python worker, which
    # costs seconds of start-up for nothing.
    for p, o in zip(partitions, offsets, strict=True):
        if o > highest.get(p, -1):
            highest[p] = o


def merge_partials(rows: Iterable[Mapping[str, Any]]) -> BatchAggregate:
    """Combine the partial rows of every task into one batch aggregate."""
    agg = BatchAggregate()
    for row in rows:
        kind = row["kind"]
        if kind == DRINK:
            agg.deltas[row["name"]] = agg.deltas.get(row["name"], 0) + row["n"]
            if row["partition"] is not None:
                of = agg.partition_deltas.setdefault(row["partition"], {})
                of[row["name"]] = of.get(row["name"], 0) + row["n"]
        elif kind == ORDERS:
            agg.good_orders += row["n"]
            if row["partition"] is not None:
                agg.partition_orders[row["partition"]] = agg.partition_orders.get(row["partition"], 0) + row["n"]
        elif kind == LARGE:
            agg.large += row["n"]
        elif kind == OFFSET:
            p = row["partition"]
            agg.next_offsets[p] = max(agg.next_offsets.get(p, 0), row["n"] + 1)
        elif kind in (BAD, REF):
            agg.bad.append(BadRecord(row["partition"], row["offset"], _bytes(row["key"]), _bytes(row["value"]),
                                     row["name"], row["ksize"], row["n"], carried=kind == BAD))
        else:
            raise ValueError(f"unknown partial row kind {kind!r}")
    agg.bad.sort(key=lambda b: (b.partition, b.offset))
    return agg


def _bytes(v: Any) -> bytes | None:
    return None if v is None else bytes(v)


def aggregate_batch(df: DataFrame, applied: Mapping[int, int], max_name_bytes: int = MAX_NAME_BYTES,
                    dlq_record_bytes: int = DEFAULT_DLQ_RECORD_BYTES, carry: Carry | None = None,
                    by_partition: bool = False) -> BatchAggregate:
    """Drop rows below the store's next offsets, then count the rest, each row in exactly
    one of two steps; ``by_partition``: each input partition's deltas apart too
    (``partition_deltas``), as a shuffle's input stage hands them on.

    First the JVM counts the orders the order gate proves clean (``OrderGate``, in
    service/drink_count/jvm/: a subset of what ``count_drinks`` accepts, counted the same),
    which are nearly all of them, without sending a row to Python, where decoding took
    about two fifths of a warm batch's CPU (docs/performance-notes.md). The rows it did not prove
    clean are counted by a ``Tally``: here on the driver, from what the JVM carried,
    or, when a task had more than it may carry (``carry``), by the Python workers
    (``_count_in_python``)."""
    from service.spark.session import unapplied

    fresh = unapplied(df, applied)
    counted = _count_in_jvm(fresh, max_name_bytes, carry or Carry(), by_partition)  # picks its columns in the JVM
    if not counted.unclean:
        return _checked(merge_partials(counted.partials()), by_partition)
    if counted.overflow:
        gate = order_gate(df.sparkSession, max_name_bytes)
        rows = fresh.select("key", "value", "partition", "offset")
        rest = _count_in_python(rows.where(gate.isNull()), max_name_bytes, dlq_record_bytes, by_partition)
    else:
        rest = count_rows(counted.carried, max_name_bytes, dlq_record_bytes, by_partition)
    if (took := records_counted(rest)) != counted.unclean:
        raise RuntimeError(f"Python counted {took} records of the {counted.unclean} the order gate left to it")
    return _checked(merge_partials([*counted.partials(), *rest]), by_partition)


def _checked(agg: BatchAggregate, by_partition: bool) -> BatchAggregate:
    """Counted by partition, every delta is some partition's: a drink counted without its
    partition would never reach its task."""
    if by_partition:
        summed: dict[str, int] = {}
        for deltas in agg.partition_deltas.values():
            for drink, n in deltas.items():
                summed[drink] = summed.get(drink, 0) + n
        if summed != agg.deltas or sum(agg.partition_orders.values()) != agg.good_orders:
            raise RuntimeError("a batch counted by partition has deltas or orders no partition holds")
    return agg


# Built by `make install` from service/drink_count/jvm/brewstream/.
GATE_FUNCTION, GATE_CLASS = "brew_order_gate", "brewstream.OrderGate"


def order_gate(spark: SparkSession, max_name_bytes: int) -> Column:
    """The gate's verdict on ``value``: drink -> quantity, or null for a row it cannot prove
    clean. Registered the first time a session asks for it (Spark warns on stderr at every
    registration that replaces one), so any session can count."""
    from pyspark.sql import functions as F

    if not spark.catalog.functionExists(GATE_FUNCTION):
        spark.udf.registerJavaFunction(GATE_FUNCTION, GATE_CLASS, "map<string,bigint>")
    return F.call_function(GATE_FUNCTION, F.col("value"), F.lit(max_name_bytes))


@dataclass(frozen=True)
class Carry:
    """How many rows the gate left, and of how many bytes (key and value), one task may
    carry to the driver; past either, the batch's unclean rows go to the Python workers.
    The bytes are the bad-record budget of a worker's task (``badrecords.TASK_CARRY_BUDGET``)."""

    rows: int = 100_000
    bytes: int = TASK_CARRY_BUDGET


@dataclass
class JvmCount:
    """What ``GateCount`` returned: the gate's sums, each partition's highest offset, and
    the unclean rows it carried (none when some task could not carry its own)."""

    counts: dict[int | None, dict[str, int]]  # input partition (None: all) -> drink -> sum
    group_orders: dict[int | None, int]  # input partition (None: all) -> clean orders
    orders: int
    unclean: int
    overflow: bool
    highest: dict[int, int]
    carried: OrderRows

    def partials(self) -> list[dict[str, Any]]:
        """The partial rows of what the gate counted, and every partition's highest offset."""
        rows = [partial_row(DRINK, name=drink, n=n, partition=p) for p, counts in self.counts.items()
                for drink, n in counts.items()]
        rows += [partial_row(ORDERS, n=n, partition=p) for p, n in self.group_orders.items()]
        rows += [partial_row(OFFSET, n=top, partition=p) for p, top in self.highest.items()]
        return rows


def read_gate_count(blob: bytes) -> JvmCount:
    """``GateCount``'s blob (its layout is in GateCount.java); ``ValueError`` for one that
    does not follow it, to its last byte."""
    r = BlobReader(blob, "the gate's count")
    orders, unclean, overflow = r.unpack(">qqb")
    counts: dict[int | None, dict[str, int]] = {}
    group_orders: dict[int | None, int] = {}
    for _ in range(r.count()):
        group, group_clean = r.unpack(">iq")
        if group < -1 or group_clean < 0:
            raise ValueError(f"the gate's count names partition {group} with {group_clean} orders")
        key = None if group == -1 else group
        group_orders[key] = group_orders.get(key, 0) + group_clean
        sums = counts.setdefault(key, {})
        for _ in range(r.count()):
            name = r.take(r.count()).decode("latin-1")  # the gate's names are ASCII
            sums[name] = sums.get(name, 0) + r.unpack(">q")[0]
    highest = {}
    for _ in range(r.count()):
        p, top = r.unpack(">iq")
        highest[p] = top
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    partitions: list[int] = []
    offsets: list[int] = []
    for _ in range(r.count()):
        p, offset = r.unpack(">iq")
        partitions.append(p)
        offsets.append(offset)
        keys.append(r.optional())
        values.append(r.optional())
    r.done()
    if overflow not in (0, 1) or orders < 0 or unclean < 0 or sum(group_orders.values()) != orders:
        raise ValueError("the gate's count is out of range")
    return JvmCount(counts, group_orders, orders, unclean, bool(overflow), highest,
                    OrderRows(values, partitions, offsets, keys.__getitem__))


def _count_in_jvm(fresh: DataFrame, max_name_bytes: int, carry: Carry, by_partition: bool) -> JvmCount:
    """``GateCount`` over the batch: one stage, one call."""
    jvm = fresh.sparkSession.sparkContext._jvm
    assert jvm is not None  # a classic session, which brewstream always builds
    gate = jvm.brewstream.GateCount
    return read_gate_count(handed_over(lambda path: gate.count(fresh._jdf, max_name_bytes, carry.rows, carry.bytes,
                                                               by_partition, path), "the gate's count"))


def records_counted(rows: Iterable[Mapping[str, Any]]) -> int:
    """How many records partial rows account for: good orders and bad records (what
    ``merge_partials`` makes of them, without building the bad records)."""
    return sum(row["n"] if row["kind"] == ORDERS else row["kind"] in (BAD, REF) for row in rows)


def partial_row(kind: str, **fields: Any) -> dict[str, Any]:
    """One partial row as ``merge_partials`` reads it, the columns not given null."""
    return {**dict.fromkeys(PARTIAL_COLUMNS), **fields, "kind": kind}


def _count_in_python(rows: DataFrame, max_name_bytes: int, dlq_record_bytes: int,
                     by_partition: bool = False) -> list[dict[str, Any]]:
    """The partial rows of ``partial_counts`` over ``rows`` in the Python workers.

    Rows reach the Python workers as Arrow batches, which Spark cuts at
    ``maxRecordsPerBatch`` rows and, because a record can be as big as Kafka allows,
    at ``maxBytesPerBatch`` bytes (brewstream's default: 32 MiB). The byte bound costs:
    Spark measures the Arrow batch after every row, about a quarter of the JVM's CPU for
    small orders (docs/performance-notes.md). So the first pass sends whole only the rows whose key
    and value fit ``maxBytesPerBatch / maxRecordsPerBatch`` bytes (3,355 by default),
    which keeps every batch within the bound without measuring it, and marks the others
    ``large``; only when there are any, a second pass counts exactly those, measured.
    Each row is counted by exactly one pass."""
    from pyspark.sql import functions as F

    fn = partial(partial_counts, max_name_bytes=max_name_bytes, dlq_record_bytes=dlq_record_bytes,
                 by_partition=by_partition)
    conf = rows.sparkSession.conf
    bound = conf.get(MAX_BYTES_KEY, None)
    row_bytes = small_row_bytes(bound, conf.get(MAX_RECORDS_KEY, None))
    if row_bytes is None or bound is None:
        return _partials(rows, fn)
    size = F.coalesce(F.length("key"), F.lit(0)) + F.coalesce(F.length("value"), F.lit(0))
    large = size > row_bytes
    marked = rows.select(F.when(~large, F.col("key")).alias("key"), F.when(~large, F.col("value")).alias("value"),
                         "partition", "offset", large.alias(LARGE))
    with _session_conf(rows, MAX_BYTES_KEY, str(UNBOUNDED_BYTES)):
        first = _partials(marked, fn)
    left = sum(row["n"] for row in first if row["kind"] == LARGE)
    if not left:
        return first
    second = _partials(rows.where(large), fn)
    if (took := records_counted(second)) != left:
        raise RuntimeError(f"the second pass counted {took} large records of the {left} the first left to it")
    return [*first, *second]  # the partial rows of both passes, as if one


@contextmanager
def _session_conf(df: DataFrame, key: str, value: str) -> Iterator[None]:
    """``key`` set to ``value`` for the jobs planned inside, then back to what it was."""
    conf = df.sparkSession.conf
    before = conf.get(key, None)
    conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            conf.unset(key)
        else:
            conf.set(key, before)


MAX_BYTES_KEY = "spark.sql.execution.arrow.maxBytesPerBatch"
MAX_RECORDS_KEY = "spark.sql.execution.arrow.maxRecordsPerBatch"
UNBOUNDED_BYTES = 2**31 - 1  # Spark's "no byte bound": it then skips measuring each row


def small_row_bytes(max_bytes: str | None, max_records: str | None) -> int | None:
    """The size of key plus value up to which rows go unmeasured, or None when the byte
    bound is off or the record bound is (then there is nothing to gain, or no way to)."""
    try:
        bound, records = int(max_bytes or UNBOUNDED_BYTES), int(max_records or 10_000)
    except ValueError:
        return None
    if bound >= UNBOUNDED_BYTES or bound <= 0 or records <= 0:
        return None
    return max(1, bound // records)


def _partials(rows: DataFrame, fn: Any) -> list[dict[str, Any]]:
    from service.spark.arrow_map import map_in_arrow
    from service.spark.session import collect_rows

    return list(collect_rows(map_in_arrow(rows, fn, PARTIAL_DDL)))
