"""Scenario 3: latency at a steady rate, from produce to committed store and to snapshot.

Orders are fed at ``--latency-rate`` to a running daemon (fresh topics and state each
run). After one order proves the daemon is up, the feed starts; once it has run for
``--warmup-seconds`` and the daemon has committed its first order, every order produced
in the next ``--latency-seconds`` counts. For each one:

- commit latency: from just before ``produce`` to the first read-only poll of the store
  whose next offset for its partition is above its offset;
- snapshot latency: from the same produce to the arrival, at a consumer of the top-N
  topic, of the first snapshot whose processed-order counter includes the batch that
  committed it.

The default trigger (none) is always measured; the candidates of ``--triggers`` are probed
fastest first for ``--probe-seconds`` each, and the first that keeps up is measured too.
Keeping up means the store has everything within 1 s + 3 batch cycles (trigger or
mean batch time, whichever is longer) after the last produce, and the p95 of the last
third of the orders is not above 1.5 x that of the first third + 0.25 s: a daemon that
falls behind takes ever larger batches, and its latency rises through the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.context import BenchContext
from bench.dataset import OrderStream
from bench.errors import BenchError
from bench.feed import PacedFeed
from bench.kafka_topics import create_pipeline
from bench.snapshots import SnapshotReader
from bench.stats import percentile, summarize
from bench.storewatch import StoreWatcher
from bench.systems import ours
from topics.clock import WaitTimedOut, wait_until
from topics.kafka import KafkaConnection

READY_TIMEOUT_S = 300.0
POLL_S = 0.05  # latency is measured by these polls: keep them fine
WARMUP_SLACK_S = 60.0  # how much longer than --warmup-seconds the warm-up may take
CATCH_UP_TIMEOUT_S = 120.0
PERCENTILES = (50, 95, 99)


@dataclass
class LatencyRun:
    trigger_s: float
    seconds: float
    orders: int
    commit: list[float]
    snapshot: list[float]
    uncommitted: int
    caught_up_s: float | None
    batches: int
    mean_batch_orders: float
    mean_batch_s: float
    peak_rss: int

    def pct(self, which: str, q: float) -> float | None:
        values = self.commit if which == "commit" else self.snapshot
        return percentile(values, q) if values else None

    @property
    def keeps_up(self) -> bool:
        if self.caught_up_s is None or self.uncommitted or len(self.commit) < 3:
            return False
        if self.caught_up_s > 1.0 + 3 * max(self.trigger_s, self.mean_batch_s):
            return False
        third = len(self.commit) // 3
        first, last = self.commit[:third], self.commit[-third:]
        return percentile(last, 95) <= 1.5 * percentile(first, 95) + 0.25


def run(ctx: BenchContext, stream: OrderStream) -> dict[str, Any]:
    cfg = ctx.cfg
    probes: list[LatencyRun] = []
    fastest: float | None = None
    if cfg.trigger_candidates == (cfg.default_trigger_s,):
        # Only the default to try: its measured runs say whether it keeps up; no probe run.
        runs = [_measure(ctx, stream, cfg.default_trigger_s, cfg.latency_seconds, f"rep {rep}")
                for rep in range(1, cfg.reps + 1)]
        label = _label(cfg.default_trigger_s)
        keeps = all(r.keeps_up for r in runs)
        return {
            "rate": cfg.latency_rate, "seconds": cfg.latency_seconds, "warmup_seconds": cfg.warmup_seconds,
            "flush_s": cfg.flush_s, "poll_s": cfg.poll_s, "default_trigger": label,
            "fastest_keeping_up": label if keeps else None,
            "probes": [_run_dict(r) for r in runs], "triggers": {label: _summary(runs)},
        }
    for trigger in cfg.trigger_candidates:
        probe = _measure(ctx, stream, trigger, cfg.probe_seconds, "probe")
        probes.append(probe)
        if probe.keeps_up:
            fastest = trigger
            break
    triggers = [cfg.default_trigger_s]
    if fastest is not None and fastest != cfg.default_trigger_s:
        triggers.append(fastest)
    measured: dict[str, Any] = {}
    for trigger in triggers:
        runs = [_measure(ctx, stream, trigger, cfg.latency_seconds, f"rep {rep}") for rep in range(1, cfg.reps + 1)]
        measured[_label(trigger)] = _summary(runs)
    return {
        "rate": cfg.latency_rate, "seconds": cfg.latency_seconds, "warmup_seconds": cfg.warmup_seconds,
        "flush_s": cfg.flush_s, "poll_s": cfg.poll_s,
        "default_trigger": _label(cfg.default_trigger_s),
        "fastest_keeping_up": None if fastest is None else _label(fastest),
        "probes": [_run_dict(p) for p in probes],
        "triggers": measured,
    }


def stream_length(ctx: BenchContext) -> int:
    """Orders enough for a warm-up and a measurement without repeating one (the feed
    wraps around when a slow start stretches the warm-up)."""
    cfg = ctx.cfg
    return 1 + int(cfg.latency_rate * (cfg.warmup_seconds + max(cfg.latency_seconds, cfg.probe_seconds)))


def _measure(ctx: BenchContext, stream: OrderStream, trigger: float, seconds: float, why: str) -> LatencyRun:
    cfg, conn = ctx.cfg, ctx.conn
    topics = ctx.topics("latency")
    create_pipeline(conn, topics, cfg.partitions)
    dirs = ctx.dirs("latency")
    watcher = StoreWatcher(dirs.store, topics.orders, cfg.poll_s)
    snaps = SnapshotReader(conn, topics.counts)
    watcher.start()
    snaps.start()
    daemon = ours.start_daemon(ctx, topics, dirs, ours.Settings(trigger_s=trigger, flush_s=cfg.flush_s),
                               "latency-daemon")
    feed = PacedFeed(conn, topics.orders, stream, cfg.latency_rate, 1)
    try:
        first_batch(conn, topics.orders, stream, cfg.latency_rate, watcher, daemon.exit_reason)
        # Warm-up: at least --warmup-seconds of feed, and until the daemon has committed
        # orders of this feed (the first batches after start-up are the slow ones).
        feed.start()
        warm_until = time.monotonic() + cfg.warmup_seconds
        wait_until(lambda: time.monotonic() >= warm_until and 1 in feed.placed
                   and watcher.committed({feed.placed[1][0]: feed.placed[1][1] + 1}),
                   cfg.warmup_seconds + WARMUP_SLACK_S, "the end of the warm-up", every=POLL_S,
                   give_up=daemon.exit_reason)
        begin = feed.last_index
        time.sleep(seconds)
        end = feed.last_index
        feed.stop()
        if feed.error or feed.failed or len(feed.placed) != feed.sent:
            raise BenchError(f"the latency feed lost records: {feed.failed} failed {feed.error}")
        if end - begin < int(cfg.latency_rate * seconds * 0.95):
            raise BenchError(f"the feed fell short of its rate: {end - begin} orders in {seconds:.0f}s")
        last_produce = feed.produced_at[feed.last_index - 1]
        caught_up: float | None
        try:
            caught_up = wait_until(lambda: watcher.committed(targets(feed)) and time.monotonic(),
                                   CATCH_UP_TIMEOUT_S, "the store to catch up", every=POLL_S,
                                   give_up=daemon.exit_reason) - last_produce
        except WaitTimedOut:
            caught_up = None
        final = watcher.latest.processed if watcher.latest else 0
        wait_until(lambda: snaps.first_covering(final) is not None, cfg.flush_s + 30, "a final snapshot",
                   every=POLL_S, give_up=daemon.exit_reason)
    finally:
        feed.halt.set()
        daemon.terminate()
        code = daemon.finish(120)
        watcher.stop()
        snaps.stop()
    if code != 0:
        raise BenchError(f"the latency daemon exited {code} on SIGTERM; see {daemon.log_path}")
    commit, snapshot, uncommitted = _latencies(watcher, snaps, feed, range(begin, end))
    done = [b for b in ours.batches(daemon) if b.started >= feed.produced_at[begin]]
    result = LatencyRun(trigger, seconds, end - begin, commit, snapshot, uncommitted, caught_up, len(done),
                        sum(b.orders for b in done) / max(1, len(done)),
                        sum(b.t - b.started for b in done) / max(1, len(done)), daemon.rss.peak)
    ctx.say(f"latency: trigger {_label(trigger)} {why}: commit p50 {_ms(result.pct('commit', 50))} "
            f"p99 {_ms(result.pct('commit', 99))}, snapshot p50 {_ms(result.pct('snapshot', 50))}; "
            f"{len(done)} batches of {result.mean_batch_orders:,.0f} orders in {result.mean_batch_s:.2f}s; "
            f"{'keeps up' if result.keeps_up else 'falls behind'}")
    return result


def first_batch(conn: KafkaConnection, topic: str, stream: OrderStream, rate: int, watcher: StoreWatcher,
                exit_reason: Callable[[], str | None]) -> None:
    """One order first: its commit says Spark, the query and the Python workers are up."""
    first = PacedFeed(conn, topic, stream, rate, 0, 1)
    first.run()
    wait_until(lambda: watcher.committed(targets(first)), READY_TIMEOUT_S, "the daemon's first batch",
               every=POLL_S, give_up=exit_reason)


def targets(feed: PacedFeed) -> dict[int, int]:
    """The next offset per partition past every order ``feed`` placed."""
    out: dict[int, int] = {}
    for p, o in feed.placed.values():
        out[p] = max(out.get(p, 0), o + 1)
    return out


def _latencies(watcher: StoreWatcher, snaps: SnapshotReader, feed: PacedFeed,
               measured: range) -> tuple[list[float], list[float], int]:
    """(commit latencies, snapshot latencies, orders never seen committed)."""
    index = watcher.index()
    commit: list[float] = []
    snapshot: list[float] = []
    uncommitted = 0
    for i in measured:
        p, o = feed.placed[i]
        sample = index.first_sample(p, o)
        if sample is None:
            uncommitted += 1
            continue
        commit.append(sample.t - feed.produced_at[i])
        seen = snaps.first_covering(sample.processed)
        if seen is not None:
            snapshot.append(seen - feed.produced_at[i])
    return commit, snapshot, uncommitted


def _summary(runs: list[LatencyRun]) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": [_run_dict(r) for r in runs]}
    for which in ("commit", "snapshot"):
        for q in PERCENTILES:
            values = [v for v in (r.pct(which, q) for r in runs) if v is not None]
            out[f"{which}_p{q}_s"] = summarize(values) if values else None
    out["keeps_up"] = all(r.keeps_up for r in runs)
    out["peak_rss_bytes"] = summarize([float(r.peak_rss) for r in runs])
    return out


def _run_dict(r: LatencyRun) -> dict[str, Any]:
    out: dict[str, Any] = {"trigger": _label(r.trigger_s), "seconds": r.seconds, "orders": r.orders,
                           "uncommitted": r.uncommitted, "caught_up_s": r.caught_up_s, "keeps_up": r.keeps_up,
                           "batches": r.batches, "mean_batch_orders": r.mean_batch_orders,
                           "mean_batch_s": r.mean_batch_s, "peak_rss_bytes": r.peak_rss,
                           "snapshots_matched": len(r.snapshot)}
    for which in ("commit", "snapshot"):
        for q in PERCENTILES:
            out[f"{which}_p{q}_s"] = r.pct(which, q)
    return out


def _label(trigger: float) -> str:
    return f"{round(trigger * 1000)}ms"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:,.0f}ms"
