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

import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from service.changelog import ChangelogWriter, dlq_records
from service.codec import LAST_BATCH_MS, commit_prefix, decode_entries, encode_u64, meta_key, position_key
from service.errors import BrewError, SinkClosed
from service.faults import FaultPlan
from service.store import Store
from service.windows.aggregate import WindowBatch, aggregate_events
from service.windows.output import late_record, result_record
from service.windows.state import SPEC, WindowsState, decode_windows_state
from service.windows.step import StepResult, WindowsConfig, step, watermark_at
from topics.catalog import Topics

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
    aggregate_s: float
    changelog_s: float
    store_s: float


def _now_ms() -> int:
    return int(time.time() * 1000)


class WindowsSink:
    def __init__(self, store: Store, changelog: ChangelogWriter, topics: Topics, cfg: WindowsConfig,
                 faults: FaultPlan, clock_ms: Callable[[], int] = _now_ms,
                 on_batch: Callable[[WindowsReport], None] | None = None) -> None:
        self.store, self.changelog, self.topics, self.cfg = store, changelog, topics, cfg
        self.faults, self.clock_ms, self.on_batch = faults, clock_ms, on_batch
        spec = cfg.spec
        shape = f"{spec.kind}/{spec.size_ns}/{spec.hop_ns}/{spec.gap_ns}/{cfg.table_ns}"
        self._fingerprint = zlib.crc32(shape.encode())
        stored = self._state().reserved.meta.get(SPEC)
        if stored is not None and stored != self._fingerprint:
            raise BrewError(f"the state dir {store.path.parent} holds windows of another shape; use the --window, "
                            "--hop and --session-gap it was built with, or another --state-dir")
        self._seq = max(decode_entries(store.scan(commit_prefix())).commits.values(), default=0)
        self._lock = threading.Lock()
        self._closed = False

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        with self._lock:
            if self._closed:
                raise SinkClosed(f"shutting down; batch {batch_id} left for the next start")
            self._apply(df, batch_id)

    def tick(self) -> None:
        """Advance the watermark on processing time alone (idle partitions) and close windows."""
        with self._lock:
            if self._closed:
                return
            now = self.clock_ms()
            state = self._state()
            wm = watermark_at(state, now, self.cfg)
            if wm != state.watermark_ns:
                self._commit(state, step(state, WindowBatch(), wm, now, self.cfg, self.topics.events),
                             WindowBatch(), None, 0.0)

    def close(self) -> None:
        with self._lock:
            self._closed = True

    def _state(self) -> WindowsState:
        return decode_windows_state(self.store.items())

    def _apply(self, df: DataFrame, batch_id: int) -> None:
        t0 = time.monotonic()
        now = self.clock_ms()
        state = self._state()
        wm_start = watermark_at(state, now, self.cfg)
        # 1. + 2. Only what the store has not applied, judged against the batch-start watermark.
        batch = aggregate_events(df, state.reserved.next_offsets(self.topics.events), self.cfg.spec, wm_start,
                                 self.cfg.table_ns)
        if batch.is_empty:
            return
        # 3. The pure step: fold, advance the watermark, close.
        result = step(state, batch, wm_start, now, self.cfg, self.topics.events)
        self._commit(state, result, batch, batch_id, time.monotonic() - t0)

    def _commit(self, state: WindowsState, result: StepResult, batch: WindowBatch, batch_id: int | None,
                aggregate_s: float) -> None:
        t1 = time.monotonic()
        seq = self._seq + 1
        entries = list(result.entries)
        entries.append((meta_key(LAST_BATCH_MS), encode_u64(int(time.time() * 1000))))
        if state.reserved.meta.get(SPEC) is None:
            entries.append((meta_key(SPEC), encode_u64(self._fingerprint)))
        entries += self.changelog.commit_markers(seq)
        outputs = [result_record(self.topics.windows, r, result.watermark) for r in result.results]
        outputs += [late_record(self.topics.late_events, raw, w, result.watermark) for raw, w in result.late]
        outputs += dlq_records(self.topics.dlq, self.topics.events, batch.bad)

        # 4. State, results, late events and bad input: one transaction.
        positions = self.changelog.publish(entries, outputs,
                                           before_commit=lambda: self.faults.reached("mid-transaction"))
        self.faults.reached("after-changelog-commit")
        t2 = time.monotonic()

        # 5. The same entries locally; returning lets Spark commit its checkpoint.
        self.store.commit(entries + [(position_key(p), encode_u64(o)) for p, o in positions.items()])
        self.faults.reached("after-store-commit")
        self._seq = seq
        if self.on_batch is not None:
            self.on_batch(WindowsReport(
                batch_id, seq, batch.total, len(result.late), Counter(b.reason for b in batch.bad),
                Counter(r.emit for r in result.results), result.watermark, result.open_windows, len(entries),
                aggregate_s, t2 - t1, time.monotonic() - t2))
