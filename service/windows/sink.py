"""The windows foreachBatch sink: the drink-count order of commits, for window state.

    1. keep only rows at or above the next offsets the store has applied
    2. in Spark: parse, judge against the watermark the batch started with, pre-aggregate
    3. fold into the store's windows, advance the watermark, pick what closes (pure step)
    4. one Kafka transaction: state changes, tombstones of final windows, the window
       results, the late events and the DLQ records, with the commit markers
    5. one synced RocksDB WriteBatch with the same entries; return, Spark checkpoints

Results are produced inside the transaction that deletes their window, so a final
result is visible exactly once to read_committed consumers, whatever crashes.
"""

from __future__ import annotations

import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING

from restorer.changelog import ChangelogWriter
from restorer.codec import encode_u64, meta_key
from restorer.faults import FaultPlan
from restorer.store import Store
from service.dlq.records import dlq_records
from service.engine.sink import OrderedCommitSink, PhaseTimes, SinkOptions
from service.windows.aggregate import WindowBatch, aggregate_events
from service.windows.output import late_records, result_record
from service.windows.state import SPEC, WindowsState, decode_windows_state
from service.windows.step import StepResult, WindowsConfig, step, watermark_at
from topics.catalog import Topics
from topics.errors import BrewError, one_line
from topics.kafka import KafkaConnection

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass(frozen=True)
class WindowsReport:
    batch_id: int | None  # None: a step without input, closing windows of a quiet stream
    seq: int
    events: int
    late: int
    bad_reasons: dict[str, int]
    results: dict[str, int]  # by emit kind
    watermark: int | None
    open_windows: int
    changelog_records: int
    times: PhaseTimes


def _now_ms() -> int:
    return int(time.time() * 1000)


def shape_fingerprint(cfg: WindowsConfig) -> int:
    spec = cfg.spec
    return zlib.crc32(f"{spec.kind}/{spec.size_ns}/{spec.hop_ns}/{spec.gap_ns}/{cfg.table_ns}".encode())


def check_shape(store: Store, cfg: WindowsConfig) -> int:
    """The fingerprint of the windows ``cfg`` asks for; BrewError when the store holds others."""
    fingerprint = shape_fingerprint(cfg)
    stored = decode_windows_state(store.items()).reserved.meta.get(SPEC)
    if stored is not None and stored != fingerprint:
        raise BrewError(f"the state dir {store.path.parent} holds windows of another shape; use the --window, "
                        "--hop and --session-gap it was built with, or another --state-dir")
    return fingerprint


class WindowsSink(OrderedCommitSink):
    def __init__(self, store: Store, changelog: ChangelogWriter, topics: Topics, cfg: WindowsConfig,
                 faults: FaultPlan, clock_ms: Callable[[], int] = _now_ms,
                 on_batch: Callable[[WindowsReport], None] | None = None, options: SinkOptions | None = None) -> None:
        super().__init__(store, changelog, faults, options)
        self.opts = options or SinkOptions(KafkaConnection())
        self.topics, self.cfg, self.clock_ms, self.on_batch = topics, cfg, clock_ms, on_batch
        self._fingerprint = check_shape(store, cfg)

    def tick(self) -> None:
        """Advance the watermark on processing time alone (idle partitions) and close windows.
        A failure here stops the sink like a failed batch (the runner reports it)."""
        with self._lock:
            if self._closed:
                return
            try:
                now = self.clock_ms()
                state = self._state()
                wm = watermark_at(state, now, self.cfg)
                if wm != state.watermark_ns:
                    self._publish(state, step(state, WindowBatch(), wm, now, self.cfg, self.topics.events),
                                  WindowBatch(), None, 0.0)
            except Exception as exc:
                self._failed(exc if isinstance(exc, BrewError) else BrewError(
                    f"closing windows failed: {one_line(exc)}"))

    def _state(self) -> WindowsState:
        return decode_windows_state(self.store.items())

    def _apply(self, df: DataFrame, batch_id: int) -> None:
        t0 = time.monotonic()
        now = self.clock_ms()
        state = self._state()
        wm_start = watermark_at(state, now, self.cfg)
        # 1. + 2. Only what the store has not applied, judged against the batch-start watermark.
        applied = state.reserved.next_offsets(self.topics.events)
        planned = self.planned(batch_id, self.topics.events)
        batch = aggregate_events(df, planned.replay_filter(applied), self.cfg.spec, wm_start, self.cfg.table_ns,
                                 self.opts.max_name_bytes, self.opts.dlq_record_bytes, self.cfg.max_ahead_ns,
                                 planned.offsets)
        batch.next_offsets = planned.ends(batch.next_offsets, applied)
        if batch.is_empty:
            return
        # 3. The pure step: fold, advance the watermark, close.
        result = step(state, batch, wm_start, now, self.cfg, self.topics.events)
        self._publish(state, result, batch, batch_id, time.monotonic() - t0)

    def _publish(self, state: WindowsState, result: StepResult, batch: WindowBatch, batch_id: int | None,
                 aggregate_s: float) -> None:
        entries = list(result.entries)
        if state.reserved.meta.get(SPEC) is None:
            entries.append((meta_key(SPEC), encode_u64(self._fingerprint)))
        t, conn, limit = self.topics, self.opts.conn, self.opts.dlq_record_bytes
        outputs = chain((result_record(t.windows, r, result.watermark) for r in result.results),
                        late_records(conn, t.late_events, t.events, result.late, result.watermark, limit),
                        dlq_records(conn, t.dlq, t.events, batch.bad, limit))

        # 4. + 5. State, results, late events and bad input in one transaction, then the
        # store; returning lets Spark commit its checkpoint.
        entries, times = self._commit(entries, outputs, aggregate_s)
        if self.on_batch is not None:
            self.on_batch(WindowsReport(
                batch_id, self.seq, batch.total, len(result.late), Counter(b.reason for b in batch.bad),
                Counter(r.emit for r in result.results), result.watermark, result.open_windows, len(entries),
                times))
