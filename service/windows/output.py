"""What the windows pipeline writes: closed windows as JSON, late events with their
window and the watermark in headers (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson

from service.changelog import OutputRecord
from service.windows.aggregate import RawRecord
from service.windows.state import WindowAgg
from service.windows.step import WindowResult


def iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


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


def late_record(topic: str, raw: RawRecord, window: WindowAgg, wm: int | None) -> OutputRecord:
    headers = [*raw.headers, ("window", window_id(window).encode()),
               ("watermark", (iso(wm) if wm is not None else "").encode())]
    return OutputRecord(topic, raw.key, raw.value, headers)
