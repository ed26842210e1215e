"""Scenario 4: recovery time after SIGKILL: a restart, a restart after the loss of the
disk, and a failover to a hot standby.

A daemon runs on fresh topics with the default trigger while orders arrive at
``--latency-rate``. Right after its ``kill_after_batches``-th committed batch (+0.5 s,
so the kill lands mid-cycle) its whole process group (driver, JVM, workers) is
SIGKILLed (``--reps`` times for each restart, ``--failover-kills`` times with a
standby); for ``disk-loss`` the state dir is deleted too (the Spark checkpoint stays,
and the daemon must notice that it runs ahead of the store). For ``kill9`` and
``disk-loss`` a new daemon starts at once, on the same dirs; for ``failover`` a
``--standby`` on dirs of its own has been following all along. The clock runs from the
kill to the first batch the next daemon commits (its batch log line follows the store
commit). The feed continues throughout, so
there is always a new batch to commit. Afterwards the feed stops, the daemon drains it,
and the store must hold exactly the oracle's counts of every delivered order.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from typing import Any

from bench.context import BenchContext, DaemonDirs
from bench.dataset import OrderStream
from bench.errors import BenchError
from bench.feed import PacedFeed
from bench.kafka_topics import create_pipeline
from bench.procs import Child
from bench.runs import require_same
from bench.stats import summarize
from bench.storewatch import StoreWatcher
from bench.systems import ours
from service.instance.health import STANDBY, role_pattern
from topics.clock import wait_until

MODES = ("kill9", "disk-loss", "failover")
STANDBY_LINE = role_pattern(STANDBY)
KILL_DELAY_S = 0.5
START_TIMEOUT_S = 300.0
DRAIN_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class RecoveryRun:
    mode: str
    to_first_batch_s: float
    to_store_ready_s: float
    store_ready_to_first_batch_s: float
    first_batch_orders: int
    restored_records: int | None
    peak_rss: int


def run(ctx: BenchContext, stream: OrderStream) -> dict[str, Any]:
    out: dict[str, Any] = {"rate": ctx.cfg.latency_rate, "kill_after_batches": ctx.cfg.kill_after_batches,
                           "trigger": f"{round(ctx.cfg.default_trigger_s * 1000)}ms"}
    for mode in MODES:
        kills = ctx.cfg.failover_kills if mode == "failover" else ctx.cfg.reps
        runs = [_measure(ctx, stream, mode, rep) for rep in range(1, kills + 1)]
        out[mode] = {
            "to_first_batch_s": summarize([r.to_first_batch_s for r in runs]),
            "to_store_ready_s": summarize([r.to_store_ready_s for r in runs]),
            "store_ready_to_first_batch_s": summarize([r.store_ready_to_first_batch_s for r in runs]),
            "runs": [r.__dict__ for r in runs],
            "exact_after_recovery": True,
        }
    return out


def _measure(ctx: BenchContext, stream: OrderStream, mode: str, rep: int) -> RecoveryRun:
    cfg, conn = ctx.cfg, ctx.conn
    topics = ctx.topics(f"recovery-{mode}")
    create_pipeline(conn, topics, cfg.partitions)
    dirs = ctx.dirs(f"recovery-{mode}")
    settings = ours.Settings(trigger_s=cfg.default_trigger_s, flush_s=cfg.flush_s)
    feed = PacedFeed(conn, topics.orders, stream, cfg.latency_rate)
    first = ours.start_daemon(ctx, topics, dirs, settings, f"{mode}-before")
    second = None
    if mode == "failover":
        dirs = ctx.dirs(f"recovery-{mode}-standby")
        second = ours.start_daemon(ctx, topics, dirs, settings, f"{mode}-standby", standby=True)
        second.wait_for(STANDBY_LINE, START_TIMEOUT_S)
    try:
        feed.start()
        seen = 0
        for _ in range(cfg.kill_after_batches):
            line, _m = first.wait_for(ours.BATCH, START_TIMEOUT_S, after=seen)
            seen = first.lines.index(line) + 1
        time.sleep(KILL_DELAY_S)
        mark = len(second.lines) if second is not None else 0
        killed = time.monotonic()
        first.kill_group()
        first.finish(30)
        if mode == "disk-loss":
            shutil.rmtree(dirs.state)
        if second is None:
            second = ours.start_daemon(ctx, topics, dirs, settings, f"{mode}-after")
        ready, _m = second.wait_for(ours.READY, START_TIMEOUT_S, after=mark)
        batch, m = second.wait_for(ours.BATCH, START_TIMEOUT_S)
        restored = next((int(r["records"]) for line in second.lines if (r := ours.RESTORED.search(line.text))), None)
        feed.stop()
        _check_exact(stream, feed, dirs, topics.orders, second)
        second.terminate()
        if second.finish(120) != 0:
            raise BenchError(f"the recovered daemon did not stop cleanly; see {second.log_path}")
    finally:
        feed.halt.set()
        first.kill_group()
        if second is not None:
            second.kill_group()
    run = RecoveryRun(mode, batch.t - killed, ready.t - killed, batch.t - ready.t, int(m["orders"]), restored,
                      second.rss.peak)
    ctx.say(f"recovery: {mode} rep {rep}: first new batch {run.to_first_batch_s:.1f}s after the kill "
            f"(store ready after {run.to_store_ready_s:.1f}s"
            + (f", {restored:,} changelog records restored" if restored is not None else "")
            + f"; the batch held {run.first_batch_orders:,} orders)")
    return run


def _check_exact(stream: OrderStream, feed: PacedFeed, dirs: DaemonDirs, topic: str, daemon: Child) -> None:
    """Every delivered order counted exactly once, after the kill and the restart."""
    if feed.error or feed.failed or len(feed.placed) != feed.sent:
        raise BenchError(f"the recovery feed lost records: {feed.failed} failed {feed.error}")
    targets: dict[int, int] = {}
    for p, o in feed.placed.values():
        targets[p] = max(targets.get(p, 0), o + 1)
    watcher = StoreWatcher(dirs.store, topic, 0.5)
    try:
        wait_until(lambda: watcher.poll() is not None and watcher.committed(targets), DRAIN_TIMEOUT_S,
                   "the recovered daemon to drain the feed", every=0.5, give_up=daemon.exit_reason)
    finally:
        watcher.stop()  # never started: this closes its follower
    state = ours.read_store(dirs)
    require_same("brewstream after recovery", state.counts if state else {}, stream.oracle(feed.last_index))
