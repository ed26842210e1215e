"""Parse, assign and pre-aggregate one micro-batch of events inside Spark.

Every task judges its events against the watermark the batch started with (a constant
for the whole batch) and returns partial results: one row per window touched, per
in-batch session, per input partition and per table window, plus the records that
must travel whole: late ones (for the late topic), bad ones (for the DLQ) and the
members of sessions that may turn out to be late once merged with the store's. Those
travel cut to what an output record holds, and only as their position once the task's
budget is spent (``service.records.badrecords``); the driver reads such records back.
``partial_windows`` runs ``window_partials`` on the executors (which, for a small batch,
the driver runs itself over the rows the JVM carried to it: ``aggregate_events``),
``merge_window_partials`` on the driver.

Per-record code is total (DESIGN.md invariant 8): an unexpected exception in one event
makes it a bad record with the reason ``internal: <type>``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from service.records.badrecords import TASK_CARRY_BUDGET, BadRecord, CarryBudget, carry, internal_reason
from service.records.event_time import DEFAULT_MAX_AHEAD_NS
from service.records.limits import MAX_NAME_BYTES
from service.spark.carried import COLUMNS, Columns, carry_rows
from service.spark.ddl import arrow_schema, ddl_columns
from service.windows.assign import SESSION, Session, WindowSpec, assign, merge_sessions, sessionize
from service.windows.events import BadEvent, parse_event
from service.windows.watermark import closed, passed
from topics.event_time import EVENT_TIME

if TYPE_CHECKING:
    # Only the Python workers build Arrow batches: the driver windows the rows carried to
    # it from plain lists (``window_partials``), so its process never loads pyarrow.
    import pyarrow as pa
    from pyspark.sql import DataFrame

# Row kinds of the partial output.
WINDOW, SESS, CANDIDATE, LATE, PART, TABLE, BAD, META = "win", "sess", "cand", "late", "part", "tbl", "bad", "meta"

PARTIAL_DDL = ("kind string, part int, off long, start long, end long, name string, n long, amount long, "
               "late_acc long, aux long, rkey binary, value binary, headers binary, ksize long, vsize long, "
               "carried boolean")
PARTIAL_COLUMNS = ddl_columns(PARTIAL_DDL)
DEFAULT_RECORD_BYTES = 1_000_000


@dataclass(frozen=True)
class RawRecord:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    key_size: int | None = None  # original sizes, when key/value were cut on the way
    value_size: int | None = None
    carried: bool = True  # False: only the position travelled; read the record back


@dataclass
class WindowBatch:
    fixed: dict[tuple[int, int], list[int]] = field(default_factory=dict)  # (start, end) -> count, cents, late
    sessions: dict[str, list[Session]] = field(default_factory=dict)
    records: list[RawRecord] = field(default_factory=list)  # what session members point at
    late: list[tuple[RawRecord, int, int]] = field(default_factory=list)
    bad: list[BadRecord] = field(default_factory=list)
    max_event: dict[int, int] = field(default_factory=dict)
    next_offsets: dict[int, int] = field(default_factory=dict)
    table: dict[int, int] = field(default_factory=dict)
    total: int = 0
    no_header: int = 0

    @property
    def is_empty(self) -> bool:
        return not self.next_offsets


def partial_windows(batches: Iterable[pa.RecordBatch], spec: WindowSpec, wm_start: int | None,
                    table_ns: int, max_name_bytes: int = MAX_NAME_BYTES,
                    record_bytes: int = DEFAULT_RECORD_BYTES,
                    max_ahead_ns: int = DEFAULT_MAX_AHEAD_NS) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: ``window_partials`` over the Arrow batches a worker is handed."""
    import pyarrow as pa

    columns = ({name: batch.column(name).to_pylist() for name in COLUMNS} for batch in batches)
    out = window_partials(columns, spec, wm_start, table_ns, max_name_bytes, record_bytes, max_ahead_ns)
    yield pa.RecordBatch.from_pydict(out, schema=arrow_schema(PARTIAL_DDL))


def window_partials(columns: Iterable[Columns], spec: WindowSpec, wm_start: int | None,
                    table_ns: int, max_name_bytes: int = MAX_NAME_BYTES,
                    record_bytes: int = DEFAULT_RECORD_BYTES,
                    max_ahead_ns: int = DEFAULT_MAX_AHEAD_NS) -> Columns:
    """(key, value, partition, offset, ts_us, headers) columns in, partial rows' columns out.

    An event whose time runs more than ``max_ahead_ns`` ahead of its record's Kafka
    timestamp is a bad record (``events.ahead_fault``): it reaches the DLQ, and neither its
    partition's clock nor any window sees it."""
    out: Columns = {name: [] for name in PARTIAL_COLUMNS}
    budget = CarryBudget()
    held = CarryBudget(4 * TASK_CARRY_BUDGET)  # session events kept while their sessions are open

    def row(kind: str, **cols: Any) -> None:
        for name in PARTIAL_COLUMNS:
            out[name].append(kind if name == "kind" else cols.get(name))

    def whole(kind: str, key: bytes | None, value: bytes | None, headers: bytes | None, **cols: Any) -> None:
        """A row for a record that must reach an output whole: cut, or its position only."""
        ksize, vsize = len(key or b""), len(value or b"")
        key, value = carry(key, value, record_bytes)
        if headers is not None and len(headers) > record_bytes // 4:
            headers = None  # read back with the record, like its bytes
        carried = headers is not None and budget.take(key, value)
        if not carried:
            key = value = headers = None
        row(kind, rkey=key, value=value, headers=headers, ksize=ksize, vsize=vsize, carried=carried, **cols)

    fixed: dict[tuple[int, int], list[int]] = {}
    table: dict[int, int] = {}
    highest: dict[int, list[int]] = {}  # partition -> [max offset, max event ns]
    per_shop: dict[str, list[tuple[int, int, int]]] = {}
    raws: list[tuple[int, int, bytes | None, bytes | None, list[dict[str, Any]] | None]] = []
    total = no_header = 0
    for cols in columns:
        for i in range(len(cols["offset"])):
            p, o, value = cols["partition"][i], cols["offset"][i], cols["value"][i]
            headers = cols["headers"][i] or []
            total += 1
            top = highest.setdefault(p, [-1, -(1 << 62)])
            top[0] = max(top[0], o)
            try:
                stamps = [h["value"] for h in headers if h["key"] == EVENT_TIME]
                if stamps and stamps[0] is None:
                    raise BadEvent("event-time header is null")
                event_time = stamps[0] if stamps else None
                ts_us = cols["ts_us"][i]
                ev = parse_event(value, event_time, ts_us * 1000 if ts_us is not None else -1,
                                 max_name_bytes=max_name_bytes, max_ahead_ns=max_ahead_ns)
            except BadEvent as exc:
                whole(BAD, cols["key"][i], value, b"[]", part=p, off=o, name=str(exc))
                continue
            except Exception as exc:  # total per record: see the module docstring
                whole(BAD, cols["key"][i], value, b"[]", part=p, off=o, name=internal_reason(exc))
                continue
            no_header += not ev.has_header
            top[1] = max(top[1], ev.event_ns)
            t_start = ev.event_ns - ev.event_ns % table_ns
            table[t_start] = table.get(t_start, 0) + 1
            if spec.kind == SESSION:
                per_shop.setdefault(ev.shop_id, []).append((ev.event_ns, ev.amount_cents, len(raws)))
                # Kept in case the session turns out late; past the budget, its position only.
                key = cols["key"][i]
                raws.append((p, o, key, value, headers) if held.take(key, value) else (p, o, None, None, None))
                continue
            for start, end in assign(ev.event_ns, spec):
                if closed(end, spec.allowed_ns, wm_start):
                    whole(LATE, cols["key"][i], value, _headers_json(headers), part=p, off=o, start=start, end=end)
                    continue
                acc = fixed.setdefault((start, end), [0, 0, 0])
                acc[0] += 1
                acc[1] += ev.amount_cents
                acc[2] += passed(end, wm_start)

    for (start, end), (count, cents, late_acc) in fixed.items():
        row(WINDOW, start=start, end=end, n=count, amount=cents, late_acc=late_acc)
    for shop, events in per_shop.items():
        for s in sessionize(shop, events, spec.gap_ns):
            row(SESS, start=s.start_ns, end=s.end_ns, name=shop, n=s.count, amount=s.amount_cents)
            if closed(s.end_ns, spec.allowed_ns, wm_start):
                # Late unless the store holds an open session it merges with: only the
                # driver can tell, so the members travel along.
                for idx in s.members:
                    p, o, key, value, headers = raws[idx]
                    whole(CANDIDATE, key, value, None if headers is None else _headers_json(headers), part=p,
                          off=o, start=s.start_ns, name=shop)
    for p, (max_off, max_event) in highest.items():
        row(PART, part=p, off=max_off, aux=max_event)
    for start, count in table.items():
        row(TABLE, start=start, n=count)
    row(META, n=total, aux=no_header)
    return out


def _headers_json(headers: list[dict[str, Any]]) -> bytes:
    return orjson.dumps([[h["key"], (h["value"] or b"").hex()] for h in headers])


def _raw(row: Mapping[str, Any]) -> RawRecord:
    headers = [(k, bytes.fromhex(v)) for k, v in orjson.loads(row["headers"] or b"[]")]
    return RawRecord(row["part"], row["off"], _bytes(row["rkey"]), _bytes(row["value"]), headers,
                     row["ksize"], row["vsize"], bool(row["carried"]))


def _bytes(v: Any) -> bytes | None:
    return None if v is None else bytes(v)


def merge_window_partials(rows: Iterable[Mapping[str, Any]]) -> WindowBatch:
    b = WindowBatch()
    minis: list[Session] = []
    members: dict[tuple[str, int], list[int]] = {}
    for r in rows:
        kind = r["kind"]
        if kind == WINDOW:
            acc = b.fixed.setdefault((r["start"], r["end"]), [0, 0, 0])
            acc[0] += r["n"]
            acc[1] += r["amount"]
            acc[2] += r["late_acc"]
        elif kind == SESS:
            minis.append(Session(r["name"], r["start"], r["end"], r["n"], r["amount"]))
        elif kind == CANDIDATE:
            members.setdefault((r["name"], r["start"]), []).append(len(b.records))
            b.records.append(_raw(r))
        elif kind == LATE:
            b.late.append((_raw(r), r["start"], r["end"]))
        elif kind == PART:
            p = r["part"]
            b.next_offsets[p] = max(b.next_offsets.get(p, 0), r["off"] + 1)
            if r["aux"] > -(1 << 62):
                b.max_event[p] = max(b.max_event.get(p, r["aux"]), r["aux"])
        elif kind == TABLE:
            b.table[r["start"]] = b.table.get(r["start"], 0) + r["n"]
        elif kind == BAD:
            b.bad.append(BadRecord(r["part"], r["off"], _bytes(r["rkey"]), _bytes(r["value"]), r["name"],
                                   r["ksize"], r["vsize"], bool(r["carried"])))
        elif kind == META:
            b.total += r["n"]
            b.no_header += r["aux"]
        else:
            raise ValueError(f"unknown partial row kind {kind!r}")
    for m in minis:
        m.members = members.get((m.key, m.start_ns), [])
        b.sessions.setdefault(m.key, []).append(m)
    # A shop's events normally sit in one input partition, hence one task; merging
    # covers the case where they do not.
    b.sessions = {shop: merge_sessions(ss) for shop, ss in b.sessions.items()}
    b.late.sort(key=lambda x: (x[0].partition, x[0].offset, x[1]))
    b.bad.sort(key=lambda x: (x.partition, x.offset))
    return b


# A batch spanning at most this many offsets (as Spark planned it) is windowed by the
# driver's Python, from its rows carried to it in one JVM stage (``carry_rows``): the
# Python workers' round trip (a worker per task, the function pickled to it, Arrow streams
# both ways) is most of a small batch's time, and a window's result waits for the batch
# that closes it. A task meeting a row over DRIVER_ROW_BYTES, or over DRIVER_TASK_BYTES of
# rows, sends the whole batch the workers' way instead.
DRIVER_BATCH_OFFSETS = 5_000
DRIVER_ROW_BYTES = 16 * 1024
DRIVER_TASK_BYTES = 16 * 1024 * 1024


def aggregate_events(df: DataFrame, applied: Mapping[int, int], spec: WindowSpec, wm_start: int | None,
                     table_ns: int, max_name_bytes: int = MAX_NAME_BYTES,
                     record_bytes: int = DEFAULT_RECORD_BYTES,
                     max_ahead_ns: int = DEFAULT_MAX_AHEAD_NS, planned_offsets: int | None = None) -> WindowBatch:
    """Drop rows below the store's next offsets, then window the rest: by the driver for a
    small batch (DRIVER_BATCH_OFFSETS, above), by Spark's Python workers otherwise (or when
    the checkpoint cannot tell its size). Either way ``partial_windows`` judges every row
    once, and ``merge_window_partials`` folds its partial rows."""
    from functools import partial

    from pyspark.sql import functions as F

    from service.spark.arrow_map import map_in_arrow
    from service.spark.session import collect_rows, unapplied

    fresh = unapplied(df, applied)
    settings: dict[str, Any] = {"spec": spec, "wm_start": wm_start, "table_ns": table_ns,
                                "max_name_bytes": max_name_bytes, "record_bytes": record_bytes,
                                "max_ahead_ns": max_ahead_ns}
    if planned_offsets is not None and planned_offsets <= DRIVER_BATCH_OFFSETS:
        rows = carry_rows(fresh, DRIVER_ROW_BYTES, DRIVER_TASK_BYTES)  # picks its columns in the JVM
        if rows is not None:
            out = window_partials([rows], **settings)
            return merge_window_partials(dict(zip(out, values, strict=True))
                                         for values in zip(*out.values(), strict=True))
    fn = partial(partial_windows, **settings)
    columns = fresh.select("key", "value", "partition", "offset", F.unix_micros("timestamp").alias("ts_us"),
                           "headers")
    return merge_window_partials(collect_rows(map_in_arrow(columns, fn, PARTIAL_DDL)))
