"""Recovery as a downstream reader sees it, for every system that runs as a daemon: how long
after a SIGKILL the output is whole again.

Orders (with latency probes, ``dataset.OrderStream``) arrive at ``--latency-rate``.
Once the system has run ``WARM_S`` and its output is current, the whole process group of
instance 0 is SIGKILLed, and then:

- **disk-loss**: what the instance kept on its local disk is deleted
  (``Deployment.lose_disk``: brewstream's state dir, Kafka Streams' state dir, Spark's
  local dirs; what each keeps durable elsewhere stays: brewstream's Spark checkpoint and
  changelog, Kafka Streams' changelog, Spark's checkpoint dir), and the instance starts
  again at once;
- **failover**: nothing restarts; instance 1, a hot standby since the start (brewstream
  ``--standby``, Kafka Streams ``num.standby.replicas=1``), takes over. Spark and Quix
  have no standby.

The figure, **kill → whole again**, is the time until every probe produced up to
``WHOLE_AFTER_S`` after the kill has appeared in the output (read ``read_committed``):
from then on the output is as current as before the kill. Also kept: the first probe
produced after the kill to appear, and the timeline of every probe around the kill (for
the failover plot). Afterwards the feed stops, and the output must hold exactly the
oracle's sums of every order fed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from bench.context import BenchContext
from bench.dataset import OrderStream
from bench.errors import BenchError
from bench.feed import PacedFeed
from bench.outputs import OutputWatcher
from bench.procs import Child
from bench.scenarios.visible import POLL_S, READY_TIMEOUT_S, _slug, check_feed, prove_up, require_exact, stop
from bench.stats import summarize
from bench.systems.deployment import WITH_STANDBY, Factory, factories
from topics.clock import WaitTimedOut, wait_until

MODES = ("disk-loss", "failover")
WARM_S = 10.0  # running, and (failover) the standby following, before the kill
WHOLE_AFTER_S = 1.0
# Before the kill: every probe produced 3 to 6 seconds ago must have appeared.
CURRENT_LAG_S = 3.0
CURRENT_WINDOW_S = 6.0
CURRENT_TIMEOUT_S = 120.0
WHOLE_TIMEOUT_S = 300.0
AFTER_WHOLE_S = 5.0
TIMELINE_BEFORE_S = 5.0  # probes kept for the plot: from this long before the kill to the end


class FallsBehind(BenchError):
    """The system did not keep up with the feed before the kill: a kill would measure its
    backlog, not its recovery. A figure of its own ("cannot hold the rate"), not a failure."""


@dataclass
class TakeoverRun:
    system: str
    mode: str
    whole_s: float
    first_new_s: float | None
    peak_rss: int
    timeline: list[tuple[float, float | None]] = field(default_factory=list)  # (produced - kill, latency)


def run(ctx: BenchContext, stream: OrderStream) -> dict[str, Any]:
    cfg = ctx.cfg
    probed = stream.with_probes(cfg.probe_every)
    out: dict[str, Any] = {"rate": cfg.latency_rate, "whole_after_s": WHOLE_AFTER_S, "warm_s": WARM_S, "systems": {}}
    for system, make in factories(ctx).items():
        entry: dict[str, Any] = {}
        for mode in MODES:
            if mode == "failover" and system not in WITH_STANDBY:
                continue
            try:
                runs = [_measure(ctx, probed, make, mode, rep) for rep in range(1, cfg.reps + 1)]
            except FallsBehind as exc:
                ctx.say(f"takeover: {system} {mode}: {exc}; no figure")
                entry[mode] = {"falls_behind": str(exc)}
                continue
            firsts = [r.first_new_s for r in runs if r.first_new_s is not None]
            entry[mode] = {
                "whole_s": summarize([r.whole_s for r in runs]),
                "first_new_s": summarize(firsts) if firsts else None,
                "peak_rss_bytes": summarize([float(r.peak_rss) for r in runs]),
                # The plot shows one run: the one whose time is the median the legend gives.
                "timeline": sorted(runs, key=lambda r: r.whole_s)[len(runs) // 2].timeline,
                "runs": [{"whole_s": r.whole_s, "first_new_s": r.first_new_s, "peak_rss_bytes": r.peak_rss}
                         for r in runs],
                "exact": True,
            }
        out["systems"][system] = entry
    return out


def _measure(ctx: BenchContext, stream: OrderStream, make: Factory, mode: str, rep: int) -> TakeoverRun:
    cfg = ctx.cfg
    dep = make(f"takeover-{mode}", mode == "failover")
    slug = f"{_slug(dep.system)}-{mode}"
    watcher = OutputWatcher(ctx.conn, dep.output)
    watcher.start()
    first = dep.start(0, f"{slug}-before")
    children: list[Child] = [first]
    feed = PacedFeed(ctx.conn, dep.input, stream, cfg.latency_rate, 1)
    try:
        prove_up(ctx, dep, stream, watcher, first)
        if mode == "failover":
            children.append(dep.start(1, f"{slug}-standby"))
            dep.standby_ready(children[1], READY_TIMEOUT_S)
        feed.start()
        time.sleep(WARM_S)  # a fixed warm-up, not a wait for a condition
        _wait_current(dep.system, stream, feed, watcher, first)
        killed = time.monotonic()
        first.kill_group()
        first.finish(30)
        if mode == "disk-loss":
            dep.lose_disk(0)
            children.append(dep.start(0, f"{slug}-after"))
        survivor = children[-1]
        time.sleep(WHOLE_AFTER_S)
        due = [i for i in range(1, feed.last_index)
               if stream.is_probe(i) and feed.produced_at.get(i, killed) <= killed + WHOLE_AFTER_S]
        whole = wait_until(lambda: all(i in watcher.first_seen for i in due) and time.monotonic(), WHOLE_TIMEOUT_S,
                           f"{dep.system}'s output to be whole again after the kill", every=0.02,
                           give_up=survivor.exit_reason) - killed
        time.sleep(AFTER_WHOLE_S)  # more of the timeline after the gap, for the plot
        feed.stop()
        check_feed(feed, 0, feed.sent)
        require_exact(dep, stream, feed.last_index, watcher, survivor)
    finally:
        feed.halt.set()
        for child in children:
            stop(child)
        watcher.stop()
    probes = [i for i in range(1, feed.last_index) if stream.is_probe(i) and i in feed.produced_at]
    seen_after = [watcher.first_seen[i] for i in probes if feed.produced_at[i] > killed and i in watcher.first_seen]
    first_new = min(seen_after) - killed if seen_after else None
    timeline = [(round(feed.produced_at[i] - killed, 3),
                 round(watcher.first_seen[i] - feed.produced_at[i], 3) if i in watcher.first_seen else None)
                for i in probes if feed.produced_at[i] - killed >= -TIMELINE_BEFORE_S]
    run = TakeoverRun(dep.system, mode, whole, first_new, max(c.rss.peak for c in children[1:] or children),
                      timeline)
    ctx.say(f"takeover: {dep.system} {mode} rep {rep}: whole again {whole:.1f}s after the kill"
            + (f", first new order visible after {first_new:.1f}s" if first_new is not None else ""))
    return run


def _wait_current(system: str, stream: OrderStream, feed: PacedFeed, watcher: OutputWatcher, daemon: Child) -> None:
    """Until every probe produced from ``CURRENT_WINDOW_S`` to ``CURRENT_LAG_S`` ago has
    appeared: the system keeps up, and the gap after the kill is the kill's alone."""
    def current() -> bool:
        now = time.monotonic()
        last = feed.last_index
        window = range(max(1, last - int(feed.rate * CURRENT_WINDOW_S)), last)
        due = [i for i in window if stream.is_probe(i) and feed.produced_at.get(i, now) <= now - CURRENT_LAG_S]
        return bool(due) and all(i in watcher.first_seen for i in due)

    try:
        wait_until(current, CURRENT_TIMEOUT_S, f"{system}'s output to keep up with the feed before the kill",
                   every=POLL_S, give_up=daemon.exit_reason)
    except WaitTimedOut as exc:
        if daemon.exit_reason():
            raise
        raise FallsBehind(f"its output did not keep up with {feed.rate:,} orders/s before the kill "
                          f"(every order produced {CURRENT_LAG_S:.0f} s ago visible): {exc}") from None
    if feed.error or feed.failed:
        raise BenchError(f"the feed lost records: {feed.failed} failed {feed.error}")
