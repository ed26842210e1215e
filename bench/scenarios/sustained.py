"""Scenario: the highest input rate a daemon with default flags sustains.

One daemon (default trigger, no cap on offsets per batch) runs on fresh topics. Once
one order proves it up, it is warmed at a tenth of the plain rate for ``WARMUP_S`` (a
sustained rate is a steady state: the cold batches belong to the catch-up figure), then
orders are produced at a steady rate in steps, each a fraction
of the plain consumer's read rate measured in the same benchmark run (``--sustained-
fractions``), each held for ``--sustained-seconds``. Lag (orders produced minus the
orders the committed store has counted) is sampled four times a second.

A step is sustained when the feed reached 95% of its rate and the lag stayed bounded:
over the step's last two thirds (the first is the daemon adapting its batch size to the
new rate), the least-squares slope of lag against time is at most 5% of the input rate.
Lag is a saw-tooth (it grows between commits and drops at each); a daemon that falls
behind takes ever larger batches and the teeth climb, which the slope shows. The steps
stop at the first one that is not sustained, or that the feed itself cannot produce. At
the end the store must have counted every order produced: the benchmark stops otherwise.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.context import BenchContext
from bench.dataset import OrderStream
from bench.errors import BenchError
from bench.feed import SteppedFeed
from bench.kafka_topics import create_pipeline, delete_containing
from bench.outputs import OutputWatcher
from bench.procs import Child
from bench.rss import cpu_seconds
from bench.runs import require_same
from bench.scenarios.visible import stop
from bench.storewatch import StoreWatcher
from bench.systems import ours
from bench.systems.deployment import Factory, factories
from topics.clock import wait_until

READY_TIMEOUT_S = 300.0
SAMPLE_S = 0.25
CATCH_UP_TIMEOUT_S = 300.0
FEED_SHORTFALL = 0.95  # below this share of its rate the feed, not the daemon, is the limit
WARMUP_S = 20.0
WARMUP_FRACTION = 0.1
MAX_GROWTH = 0.05  # lag may grow by at most this share of the input rate


@dataclass
class Step:
    rate: int
    fraction: float
    produced: int
    seconds: float
    lags: list[tuple[float, int]]  # (seconds into the step, lag in orders)
    batches: int
    mean_batch_orders: float
    mean_batch_s: float
    cpu_s: dict[str, float]  # CPU seconds over the step, by process

    @property
    def achieved_rate(self) -> float:
        return self.produced / self.seconds if self.seconds else 0.0

    @property
    def feed_limited(self) -> bool:
        return self.achieved_rate < FEED_SHORTFALL * self.rate

    @property
    def lag_growth(self) -> float:
        """Orders of lag added per second over the step's last two thirds."""
        return lag_slope(self.lags[len(self.lags) // 3:])

    @property
    def bounded(self) -> bool:
        return len(self.lags) >= 6 and self.lag_growth <= MAX_GROWTH * self.rate

    @property
    def sustained(self) -> bool:
        return not self.feed_limited and self.bounded

    @property
    def max_lag(self) -> int:
        return max((lag for _t, lag in self.lags), default=0)


def lag_slope(samples: list[tuple[float, int]]) -> float:
    """The least-squares slope of lag (orders) against time (seconds)."""
    n = len(samples)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in samples) / n
    ml = sum(lag for _, lag in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    return sum((t - mt) * (lag - ml) for t, lag in samples) / var if var else 0.0


def run(ctx: BenchContext, stream: OrderStream, plain_rate: float) -> dict[str, Any]:
    cfg = ctx.cfg
    topics = ctx.topics("sustained")
    create_pipeline(ctx.conn, topics, cfg.partitions)
    dirs = ctx.dirs("sustained")
    watcher = StoreWatcher(dirs.store, topics.orders, SAMPLE_S)
    watcher.start()
    daemon = ours.start_daemon(ctx, topics, dirs, ours.Settings(), "sustained-daemon")
    feed = SteppedFeed(ctx.conn, topics.orders, stream)
    steps: list[Step] = []
    try:
        def counted() -> int:
            return watcher.latest.processed if watcher.latest else 0

        feed.rate = 1
        feed.start()
        wait_until(lambda: counted() >= 1, READY_TIMEOUT_S, "the daemon's first batch", every=SAMPLE_S,
                   give_up=daemon.exit_reason)
        feed.rate = round(plain_rate * WARMUP_FRACTION)
        time.sleep(min(WARMUP_S, ctx.cfg.sustained_seconds))  # a fixed warm-up period, not a wait for a condition
        wait_until(lambda: feed.sent - counted() <= feed.rate * 2, CATCH_UP_TIMEOUT_S, "the warm-up lag to drain",
                   every=SAMPLE_S, give_up=daemon.exit_reason)
        for fraction in cfg.sustained_fractions:
            step = _step(ctx, feed, daemon, counted, round(plain_rate * fraction), fraction)
            steps.append(step)
            ctx.say(f"sustained: {step.rate:,}/s ({fraction:.2f}x plain): produced {step.achieved_rate:,.0f}/s, "
                    f"lag max {step.max_lag:,} growing {step.lag_growth:,.0f}/s, "
                    f"{step.batches} batches of {step.mean_batch_orders:,.0f} orders in "
                    f"{step.mean_batch_s:.2f}s; "
                    + ("sustained" if step.sustained else "feed-limited" if step.feed_limited else "falls behind")
                    + "; CPU-s " + ", ".join(f"{k} {v}" for k, v in step.cpu_s.items()))
            if not step.sustained:
                break
        feed.stop()
        if feed.error or feed.failed:
            raise BenchError(f"the sustained feed lost records: {feed.failed} failed {feed.error}")
        wait_until(lambda: counted() >= feed.sent, CATCH_UP_TIMEOUT_S, "the store to count every order produced",
                   every=SAMPLE_S, give_up=daemon.exit_reason)
        if counted() != feed.sent:
            raise BenchError(f"the store counted {counted():,} orders of {feed.sent:,} produced")
    finally:
        feed.halt.set()
        daemon.terminate()
        code = daemon.finish(120)
        watcher.stop()
        _drop_topics(ctx, topics.orders, topics.changelog)
    if code != 0:
        raise BenchError(f"the sustained-rate daemon exited {code} on SIGTERM; see {daemon.log_path}")
    best = max((s for s in steps if s.sustained), key=lambda s: s.rate, default=None)
    return {
        "plain_read_orders_per_s": plain_rate,
        "seconds_per_step": cfg.sustained_seconds,
        "steps": [_step_dict(s) for s in steps],
        "highest_sustained_orders_per_s": best.rate if best else None,
        "ratio_to_plain": best.rate / plain_rate if best else None,
        "limited_by": "feed" if steps and steps[-1].feed_limited else "daemon" if steps and not steps[-1].sustained
        else "none (every step sustained)",
        "orders_counted": feed.sent,
        "peak_rss_bytes": daemon.rss.peak,
    }


def run_peers(ctx: BenchContext, stream: OrderStream, reference: dict[str, float]) -> dict[str, Any]:
    """The same steps for each peer that runs as a daemon, at ``--peer-sustained-fractions``
    of its own catch-up rate (``reference``, orders/s over processing time in this run).
    A peer's progress is what its output shows a ``read_committed`` reader: the cups its
    per-drink sums add up to, against the cups in the orders produced."""
    out: dict[str, Any] = {}
    for system, make in factories(ctx).items():
        if system == "ours":
            continue  # its own scenario above, measured at its committed store
        rate = reference.get(system)
        if not rate:
            ctx.say(f"sustained: no catch-up rate of {system} in this run; skipped")
            continue
        out[system] = _run_peer(ctx, stream, make, rate)
    return out


def _drop_topics(ctx: BenchContext, *names: str) -> None:
    """Delete a finished run's topics (all named from one prefix): its steps produce tens of
    millions of orders, and the runs of every system together outgrew a disk that held the
    rest of the benchmark."""
    prefix = names[0]
    for name in names[1:]:
        while not name.startswith(prefix):
            prefix = prefix[:-1]
    if prefix.startswith(f"bench-{ctx.stamp}-") and len(prefix) > len(f"bench-{ctx.stamp}-"):
        try:
            delete_containing(ctx.conn, prefix)
        except Exception as exc:  # called from a finally: never hide why the run stopped
            ctx.say(f"sustained: the topics {prefix}* not deleted ({exc}); the run's end deletes them")


PAST_LADDER = 1.25  # a peer that holds every step is stepped on by this factor
PAST_LADDER_STEPS = 8
BELOW_LADDER_STEPS = 3  # a peer that falls behind on the first step tries half the rate, this often


def _ladder(fractions: tuple[float, ...]) -> list[float]:
    """The given fractions, then on by ``PAST_LADDER`` a step, so that a peer's figure is
    where it fell behind rather than where the list ended (the run stops at the first
    step not sustained)."""
    out = list(fractions)
    for _ in range(PAST_LADDER_STEPS):
        out.append(round(out[-1] * PAST_LADDER, 3))
    return out


def _run_peer(ctx: BenchContext, stream: OrderStream, make: Factory, reference: float) -> dict[str, Any]:
    cfg = ctx.cfg
    dep = make("sustained", False)
    watcher = OutputWatcher(ctx.conn, dep.output)
    watcher.start()
    daemon = dep.start(0, f"{dep.system.replace(' ', '-')}-sustained")
    feed = SteppedFeed(ctx.conn, dep.input, stream)
    steps: list[Step] = []

    def counted() -> int:
        sent = feed.sent
        return sent - round((stream.cups(sent) - watcher.counted_cups()) / stream.cups_per_order)

    try:
        feed.rate = 1
        feed.start()
        wait_until(lambda: watcher.counted_cups() > 0, READY_TIMEOUT_S, f"{dep.system}'s first output",
                   every=SAMPLE_S, give_up=daemon.exit_reason)
        feed.rate = max(1, round(reference * WARMUP_FRACTION))
        time.sleep(min(WARMUP_S, ctx.cfg.sustained_seconds))  # a fixed warm-up period, not a wait for a condition
        wait_until(lambda: feed.sent - counted() <= feed.rate * 2, CATCH_UP_TIMEOUT_S, "the warm-up lag to drain",
                   every=SAMPLE_S, give_up=daemon.exit_reason)
        def held(fraction: float) -> bool:
            step = _step(ctx, feed, daemon, counted, round(reference * fraction), fraction, batches=False)
            steps.append(step)
            ctx.say(f"sustained: {dep.system} {step.rate:,}/s ({fraction:.2f}x its catch-up rate): produced "
                    f"{step.achieved_rate:,.0f}/s, lag max {step.max_lag:,} growing {step.lag_growth:,.0f}/s; "
                    + ("sustained" if step.sustained else "feed-limited" if step.feed_limited else "falls behind"))
            return step.sustained

        first, *_rest = cfg.peer_sustained_fractions
        if held(first):
            for fraction in _ladder(cfg.peer_sustained_fractions)[1:]:
                if not held(fraction):
                    break
        else:  # below the list: halve the rate until a step holds
            fraction = first
            for _ in range(BELOW_LADDER_STEPS):
                fraction /= 2
                if held(round(fraction, 3)):
                    break
        feed.stop()
        if feed.error or feed.failed:
            raise BenchError(f"the sustained feed lost records: {feed.failed} failed {feed.error}")
        expected_cups = stream.cups(feed.sent)
        wait_until(lambda: watcher.counted_cups() >= expected_cups, CATCH_UP_TIMEOUT_S,
                   f"{dep.system} to count every order produced", every=SAMPLE_S, give_up=daemon.exit_reason)
        require_same(f"{dep.system} after the sustained steps", watcher.sums(), stream.oracle(feed.sent))
    finally:
        feed.halt.set()
        stop(daemon)
        watcher.stop()
        _drop_topics(ctx, dep.input, dep.output)
    best = max((s for s in steps if s.sustained), key=lambda s: s.rate, default=None)
    last = max(steps, key=lambda s: s.rate) if steps else None
    return {
        "reference_orders_per_s": reference,
        "reference": "its own catch-up rate over processing time, this run",
        "seconds_per_step": cfg.sustained_seconds,
        "steps": [_step_dict(s) for s in steps],
        "highest_sustained_orders_per_s": best.rate if best else None,
        "ratio_to_reference": best.rate / reference if best else None,
        "limited_by": "feed" if last and last.feed_limited else "daemon" if last and not last.sustained
        else "none (every step sustained)",
        "orders_counted": feed.sent,
        "peak_rss_bytes": daemon.rss.peak,
        "deployment": dep.describe(),
    }


def _step(ctx: BenchContext, feed: SteppedFeed, daemon: Child, counted: Callable[[], int], rate: int,
          fraction: float, batches: bool = True) -> Step:
    seconds = ctx.cfg.sustained_seconds
    cpu_before = _cpu(ctx, daemon)
    after = len(daemon.lines)
    start_sent = feed.sent
    feed.rate = rate
    t0 = time.monotonic()
    lags: list[tuple[float, int]] = []
    while (now := time.monotonic()) - t0 < seconds:
        if daemon.exit_reason():
            raise BenchError(f"the sustained-rate daemon stopped: {daemon.exit_reason()}; see {daemon.log_path}")
        lags.append((now - t0, max(0, feed.sent - counted())))
        time.sleep(SAMPLE_S)  # a sampling period, not a wait for a condition
    produced = feed.sent - start_sent
    daemon.rss.sample()
    cpu_after = _cpu(ctx, daemon)
    done = ours.batches(daemon, after) if batches else []
    return Step(rate, fraction, produced, time.monotonic() - t0, lags, len(done),
                sum(b.orders for b in done) / max(1, len(done)),
                sum(b.t - b.started for b in done) / max(1, len(done)),
                {k: round(v - cpu_before.get(k, 0.0), 1) for k, v in cpu_after.items()})


def _cpu(ctx: BenchContext, daemon: Child) -> dict[str, float]:
    """CPU seconds so far: the daemon's processes by role, the broker, and this process
    (the feed and the store watcher)."""
    out = dict(daemon.rss.cpu_s())
    if ctx.broker_pid:
        out["broker"] = cpu_seconds(ctx.broker_pid)
    out["feed (bench harness)"] = cpu_seconds(os.getpid())
    return out


def _step_dict(s: Step) -> dict[str, Any]:
    return {"rate": s.rate, "fraction": s.fraction, "achieved_rate": s.achieved_rate, "max_lag": s.max_lag,
            "lag_growth_per_s": s.lag_growth,
            "bounded": s.bounded, "feed_limited": s.feed_limited, "sustained": s.sustained, "batches": s.batches,
            "mean_batch_orders": s.mean_batch_orders, "mean_batch_s": s.mean_batch_s, "cpu_s": s.cpu_s,
            "lag_samples": s.lags[:: max(1, len(s.lags) // 40)]}
