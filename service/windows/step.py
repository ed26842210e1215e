"""One step of the window state machine (pure): a batch's partials in, changes out.

The order inside a step is the contract:

1. events were judged against ``wm_start``, the watermark when the batch started;
2. accepted events are folded into their windows (sessions merge with the store's);
3. partition clocks advance, giving the new watermark;
4. windows whose end + allowed lateness the watermark reached are emitted once, final,
   and deleted; with early emission a window also gets a provisional result when the
   watermark passes its end, and a revision for every later accepted update.

A step with an empty batch is how a stream that went quiet still closes its windows.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from restorer.codec import Entry, encode_i64, encode_u64, meta_key, offset_key
from service.records.event_time import DEFAULT_MAX_AHEAD_NS
from service.windows.aggregate import RawRecord, WindowBatch
from service.windows.assign import SESSION, Session, WindowSpec, merge_sessions
from service.windows.state import (
    BAD,
    BY_EVENT,
    BY_PROCESSING,
    EARLY_EMITTED,
    LATE,
    NO_HEADER,
    TOTAL,
    WATERMARK_NS,
    WindowAgg,
    WindowsState,
    clock_key,
    encode_clock,
    encode_window,
    table_key,
    window_key,
)
from service.windows.watermark import PartitionClock, closed, passed, watermark

FINAL, EARLY, REVISION = "final", "early", "revision"


@dataclass(frozen=True)
class WindowsConfig:
    spec: WindowSpec
    watermark_delay_ns: int = 60 * 10**9
    idle_timeout_ms: int = 30_000
    emit_early: bool = False
    table_ns: int = 60 * 10**9
    table_keep: int = 8  # windows kept for the printed table: the ones it shows
    max_ahead_ns: int = DEFAULT_MAX_AHEAD_NS  # further ahead of its Kafka timestamp, an event is bad


@dataclass(frozen=True)
class WindowResult:
    window: WindowAgg
    emit: str


@dataclass
class StepResult:
    entries: list[Entry] = field(default_factory=list)
    results: list[WindowResult] = field(default_factory=list)
    late: list[tuple[RawRecord, WindowAgg]] = field(default_factory=list)
    watermark: int | None = None
    open_windows: int = 0

    @property
    def changes_anything(self) -> bool:
        return bool(self.entries or self.results or self.late)


def watermark_at(state: WindowsState, now_ms: int, cfg: WindowsConfig) -> int | None:
    return watermark(state.clocks, now_ms, cfg.watermark_delay_ns, cfg.idle_timeout_ms, state.watermark_ns)


def step(state: WindowsState, batch: WindowBatch, wm_start: int | None, now_ms: int, cfg: WindowsConfig,
         input_topic: str) -> StepResult:
    spec = cfg.spec
    out = StepResult()
    windows = {k: replace(w) for k, w in state.windows.items()}
    dirty: set[bytes] = set()
    deleted: set[bytes] = set()

    # 2. Fold accepted events into their windows.
    for (start, end), (count, cents, late_acc) in batch.fixed.items():
        key = window_key(spec.kind, start, None)
        w = windows.setdefault(key, WindowAgg(spec.kind, start, end, None))
        w.count += count
        w.amount_cents += cents
        w.late_accepted += late_acc
        dirty.add(key)
    for raw, start, end in batch.late:
        out.late.append((raw, WindowAgg(spec.kind, start, end, None)))
    if spec.kind == SESSION:
        for shop, minis in batch.sessions.items():
            _fold_sessions(shop, minis, windows, dirty, deleted, batch, wm_start, spec, out)

    # 3. Partition clocks, then the watermark the step ends with.
    clocks = dict(state.clocks)
    for p in batch.next_offsets:
        seen = [t for t in (batch.max_event.get(p), clocks[p].max_event_ns if p in clocks else None) if t is not None]
        if seen:  # a partition that only ever had bad records has no event time yet
            clocks[p] = PartitionClock(max(seen), now_ms)
            out.entries.append((clock_key(p), encode_clock(clocks[p])))
    out.watermark = watermark(clocks, now_ms, cfg.watermark_delay_ns, cfg.idle_timeout_ms, wm_start)

    # 4. Emit and evict.
    for key, w in sorted(windows.items(), key=lambda kv: (kv[1].end_ns, kv[1].start_ns, kv[1].key or "")):
        if closed(w.end_ns, spec.allowed_ns, out.watermark):
            out.results.append(WindowResult(w, FINAL))
            deleted.add(key)
            dirty.discard(key)
        elif cfg.emit_early and passed(w.end_ns, out.watermark) and not w.early_emitted:
            w.flags |= EARLY_EMITTED
            out.results.append(WindowResult(w, EARLY))
            dirty.add(key)
        elif cfg.emit_early and w.early_emitted and key in dirty:
            out.results.append(WindowResult(w, REVISION))
    out.open_windows = len(windows) - len(deleted & windows.keys())
    out.entries += [encode_window(windows[k]) for k in sorted(dirty)]
    out.entries += [(k, None) for k in sorted(deleted) if k in state.windows]

    # The printed table, trimmed to its last windows; counters; input offsets.
    now_window = now_ms * 10**6 - (now_ms * 10**6) % cfg.table_ns
    keep_from = now_window - (cfg.table_keep - 1) * cfg.table_ns
    by_processing = {now_window: batch.total} if batch.total else {}
    out.entries += _table(BY_EVENT, state.by_event, batch.table, keep_from)
    out.entries += _table(BY_PROCESSING, state.by_processing, by_processing, keep_from)
    counters = {TOTAL: batch.total, LATE: len(out.late), NO_HEADER: batch.no_header, BAD: len(batch.bad)}
    out.entries += [(meta_key(name), encode_u64(state.counter(name) + n)) for name, n in counters.items() if n]
    if out.watermark is not None and out.watermark != state.watermark_ns:
        out.entries.append((meta_key(WATERMARK_NS), encode_i64(out.watermark)))
    out.entries += [(offset_key(input_topic, p), encode_u64(o)) for p, o in sorted(batch.next_offsets.items())]
    return out


def _fold_sessions(shop: str, minis: list[Session], windows: dict[bytes, WindowAgg], dirty: set[bytes],
                   deleted: set[bytes], batch: WindowBatch, wm_start: int | None, spec: WindowSpec,
                   out: StepResult) -> None:
    for m in minis:
        stored = {k: w for k, w in windows.items() if w.kind == SESSION and w.key == shop and k not in deleted}
        overlapping = {k: w for k, w in stored.items() if w.start_ns < m.end_ns and m.start_ns < w.end_ns}
        parts = [Session(shop, w.start_ns, w.end_ns, w.count, w.amount_cents, w.late_accepted)
                 for w in overlapping.values()]
        merged = merge_sessions([*parts, m])[0]
        if closed(merged.end_ns, spec.allowed_ns, wm_start):
            window = WindowAgg(SESSION, merged.start_ns, merged.end_ns, shop)
            out.late += [(batch.records[i], window) for i in m.members]
            continue
        flags = 0
        for k, w in overlapping.items():
            flags |= w.flags
            del windows[k]
            deleted.add(k)
            dirty.discard(k)
        key = window_key(SESSION, merged.start_ns, shop)
        late_acc = merged.late_accepted + (m.count if passed(m.end_ns, wm_start) else 0)
        windows[key] = WindowAgg(SESSION, merged.start_ns, merged.end_ns, shop, merged.count, merged.amount_cents,
                                 late_acc, flags)
        deleted.discard(key)
        dirty.add(key)


def _table(which: bytes, stored: dict[int, int], added: dict[int, int], keep_from: int) -> list[Entry]:
    """The table's counts for the windows it still shows; older ones are deleted."""
    entries: list[Entry] = [(table_key(which, s), encode_u64(stored.get(s, 0) + n))
                            for s, n in sorted(added.items()) if s >= keep_from]
    entries += [(table_key(which, s), None) for s in sorted(stored) if s < keep_from]
    return entries
