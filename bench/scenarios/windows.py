"""Event-time windows: brewstream's ``windows`` against Kafka Streams' windowed count, on the
same stream of order events; final results checked against an oracle, and the delay from
the moment a window may close to its final result visible to a ``read_committed`` reader.

The stream (``bench.event_stream``): ``--windows-rate`` events a second for
``--windows-seconds``, on a clock ``--windows-speedup`` times faster than the feed, so a
minute of feed is that many one-minute windows. Tumbling one-minute windows; brewstream's
watermark delay 30 s and allowed lateness 2m30s, Kafka Streams' grace 3 min: both close a
window once their clock reaches its end + 3 min of event time (``Plan``). How each decides
it, per system:

- brewstream: watermark = min, over the input partitions that had events (none idle
  here), of the highest event time seen - 30 s; final once it reaches end + 2m30s. It moves
  between micro-batches (the default trigger, no interval): the batch holding the record that moves it
  there emits the result, in the transaction that commits the batch.
- Kafka Streams: stream time = the highest event time its windowing task has seen; every
  event goes through one repartition topic to that one task (the count is over all
  shops), so it is the highest event time over all partitions. Final once it reaches
  end + grace; ``suppress`` emits then, and the result is visible when the task's
  transaction commits (``commit.interval.ms`` 100).

For each system the harness finds, from the events in feed order and the partition each
landed in, the record whose arrival moves that system's clock to a window's end + 3 min
(``event_stream.close_triggers``); a window's **delay** is the arrival of its result at the
reader minus that record's produce time. Median and p99 over the windows of a run.

Each run: a fresh deployment (topics, state, application id); event 0 alone first, until
the system has counted it (brewstream: a batch line with events; Kafka Streams: its
window aggregation's first event); then the rest at the rate. Once every window its own
rule closes during the feed has a result, the system is stopped. Every result must equal
the oracle's count and amount of the on-time events of its window, no window may come
twice, and none may be missing; brewstream's late topic must hold exactly the late
events. Otherwise the benchmark stops.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.context import BenchContext
from bench.errors import BenchError
from bench.event_stream import MAX_OF_ALL, MIN_OF_PARTITIONS, NS, Plan, TimedEvents, close_triggers, timed_events
from bench.feed import PacedFeed
from bench.kafka_topics import create_pipeline
from bench.outputs import WindowParser, WindowResult, WindowWatcher, committed_records
from bench.procs import Child
from bench.scenarios.visible import POLL_S, READY_TIMEOUT_S, stop
from bench.stats import percentile, summarize
from bench.systems import kstreams, ours
from topics.clock import WaitTimedOut, format_duration, utc_iso, wait_until

RESULTS_TIMEOUT_S = 120.0  # after the feed, for the last results
PERCENTILES = (50, 99)


@dataclass
class WindowsRun:
    system: str
    checked: int  # final results, each equal to the oracle's
    delays: list[tuple[int, float]]  # (window end - t0, ns; delay, s) per window the feed closed
    peak_rss: int
    feed_s: float
    late_accepted: int | None = None  # brewstream: events accepted after the watermark passed their window's end
    batch_s: list[float] | None = None  # brewstream: each batch's time, start to commit

    def pct(self, q: float) -> float | None:
        values = [d for _, d in self.delays]
        return percentile(values, q) if values else None


@dataclass(frozen=True)
class Target:
    """One system's deployment for a run: where it reads and writes, how it starts."""

    system: str
    input: str
    output: str
    parse: WindowParser
    start: Callable[[], Child]
    ready: Callable[[Child, float], None]  # returns once the system has counted an event
    clock: str  # event_stream.MIN_OF_PARTITIONS or MAX_OF_ALL
    late_topic: str | None = None  # where late events go, with ``events_read``: how many it has read so far
    events_read: Callable[[Child], int] | None = None
    batch_seconds: Callable[[Child], list[float]] | None = None  # for a system that runs in batches


def run(ctx: BenchContext) -> dict[str, Any]:
    cfg = ctx.cfg
    plan = Plan()
    events = timed_events(plan, cfg.seed, cfg.windows_rate, cfg.windows_seconds, cfg.windows_speedup,
                          time.time_ns())
    oracle = events.oracle()
    real = NS * events.speedup  # event-time ns per second of feed
    out: dict[str, Any] = {
        "rate": events.rate, "seconds": cfg.windows_seconds, "speedup": events.speedup, "events": len(events),
        "late_events": events.late_count, "oracle_windows": len(oracle), "t0": utc_iso(events.t0_ns / NS),
        "window_s": plan.window_ns / NS, "watermark_delay_s": plan.watermark_delay_ns / NS,
        "allowed_lateness_s": plan.allowed_lateness_ns / NS, "grace_s": plan.close_ns / NS,
        "lag_max_s": plan.lag_max_ns / NS, "late_prob": plan.late_prob,
        "late_lag_s": [plan.late_lag_min_ns / NS, plan.late_lag_max_ns / NS],
        "on_time_margin_s": plan.on_time_margin_ns / NS, "late_margin_s": plan.late_margin_ns / NS,
        "on_time_margin_feed_s": plan.on_time_margin_ns / real, "late_margin_feed_s": plan.late_margin_ns / real,
        "systems": {},
    }
    ctx.say(f"windows: {len(events):,} events ({events.late_count:,} late) at {events.rate:,}/s for "
            f"{cfg.windows_seconds:.0f}s, event time {events.speedup:g}x the feed's: {len(oracle)} windows")
    makers: dict[str, tuple[Callable[[], Target], str, str]] = {}
    if cfg.runs("ours"):
        makers["ours"] = (lambda: _ours(ctx, plan), ours.windows_settings(plan),
                          f"the least, over partitions, of the highest event time each has seen reaches end + "
                          f"{_span(plan.close_ns)} (the watermark, that - {_span(plan.watermark_delay_ns)}, reaches "
                          f"end + the allowed lateness)")
    if cfg.runs("kstreams"):
        settings = ctx.peer_settings.get("kafka streams") or kstreams.Settings()
        makers["kafka streams"] = (lambda: _kstreams(ctx, plan, settings),
                                   kstreams.windows_settings(plan, settings),
                                   f"stream time, the highest event time its windowing task has seen (of every "
                                   f"partition), reaches end + {_span(plan.close_ns)} (the grace)")
    for system, (make, settings_text, clock_text) in makers.items():
        runs = [_measure(ctx, events, oracle, make(), rep) for rep in range(1, cfg.reps + 1)]
        entry: dict[str, Any] = {f"p{q}_s": summarize([v for r in runs if (v := r.pct(q)) is not None])
                                 for q in PERCENTILES}
        entry["peak_rss_bytes"] = summarize([float(r.peak_rss) for r in runs])
        entry["settings"] = settings_text
        entry["clock"] = clock_text
        entry["exact"] = True
        entry["runs"] = [{"windows": r.checked, "measured": len(r.delays), "feed_s": r.feed_s,
                          "peak_rss_bytes": r.peak_rss, "late_accepted": r.late_accepted,
                          "batches": None if r.batch_s is None else len(r.batch_s),
                          "batch_mean_s": statistics.fmean(r.batch_s) if r.batch_s else None,
                          "max_s": max((d for _, d in r.delays), default=None),
                          **{f"p{q}_s": r.pct(q) for q in PERCENTILES},
                          "delays": [[end / NS, d] for end, d in r.delays]} for r in runs]
        out["systems"][system] = entry
    return out


def _ours(ctx: BenchContext, plan: Plan) -> Target:
    topics = ctx.topics("windows")
    create_pipeline(ctx.conn, topics, ctx.cfg.partitions)
    dirs = ctx.dirs("windows")
    return Target("ours", topics.events, topics.windows, ours.parse_window,
                  lambda: ours.windows_daemon(ctx, topics, dirs, plan, "ours-windows"), ours.windows_counted,
                  MIN_OF_PARTITIONS, topics.late_events, ours.windows_events_read, ours.windows_batch_seconds)


def _kstreams(ctx: BenchContext, plan: Plan, settings: kstreams.Settings) -> Target:
    app = kstreams.KStreamsWindows(ctx, plan, settings)
    return Target("kafka streams", app.input, app.output, kstreams.parse_window,
                  lambda: app.start("kstreams-windows"), kstreams.windows_counted, MAX_OF_ALL)


def _measure(ctx: BenchContext, events: TimedEvents, oracle: dict[int, tuple[int, int]], target: Target,
             rep: int) -> WindowsRun:
    plan = events.plan
    watcher = WindowWatcher(ctx.conn, target.output, target.parse)
    watcher.start()
    daemon = target.start()
    probe = PacedFeed(ctx.conn, target.input, events, events.rate, 0, 1, headers=events.headers)
    feed = PacedFeed(ctx.conn, target.input, events, events.rate, 1, len(events), headers=events.headers)
    try:
        probe.run()
        target.ready(daemon, READY_TIMEOUT_S)
        feed.start()
        wait_until(lambda: not feed.is_alive(), 2 * ctx.cfg.windows_seconds + 60, "the windows feed to end",
                   every=POLL_S, give_up=daemon.exit_reason)
        placed = {**probe.placed, **feed.placed}
        produced_at = {**probe.produced_at, **feed.produced_at}
        if feed.error or probe.failed or feed.failed or len(placed) != len(events):
            raise BenchError(f"the windows feed lost records: {probe.failed + feed.failed} failed {feed.error}")
        closes = {start: start + plan.window_ns + plan.close_ns for start in oracle}
        triggers = close_triggers(events.event_ns, [placed[i][0] for i in range(len(events))],
                                  list(closes.values()), target.clock)
        due = sorted(start for start, close in closes.items() if close in triggers)
        with contextlib.suppress(WaitTimedOut):  # the check below names what is missing
            wait_until(lambda: set(due) <= {r.start_ns for r in watcher.seen()}, RESULTS_TIMEOUT_S,
                       f"{target.system}'s final result of every window the feed closed", every=POLL_S,
                       give_up=daemon.exit_reason)
        if target.events_read is not None:  # every event read, so every late one on the late topic
            read = target.events_read
            with contextlib.suppress(WaitTimedOut):  # the late check below says what is missing
                wait_until(lambda: read(daemon) >= len(events), RESULTS_TIMEOUT_S,
                           f"{target.system} to read every event", every=POLL_S, give_up=daemon.exit_reason)
        time.sleep(0.5)  # a result published twice would show by now
    finally:
        feed.halt.set()
        stop(daemon)
        watcher.stop()
    if watcher.error:
        raise BenchError(f"reading {target.output} failed: {watcher.error}")
    results = watcher.seen()
    by_start = _check(target.system, results, oracle, due, plan, daemon)
    late_accepted: int | None = None
    if target.late_topic is not None:
        late_out = committed_records(ctx.conn, target.late_topic)
        if late_out != events.late_count:
            raise BenchError(f"{target.system} put {late_out:,} events on its late topic where {events.late_count:,} "
                             f"were late; see {daemon.log_path}")
        late_accepted = sum(r.late_accepted or 0 for r in results)
    delays = [(start + plan.window_ns - events.t0_ns,
               by_start[start].arrived - produced_at[triggers[closes[start]]]) for start in due]
    feed_s = feed.produced_at[len(events) - 1] - feed.produced_at[1]
    batch_s = target.batch_seconds(daemon) if target.batch_seconds is not None else None
    run = WindowsRun(target.system, len(results), delays, daemon.rss.peak, feed_s, late_accepted, batch_s)
    ctx.say(f"windows: {target.system} rep {rep}: {len(results)} final results exact; close -> visible p50 "
            f"{_ms(run.pct(50))} p99 {_ms(run.pct(99))} over {len(delays)} windows; feed {feed_s:.1f}s; "
            f"peak RSS {run.peak_rss / 2**20:,.0f} MiB")
    return run


def _check(system: str, results: list[WindowResult], oracle: dict[int, tuple[int, int]], due: list[int],
           plan: Plan, daemon: Child) -> dict[int, WindowResult]:
    """Every result equal to the oracle's window, none twice, every due window there."""
    by_start: dict[int, WindowResult] = {}
    wrong: list[str] = []
    for r in results:
        if r.start_ns in by_start:
            wrong.append(f"{_at(r.start_ns)} published twice")
            continue
        by_start[r.start_ns] = r
        want = oracle.get(r.start_ns)
        if r.end_ns != r.start_ns + plan.window_ns or want != (r.count, r.cents):
            wrong.append(f"{_at(r.start_ns)}: got count {r.count} amount {r.cents / 100:.2f}, expected "
                         + ("no window" if want is None else f"count {want[0]} amount {want[1] / 100:.2f}"))
    wrong += [f"{_at(s)}: no final result" for s in due if s not in by_start]
    if wrong:
        raise BenchError(f"{system}'s windows differ from the oracle on {len(wrong)} window(s): "
                         f"{'; '.join(wrong[:5])}; see {daemon.log_path}")
    return by_start


def _at(ns: int) -> str:
    return utc_iso(ns / NS)


def _span(ns: int) -> str:
    return format_duration(ns / NS)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:,.0f}ms"
