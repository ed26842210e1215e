"""The pure window state machine driven batch by batch, for unit tests: a ``Pipeline`` of
steps over Arrow batches, and times of day as unix nanoseconds (``at``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pyarrow as pa

from service.windows.aggregate import merge_window_partials, partial_windows
from service.windows.state import decode_windows_state
from service.windows.step import WindowResult, WindowsConfig, step, watermark_at
from topics.event_time import encode_event_time

MIN = 60 * 10**9


T = "events"


INPUT = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("partition", pa.int32()), ("offset", pa.int64()),
                   ("ts_us", pa.int64()),
                   ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))])


def at(hhmm: str) -> int:
    h, m = map(int, hhmm.split(":"))
    return int(datetime(2026, 11, 22, h, m, tzinfo=UTC).timestamp()) * 10**9


class Pipeline:
    """An in-memory store plus the real pure functions, one batch per call."""

    def __init__(self, cfg: WindowsConfig) -> None:
        self.cfg = cfg
        self.store: dict[bytes, bytes] = {}
        self.offset = 0
        self.results: list[WindowResult] = []
        self.late: list[tuple[str, int]] = []
        self.bad: list[tuple[int, str]] = []  # (offset, reason)
        self.now_ms = 0

    def batch(self, *events: tuple[str, int, int] | tuple[str, int, int, int | None],
              now_ms: int | None = None) -> None:
        """events: (shop, event_ns, partition[, Kafka timestamp in ns; by default the event time's])"""
        self.now_ms = now_ms if now_ms is not None else self.now_ms + 1000
        state = decode_windows_state(self.store.items())
        wm_start = watermark_at(state, self.now_ms, self.cfg)
        rows = []
        for shop, t, p, *stamp in events:
            value = json.dumps({"shop_id": shop, "drink": "latte", "amount": 1.25}).encode()
            headers = [{"key": "event-time", "value": encode_event_time(t)}]
            ts_ns = stamp[0] if stamp else t
            rows.append((shop.encode(), value, p, self.offset, None if ts_ns is None else ts_ns // 1000, headers))
            self.offset += 1
        cols = list(zip(*rows, strict=True)) if rows else [[] for _ in INPUT]
        arrow = pa.RecordBatch.from_arrays([pa.array(c, f.type) for c, f in zip(cols, INPUT, strict=True)],
                                           schema=INPUT)
        partials = [r for b in partial_windows(iter([arrow]), self.cfg.spec, wm_start, self.cfg.table_ns,
                                               max_ahead_ns=self.cfg.max_ahead_ns)
                    for r in b.to_pylist()]
        self.bad += [(r["off"], r["name"]) for r in partials if r["kind"] == "bad"]
        result = step(state, merge_window_partials(partials), wm_start, self.now_ms, self.cfg, T)
        for k, v in result.entries:
            if v is None:
                self.store.pop(k, None)
            else:
                self.store[k] = v
        self.results += result.results
        self.late += [(w.key or "", raw.offset) for raw, w in result.late]

    def state(self):  # type: ignore[no-untyped-def]
        return decode_windows_state(self.store.items())
