"""Latency as a downstream reader sees it, for every system that runs as a daemon:
from produce to the first read of the order's effect by a ``read_committed`` consumer of
the system's output (brewstream's changelog, Kafka Streams' output topic, Spark's sink).

Each run: a fresh deployment (topics, state, application id), one probe order first
(its appearance in the output says the system is up), then orders at ``--latency-rate``
for ``--warmup-seconds`` (not counted) and ``--latency-seconds`` (counted). One order in
``probe_every`` carries a probe item, a drink named after the order's index
(``dataset.OrderStream``): its latency is the first arrival of that drink at the
reader (``outputs.OutputWatcher``) minus the order's produce time. Afterwards the feed
stops and the output must hold exactly the oracle's sums of every order fed, probes
included, or the benchmark stops.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

from bench.context import BenchContext
from bench.dataset import OrderStream
from bench.errors import BenchError
from bench.feed import PacedFeed
from bench.outputs import OutputWatcher
from bench.procs import Child
from bench.stats import percentile, summarize
from bench.systems.deployment import Deployment, Factory, factories
from topics.clock import WaitTimedOut, wait_until

READY_TIMEOUT_S = 300.0
CATCH_UP_TIMEOUT_S = 120.0
DRAIN_TIMEOUT_S = 300.0
POLL_S = 0.05
PERCENTILES = (50, 95, 99)
CDF_POINTS = 200  # quantiles kept per run for the latency plot


@dataclass
class VisibleRun:
    system: str
    seconds: float
    orders: int
    latencies: list[float]
    missing: int
    peak_rss: int

    def pct(self, q: float) -> float | None:
        return percentile(self.latencies, q) if self.latencies else None

    @property
    def keeps_up(self) -> bool:
        """Every probe seen, and the latency of the last third of the probes not above that
        of the first third (the rule of brewstream's own latency scenario): a system that
        falls behind the rate sees its latency climb through the run."""
        third = len(self.latencies) // 3
        if self.missing or third < 1:
            return False
        return percentile(self.latencies[-third:], 95) <= 1.5 * percentile(self.latencies[:third], 95) + 0.25


def run(ctx: BenchContext, stream: OrderStream) -> dict[str, Any]:
    cfg = ctx.cfg
    probed = stream.with_probes(cfg.probe_every)
    out: dict[str, Any] = {"rate": cfg.latency_rate, "seconds": cfg.latency_seconds,
                           "warmup_seconds": cfg.warmup_seconds, "probe_every": cfg.probe_every, "systems": {}}
    for system, make in factories(ctx).items():
        runs = [_measure(ctx, probed, make, rep) for rep in range(1, cfg.reps + 1)]
        entry: dict[str, Any] = {f"p{q}_s": summarize([v for r in runs if (v := r.pct(q)) is not None])
                                 for q in PERCENTILES}
        entry["peak_rss_bytes"] = summarize([float(r.peak_rss) for r in runs])
        entry["cdf_s"] = _cdf([v for r in runs for v in r.latencies])
        entry["runs"] = [{"orders": r.orders, "probes": len(r.latencies), "missing": r.missing, "keeps_up": r.keeps_up,
                          "peak_rss_bytes": r.peak_rss, **{f"p{q}_s": r.pct(q) for q in PERCENTILES}} for r in runs]
        entry["keeps_up"] = all(r.keeps_up for r in runs)
        entry["exact"] = True
        out["systems"][system] = entry
    return out


def _measure(ctx: BenchContext, stream: OrderStream, make: Factory, rep: int) -> VisibleRun:
    cfg = ctx.cfg
    dep = make("visible", False)
    watcher = OutputWatcher(ctx.conn, dep.output)
    watcher.start()
    daemon = dep.start(0, f"{_slug(dep.system)}-visible")
    feed = PacedFeed(ctx.conn, dep.input, stream, cfg.latency_rate, 1)
    try:
        prove_up(ctx, dep, stream, watcher, daemon)
        feed.start()
        time.sleep(cfg.warmup_seconds)  # a fixed warm-up, not a wait for a condition
        begin = feed.last_index
        time.sleep(cfg.latency_seconds)
        end = feed.last_index
        feed.stop()
        check_feed(feed, cfg.latency_rate * cfg.latency_seconds, end - begin)
        probes = [i for i in range(begin, end) if stream.is_probe(i)]
        # Missing ones are counted as such, and the exact check below stops the run.
        with contextlib.suppress(WaitTimedOut):
            wait_until(lambda: all(i in watcher.first_seen for i in probes), CATCH_UP_TIMEOUT_S,
                       f"{dep.system} to publish every measured order", every=POLL_S, give_up=daemon.exit_reason)
        require_exact(dep, stream, feed.last_index, watcher, daemon)
    finally:
        feed.halt.set()
        stop(daemon)
        watcher.stop()
    latencies = [watcher.first_seen[i] - feed.produced_at[i] for i in probes if i in watcher.first_seen]
    run = VisibleRun(dep.system, cfg.latency_seconds, end - begin, latencies, len(probes) - len(latencies),
                     daemon.rss.peak)
    ctx.say(f"visible: {dep.system} rep {rep}: p50 {_ms(run.pct(50))} p99 {_ms(run.pct(99))} over "
            f"{len(latencies):,} probes; {'keeps up' if run.keeps_up else 'falls behind'}; peak RSS "
            f"{run.peak_rss / 2**20:,.0f} MiB")
    return run


def prove_up(ctx: BenchContext, dep: Deployment, stream: OrderStream, watcher: OutputWatcher, daemon: Child) -> None:
    """Order 0 (a probe) alone, until it shows in the output: the system is up."""
    first = PacedFeed(ctx.conn, dep.input, stream, ctx.cfg.latency_rate, 0, 1)
    first.run()
    wait_until(lambda: 0 in watcher.first_seen, READY_TIMEOUT_S, f"{dep.system}'s first output", every=POLL_S,
               give_up=daemon.exit_reason)


def check_feed(feed: PacedFeed, due: float, fed: int) -> None:
    if feed.error or feed.failed or len(feed.placed) != feed.sent:
        raise BenchError(f"the feed lost records: {feed.failed} failed {feed.error}")
    if fed < int(due * 0.95):
        raise BenchError(f"the feed fell short of its rate: {fed} orders where {due:.0f} were due")


def require_exact(dep: Deployment, stream: OrderStream, fed: int, watcher: OutputWatcher, daemon: Child) -> None:
    """The output's sums must become exactly the oracle's for every order fed (index 0 on)."""
    expected = stream.oracle(fed)
    try:
        wait_until(lambda: watcher.sums() == expected, DRAIN_TIMEOUT_S, f"{dep.system}'s output to count every order",
                   every=0.25, give_up=daemon.exit_reason)
    except WaitTimedOut:
        if reason := daemon.exit_reason():
            raise BenchError(f"{dep.system} stopped before its output counted every order: {reason}") from None
        got = watcher.sums()
        diff = {k: (got.get(k), v) for k, v in expected.items() if got.get(k) != v}
        extra = set(got) - set(expected)
        raise BenchError(f"{dep.system}'s output differs from the oracle on {len(diff)} drink(s) (got, expected) "
                         f"{dict(list(diff.items())[:5])}" + (f", and has {len(extra)} unknown" if extra else "")
                         + f"; see {daemon.log_path}") from None
    if watcher.error:
        raise BenchError(f"reading {dep.output} failed: {watcher.error}")


def stop(daemon: Child) -> None:
    """SIGTERM, then whatever is left of its process group."""
    daemon.terminate()
    with contextlib.suppress(BenchError):  # killed after the timeout; its figures are already taken
        daemon.finish(120)


def _cdf(values: list[float]) -> list[float]:
    if not values:
        return []
    ordered = sorted(values)
    return [percentile(ordered, 100 * k / (CDF_POINTS - 1)) for k in range(CDF_POINTS)]


def _slug(system: str) -> str:
    return system.replace(" ", "-")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:,.0f}ms"
