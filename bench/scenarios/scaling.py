"""Scenario 5 (on request: ``--scenarios scaling``): the same ingest backlog on more and
more executor cores, in one run: ``local[1]``, ``local[2]``, then a standalone cluster
(``sandbox.spark_cluster``) with one and with two one-core workers, and the two-slot
set-ups again with ``--min-partitions`` (the topic has 3 partitions, so 3 tasks leave
one core idle half the time). The set-ups take turns within each repetition.

On the cluster the executors run this harness's Python but import brewstream from the
zip the driver ships, as on a real cluster. What stays on the driver (the merge of one
row per drink and task, the changelog transaction, the store write) is timed from the
daemon's batch line. Each run's counts must equal the oracle.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from typing import Any

from bench.context import BenchContext
from bench.dataset import Backlog, produce_backlog
from bench.kafka_topics import create_pipeline, reset_outputs
from bench.runs import IngestRun
from bench.stats import ratio, summarize
from bench.systems import ours
from sandbox.broker import free_port
from sandbox.spark_cluster import SparkCluster, down, up
from topics.catalog import Topics


@dataclass(frozen=True)
class Setup:
    name: str
    slots: int  # executor cores
    master: str = ""  # empty: the cluster's URL
    workers: int = 0  # 0: a local master
    min_partitions: int | None = None


def setups(min_partitions: int | None) -> list[Setup]:
    out = [Setup("local[1]", 1, "local[1]"), Setup("local[2]", 2, "local[2]"),
           Setup("cluster, 1 worker x 1 core", 1, workers=1), Setup("cluster, 2 workers x 1 core", 2, workers=2)]
    if min_partitions:
        out += [replace(s, name=f"{s.name}, --min-partitions {min_partitions}", min_partitions=min_partitions)
                for s in out if s.slots == 2]
    # Local ones first, then the cluster as it grows: one worker, then two.
    return sorted(out, key=lambda s: (s.workers, s.min_partitions or 0))


def run(ctx: BenchContext) -> dict[str, Any]:
    cfg = ctx.cfg
    topics = ctx.topics("scaling")
    create_pipeline(ctx.conn, topics, cfg.partitions)
    ctx.say(f"scaling: producing {cfg.scaling_orders:,} orders (seed {cfg.seed}) to {topics.orders}")
    backlog = produce_backlog(ctx.conn, topics.orders, cfg.scaling_orders, cfg.seed)
    runs: dict[str, list[IngestRun]] = {s.name: [] for s in setups(cfg.scaling_min_partitions)}
    cluster = SparkCluster(ctx.work / "spark", free_port(), free_port(), workers=1, cores=1, memory="1g")
    try:
        # Set-ups take turns within each repetition, so that a change in the machine's
        # load during the run spreads over all of them.
        for rep in range(1, cfg.reps + 1):
            for setup in setups(cfg.scaling_min_partitions):
                master = setup.master
                if setup.workers:
                    cluster = replace(cluster, workers=setup.workers)  # grows or shrinks to that many workers
                    ctx.say(f"scaling: {up(cluster)}")
                    master = cluster.url
                runs[setup.name].append(_run(ctx, topics, backlog, setup, master, rep))
    finally:
        down(cluster)
    base = summarize([r.orders_per_s for r in runs[setups(None)[0].name]]).median
    rows = []
    for setup in setups(cfg.scaling_min_partitions):
        rs = runs[setup.name]
        ops = summarize([r.orders_per_s for r in rs])
        rows.append({
            "setup": setup.name, "slots": setup.slots, "orders_per_s": ops, "vs_local1": ratio(ops.median, base),
            "processing_s": summarize([r.processing_s for r in rs]),
            "startup_s": summarize([r.startup_s for r in rs]),
            "wall_s": summarize([r.wall_s for r in rs]),
            "driver_commit_s": summarize([r.detail["changelog_s"] + r.detail["store_s"] for r in rs]),
            "batches": rs[0].detail["batches"],
        })
    return {"orders": backlog.orders, "items": backlog.items, "topic_partitions": cfg.partitions,
            "executor_python": sys.executable, "setups": rows, "counts_verified": True}


def _run(ctx: BenchContext, topics: Topics, backlog: Backlog, setup: Setup, master: str, rep: int) -> IngestRun:
    extra: list[str] = []
    if setup.workers:
        # The executors run this Python; brewstream itself reaches them in the shipped zip.
        extra += ["--conf", f"spark.pyspark.python={sys.executable}"]
    if setup.min_partitions:
        extra += ["--min-partitions", str(setup.min_partitions)]
    settings = ours.Settings(master=master, extra=tuple(extra), name=setup.name)
    reset_outputs(ctx.conn, topics, ctx.cfg.partitions)
    run = ours.ingest(ctx, topics, settings, backlog.expected, name="ours-scaling", records=backlog.orders)
    ctx.say(f"scaling: {setup.name} rep {rep}: {run.orders_per_s:,.0f} orders/s (processing {run.processing_s:.2f}s, "
            f"start-up {run.startup_s:.1f}s, wall {run.wall_s:.1f}s)")
    return run
