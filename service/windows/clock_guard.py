"""A watermark that a clock far ahead poisoned: noticed at start, repaired on request.

Without ``--max-event-time-ahead`` (brewstream before it, or the bound raised for a while),
one event stamped far ahead moves its partition's clock, and the watermark with it, past
every real event; both are kept with the state, so every restart keeps them. Before the
query starts (the store up to date with its changelog, this instance its only writer), a
partition clock more than the bound ahead of both this machine's clock and the Kafka
timestamp of the newest record the store applied from that partition is poisoned. The
daemon then stops in one line that names the repair, ``brewstream windows
--reset-watermark``, which:

- sets each poisoned clock to the latest event time the bound accepts among the last
  ``SCAN_RECORDS`` records the store applied from its partition (read back from the
  input); a partition where none is found loses its clock, as if it had had no events;
- lowers the watermark to ``seal_after`` the latest real event time: the end of the window
  that holds it (for sessions, two gaps after it), plus the allowed lateness. Every window
  the poisoned watermark closed early held only events up to that time, so none of them
  is ever emitted twice; every event still lands once, in a window result or on the late
  topic. Windows after it count exactly;
- deletes the open windows (and the printed table's rows) that start beyond the bound,
  without a result: only events the bound now rejects could have opened them.

It commits all of that as one batch through ``restorer.commit`` (changelog transaction,
then store), so a restore after it gives the repaired state. What was already published
stays: results of windows closed early, events sent to the late topic meanwhile.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from restorer.changelog import ChangelogWriter
from restorer.codec import Entry, encode_i64, meta_key
from restorer.commit import commit_batch
from restorer.store import Store
from service.records.event_time import MAX_EVENT_NS, span_text
from service.windows.assign import SESSION, WindowSpec, assign
from service.windows.events import BadEvent, parse_event
from service.windows.output import iso, window_id
from service.windows.state import (
    BY_EVENT,
    WATERMARK_NS,
    WindowAgg,
    WindowsState,
    clock_key,
    decode_windows_state,
    encode_clock,
    table_key,
)
from service.windows.step import WindowsConfig
from service.windows.watermark import PartitionClock
from topics.errors import BrewError
from topics.event_time import EVENT_TIME
from topics.kafka import KafkaConnection
from topics.records import read_at

log = logging.getLogger("brewstream")

SCAN_RECORDS = 10_000  # per poisoned partition: the newest records the store applied
REPAIR_FLAG = "--reset-watermark"
SHOWN = 5  # dropped windows named in the repair's log line


class PoisonedWatermark(BrewError):
    """A partition clock (or the watermark) runs far ahead of every real clock."""


@dataclass(frozen=True)
class PartitionScan:
    """What the records the store applied from one input partition say, read back."""

    newest_ts_ns: int | None = None  # the latest Kafka timestamp among them (in range)
    max_event_ns: int | None = None  # the latest event time the bound accepts among them
    records: int = 0
    rejected: int = 0  # of those, refused by the bound now


@dataclass
class Repair:
    entries: list[Entry] = field(default_factory=list)
    clocks: dict[int, tuple[int, int | None]] = field(default_factory=dict)  # partition -> (was, now or None)
    watermark: tuple[int | None, int | None] | None = None  # (was, now), when it changes
    dropped: list[WindowAgg] = field(default_factory=list)

    @property
    def changes_anything(self) -> bool:
        return bool(self.entries)


def seal_after(t_ns: int, spec: WindowSpec) -> int:
    """A watermark that closes every window an event at or before ``t_ns`` can be in,
    allowed lateness included: the end of the last window holding ``t_ns``. A session
    holding such an event ends by ``t_ns`` + gap, and an event within a gap of that end
    would overlap it, hence two gaps."""
    if spec.kind == SESSION:
        return t_ns + 2 * spec.gap_ns + spec.allowed_ns
    return max(end for _, end in assign(t_ns, spec)) + spec.allowed_ns


def reference_ns(now_ns: int, scan: PartitionScan | None) -> int:
    """The latest time a real clock vouches for: this machine's, or the newest applied record's."""
    newest = scan.newest_ts_ns if scan is not None else None
    return now_ns if newest is None else max(now_ns, newest)


def poisoned_clocks(clocks: Mapping[int, PartitionClock], refs: Mapping[int, int], now_ns: int,
                    max_ahead_ns: int) -> list[int]:
    """The partitions whose clock runs more than the bound ahead of their reference."""
    return sorted(p for p, c in clocks.items() if c.max_event_ns > refs.get(p, now_ns) + max_ahead_ns)


def watermark_poisoned(wm: int | None, latest_ref_ns: int, cfg: WindowsConfig) -> bool:
    """Beyond anything a store of events within the bound reaches, a repair's seal included."""
    return wm is not None and wm > seal_after(latest_ref_ns + cfg.max_ahead_ns, cfg.spec)


def plan_repair(state: WindowsState, scans: Mapping[int, PartitionScan], now_ns: int,
                cfg: WindowsConfig) -> Repair:
    """The entries that put a poisoned store right (pure); none when nothing is poisoned."""
    out = Repair()
    bound = cfg.max_ahead_ns
    refs = {p: reference_ns(now_ns, scans.get(p)) for p in set(state.clocks) | set(scans)}
    latest_ref = max([now_ns, *refs.values()])
    bad = poisoned_clocks(state.clocks, refs, now_ns, bound)
    wm = state.watermark_ns
    if not bad and not watermark_poisoned(wm, latest_ref, cfg):
        return out
    clocks = dict(state.clocks)
    for p in bad:
        scan = scans.get(p, PartitionScan())
        was = clocks[p].max_event_ns
        if scan.max_event_ns is None:
            del clocks[p]
            out.entries.append((clock_key(p), None))
        else:
            clocks[p] = PartitionClock(scan.max_event_ns, clocks[p].last_seen_ms)
            out.entries.append((clock_key(p), encode_clock(clocks[p])))
        out.clocks[p] = (was, scan.max_event_ns)
    # The latest real event time: the repaired clocks, else what the records' timestamps say.
    newest = [s.newest_ts_ns for s in scans.values() if s.newest_ts_ns is not None]
    latest_real = max(c.max_event_ns for c in clocks.values()) if clocks else max(newest, default=now_ns)
    seal = seal_after(latest_real, cfg.spec)
    if wm is not None and wm > seal:
        out.entries.append((meta_key(WATERMARK_NS), encode_i64(seal)))
        out.watermark = (wm, seal)
    cutoff = latest_ref + bound
    for key, w in sorted(state.windows.items(), key=lambda kv: (kv[1].start_ns, kv[0])):
        if w.start_ns > cutoff:
            out.entries.append((key, None))
            out.dropped.append(w)
    out.entries += [(table_key(BY_EVENT, s), None) for s in sorted(state.by_event) if s > cutoff]
    return out


def scan_records(records: Iterable[tuple[bytes | None, bytes | None, int]], cfg: WindowsConfig,
                 max_name_bytes: int) -> PartitionScan:
    """What (value, event-time header or None, Kafka timestamp ns) records say (pure)."""
    newest: int | None = None
    latest: int | None = None
    n = rejected = 0
    for value, header, ts_ns in records:
        n += 1
        if 0 <= ts_ns <= MAX_EVENT_NS and (newest is None or ts_ns > newest):
            newest = ts_ns
        try:
            ev = parse_event(value, header, ts_ns, max_name_bytes=max_name_bytes, max_ahead_ns=cfg.max_ahead_ns)
        except BadEvent as exc:
            rejected += str(exc).startswith("event time")
            continue
        except Exception:  # total, like the executors: one odd record never stops a repair
            continue
        latest = ev.event_ns if latest is None else max(latest, ev.event_ns)
    return PartitionScan(newest, latest, n, rejected)


def _records(conn: KafkaConnection, topic: str, partition: int, end: int,
             count: int) -> Iterable[tuple[bytes | None, bytes | None, int]]:
    """(value, event-time header or None, Kafka timestamp ns) of the ``count`` records below ``end``."""
    for fetched in read_at(conn, topic, [(partition, o) for o in range(max(0, end - count), end)]):
        msg = fetched.message
        if msg is None:
            continue
        raw = msg.headers() or []
        pairs = list(raw.items() if isinstance(raw, dict) else raw)
        stamps = [v for k, v in pairs if k == EVENT_TIME]  # the first one counts, as on the executors
        header = (stamps[0] if isinstance(stamps[0], bytes) else b"") if stamps else None
        kind, ms = msg.timestamp()
        yield msg.value(), header, (ms * 10**6 if kind and ms >= 0 else -1)


def read_back(conn: KafkaConnection, topic: str, offsets: Mapping[int, int], partitions: Iterable[int],
              count: int, cfg: WindowsConfig, max_name_bytes: int) -> dict[int, PartitionScan]:
    """The last ``count`` records the store applied from each of ``partitions``, judged."""
    return {p: scan_records(_records(conn, topic, p, offsets[p], count), cfg, max_name_bytes)
            for p in sorted(partitions) if offsets.get(p, 0) > 0}


def guard_clocks(conn: KafkaConnection, store: Store, changelog: ChangelogWriter | None, topic: str,
                 cfg: WindowsConfig, max_name_bytes: int, repair: bool, now_ns: int | None = None) -> Repair | None:
    """Refuse to start on a poisoned watermark (``PoisonedWatermark``), or, with ``repair``,
    put it right in one committed batch through ``changelog`` (without ``repair`` it writes
    nothing, and needs none). Costs nothing on a healthy store unless a clock runs ahead of
    this machine's: only then is the input read back."""
    now = time.time_ns() if now_ns is None else now_ns
    state = decode_windows_state(store.items())
    offsets = state.reserved.next_offsets(topic)
    bound = cfg.max_ahead_ns
    suspects = poisoned_clocks(state.clocks, {}, now, bound)
    wm_suspect = watermark_poisoned(state.watermark_ns, now, cfg)
    if not suspects and not wm_suspect:
        if repair:
            log.info("%s: nothing to repair: every partition clock of %s is within --max-event-time-ahead %s of "
                     "this machine's clock", REPAIR_FLAG, topic, span_text(bound))
        return None
    newest = read_back(conn, topic, offsets, offsets if wm_suspect else suspects, 1, cfg, max_name_bytes)
    plan = plan_repair(state, newest, now, cfg)
    if not plan.changes_anything:
        if repair:
            log.info("%s: nothing to repair: the clocks of %s run ahead of this machine's, but not of the input's "
                     "newest records", REPAIR_FLAG, topic)
        return None
    if not repair:
        raise PoisonedWatermark(_poisoned_line(state, newest, now, topic, cfg))
    assert changelog is not None, "a repair commits through the changelog"
    scans = read_back(conn, topic, offsets, set(plan.clocks), SCAN_RECORDS, cfg, max_name_bytes)
    plan = plan_repair(state, {**newest, **{p: s for p, s in scans.items()}}, now, cfg)
    commit_batch(store, changelog, plan.entries)
    log.info("%s", repair_line(plan, scans, topic))
    return plan


def _poisoned_line(state: WindowsState, newest: Mapping[int, PartitionScan], now_ns: int, topic: str,
                   cfg: WindowsConfig) -> str:
    refs = {p: reference_ns(now_ns, newest.get(p)) for p in state.clocks}
    bad = poisoned_clocks(state.clocks, refs, now_ns, cfg.max_ahead_ns)
    if bad:
        p = max(bad, key=lambda q: state.clocks[q].max_event_ns - refs[q])
        what = (f"the clock of {topic}[{p}] stands at {iso(state.clocks[p].max_event_ns)}, "
                f"{span_text(state.clocks[p].max_event_ns - refs[p])} ahead of its newest input record and of "
                "this machine's clock")
    else:
        wm = state.watermark_ns or 0
        what = f"the watermark stands at {iso(wm)}, {span_text(wm - max([now_ns, *refs.values()]))} ahead of the input"
    return (f"{what}, beyond --max-event-time-ahead {span_text(cfg.max_ahead_ns)}: an event from a clock far "
            f"ahead poisoned it, and every real event would be late; run `brewstream windows {REPAIR_FLAG}` once, "
            "with this command's other flags (docs/concepts/windows.md: A poisoned watermark)")


def repair_line(plan: Repair, scans: Mapping[int, PartitionScan], topic: str) -> str:
    parts = []
    for p, (was, now) in sorted(plan.clocks.items()):
        scan = scans.get(p, PartitionScan())
        to = iso(now) if now is not None else "none (no accepted event in what was read back)"
        parts.append(f"clock of {topic}[{p}] {iso(was)} -> {to} ({scan.records} records read back, "
                     f"{scan.rejected} refused for their event time)")
    if plan.watermark is not None:
        was_wm, now_wm = plan.watermark
        parts.append(f"watermark {iso(was_wm) if was_wm is not None else '-'} -> "
                     f"{iso(now_wm) if now_wm is not None else '-'}")
    if plan.dropped:
        names = ", ".join(f"{window_id(w)} ({w.count})" for w in plan.dropped[:SHOWN])
        more = f" and {len(plan.dropped) - SHOWN} more" if len(plan.dropped) > SHOWN else ""
        parts.append(f"dropped {len(plan.dropped)} open window(s) beyond the bound, with their event counts: "
                     f"{names}{more}")
    return f"{REPAIR_FLAG}: repaired: " + "; ".join(parts)
