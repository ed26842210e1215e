"""What the windows pipeline writes: closed windows as JSON, late events with their
window and the watermark in headers (pure)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import orjson

from restorer.changelog import OutputRecord
from service.windows.aggregate import RawRecord
from service.windows.state import WindowAgg
from service.windows.step import WindowResult
from topics.clock import iso_ns as iso
from topics.kafka import KafkaConnection
from topics.records import fit_record, read_at


def window_id(w: WindowAgg) -> str:
    return f"{w.kind}/{iso(w.start_ns)}/{iso(w.end_ns)}" + (f"/{w.key}" if w.key else "")


def result_record(topic: str, r: WindowResult, wm: int | None) -> OutputRecord:
    w = r.window
    doc: dict[str, object] = {"kind": w.kind, "start": iso(w.start_ns), "end": iso(w.end_ns)}
    if w.key is not None:
        doc["key"] = w.key
    doc.update({"count": w.count, "amount": w.amount_cents / 100, "late_accepted": w.late_accepted,
                "emit": r.emit, "watermark": iso(wm) if wm is not None else None})
    return OutputRecord(topic, window_id(w).encode(), orjson.dumps(doc))


def late_record(topic: str, raw: RawRecord, window: WindowAgg, wm: int | None,
                max_record_bytes: int = 1_000_000) -> OutputRecord:
    ours = [("window", window_id(window).encode()), ("watermark", (iso(wm) if wm is not None else "").encode())]
    headers = [*raw.headers, *ours]
    if sum(len(k) + len(v) for k, v in headers) > max_record_bytes // 4:
        headers = [*ours, ("headers-dropped", str(len(raw.headers)).encode())]  # too many to carry along
    key, value, headers = fit_record(raw.key, raw.value, headers, max_record_bytes, raw.key_size, raw.value_size)
    return OutputRecord(topic, key, value, headers)


def late_records(conn: KafkaConnection, topic: str, source_topic: str, late: Sequence[tuple[RawRecord, WindowAgg]],
                 wm: int | None, max_record_bytes: int) -> Iterator[OutputRecord]:
    """The late output of one batch, produced lazily; records whose bytes stayed on the
    executors are read back from the source topic, one at a time."""
    refs: dict[tuple[int, int], list[WindowAgg]] = {}
    for raw, window in late:
        if raw.carried:
            yield late_record(topic, raw, window, wm, max_record_bytes)
        else:
            refs.setdefault((raw.partition, raw.offset), []).append(window)
    for fetched in read_at(conn, source_topic, sorted(refs)):
        msg = fetched.message
        raw = (RawRecord(fetched.partition, fetched.offset, None, None, [("value-unavailable", b"1")])
               if msg is None else
               RawRecord(fetched.partition, fetched.offset, msg.key(), msg.value(),
                         [(str(k), v.encode() if isinstance(v, str) else (v or b""))
                          for k, v in list(msg.headers() or [])]))
        for window in refs[(fetched.partition, fetched.offset)]:
            yield late_record(topic, raw, window, wm, max_record_bytes)
