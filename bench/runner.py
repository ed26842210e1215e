"""One benchmark run: a broker, the data, the scenarios in order, the results."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import asdict
from typing import Any

import orjson

from bench import plots, report
from bench.broker import broker
from bench.config import BenchConfig
from bench.context import BenchContext
from bench.dataset import order_stream, produce_backlog
from bench.kafka_topics import create_pipeline, delete_containing
from bench.machine import describe, describe_commit
from bench.procs import kill_all
from bench.scenarios import (
    ingest,
    latency,
    recovery,
    restore,
    revenue,
    scaling,
    sustained,
    takeover,
    visible,
    windows,
)
from bench.systems import kstreams, ours, plain, quix, spark_native
from service.spark.cache_files import CACHE_ENV, cache_dir


def run(cfg: BenchConfig) -> dict[str, Any]:
    needs_quix = cfg.runs("quix") and (cfg.wants("ingest") or cfg.wants("restore"))
    quix_version = quix.require(cfg.quix_python) if needs_quix else None
    kstreams_version = kstreams.require() if cfg.runs("kstreams") else None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work = cfg.work_dir / stamp
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    # A class archive of the benchmark's own, written by a run that counted (``_jvm_archive``),
    # unless one is chosen: what an earlier run elsewhere left in the user's cache may not be.
    os.environ.setdefault(CACHE_ENV, str((cfg.work_dir / "jvm-cache").resolve()))
    results: dict[str, Any] = {
        "label": cfg.label,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {**describe(quix_version), "kafka_streams": kstreams_version},
        "config": asdict(cfg),
        "commit": describe_commit(),
        # The harness cannot keep other work off the machine; the load shows whether any ran.
        "load_average_start": os.getloadavg(),
    }
    try:
        with broker(work / "kafka", cfg.bootstrap) as (conn, broker_pid):
            ctx = BenchContext(cfg, conn, work, stamp, broker_pid)
            ctx.say(f"broker at {conn.bootstrap}; work dir {work}")
            try:
                _scenarios(ctx, results)
            finally:
                kill_all()
                if cfg.bootstrap is not None:
                    delete_containing(conn, f"bench-{stamp}")
    finally:
        kill_all()
        if not cfg.keep_work:
            shutil.rmtree(work, ignore_errors=True)
    results["duration_s"] = time.monotonic() - started
    results["load_average_end"] = os.getloadavg()
    report.write_json(results, cfg.output)
    saved = orjson.loads(cfg.output.read_bytes())  # plain JSON values from here on, as a later reader sees them
    pictures = plots.write_all(saved, cfg.output.with_suffix(""))
    cfg.output.with_suffix(".md").write_text(report.markdown(saved, pictures))
    report.print_tables(results)
    print(f"results written to {cfg.output} and {cfg.output.with_suffix('.md')}"
          + (f"; plots: {', '.join(p.name for p in pictures)}" if pictures else ""))
    return results


def _scenarios(ctx: BenchContext, results: dict[str, Any]) -> None:
    cfg = ctx.cfg
    ours_runs = cfg.runs("ours")
    if cfg.starts_spark() and ours_runs:
        results["jvm_archive"] = _jvm_archive(ctx)
    if cfg.wants("ingest"):
        results["ingest"] = ingest.run(ctx)
    if cfg.wants("scaling") and ours_runs:
        results["scaling"] = scaling.run(ctx)
    if cfg.wants("restore"):
        results["restore"] = restore.run(ctx)
    if cfg.wants("latency") or cfg.wants("recovery") or cfg.wants("sustained"):
        need = latency.stream_length(ctx)
        ctx.say(f"generating {need:,} orders for the fed scenarios")
        stream = order_stream(cfg.seed, need)
        if cfg.wants("latency"):
            if ours_runs:
                results["latency"] = latency.run(ctx, stream)
            results["visible"] = visible.run(ctx, stream)
        if cfg.wants("sustained"):
            if ours_runs:
                results["sustained"] = sustained.run(ctx, stream, _plain_rate(ctx, results))
            results["peer_sustained"] = sustained.run_peers(ctx, stream, _peer_rates(ctx, results))
        if cfg.wants("recovery"):
            if ours_runs:
                results["recovery"] = recovery.run(ctx, stream)
            results["takeover"] = takeover.run(ctx, stream)
    if cfg.wants("windows") and (ours_runs or cfg.runs("kstreams")):
        results["windows"] = windows.run(ctx)
    if cfg.wants("revenue") and (ours_runs or cfg.runs("kstreams")):
        results["revenue"] = revenue.run_all(ctx)


ARCHIVE_RUN_ORDERS = 20_000


def _jvm_archive(ctx: BenchContext) -> dict[str, Any]:
    """One run over a small backlog before anything is measured, so that Spark's class
    archive (``service.spark.jvm_archive``) exists and no measured run pays for writing it: every
    start maps it, as every start after a machine's first does. The archive holds the
    classes its writer loaded, so that run counts orders, as a user's daemon has before it
    stops: one over an empty input leaves the batch's own classes out (BENCHMARKS.md).
    ``BREWSTREAM_JVM_CACHE=off`` measures without it."""
    topics = ctx.topics("jvm-archive")
    create_pipeline(ctx.conn, topics, ctx.cfg.partitions)
    small = produce_backlog(ctx.conn, topics.orders, ARCHIVE_RUN_ORDERS, ctx.cfg.seed + 1)
    run = ours.ingest(ctx, topics, ours.Settings(), small.expected, name="ours-jvm-archive")
    cache = cache_dir()
    ctx.say(f"Spark's class archive: {cache or 'off'} (the run that ensured it took {run.wall_s:.1f}s)")
    return {"cache": str(cache) if cache else "off", "first_run_wall_s": run.wall_s}


def _peer_rates(ctx: BenchContext, results: dict[str, Any]) -> dict[str, float]:
    """Each peer's catch-up rate over processing time in this run: from the ingest
    scenario, or measured now on a backlog of ``--orders``."""
    systems = results.get("ingest", {}).get("systems", {})
    rates = {name: float(systems[name]["orders_per_s"].median) for name in ("kafka streams", "spark native")
             if name in systems}
    missing = [name for name in ("kafka streams", "spark native") if name not in rates
               and ctx.cfg.runs({"kafka streams": "kstreams", "spark native": "spark"}[name])]
    if missing:
        topics = ctx.topics("sustained-reference")
        create_pipeline(ctx.conn, topics, ctx.cfg.partitions)
        backlog = produce_backlog(ctx.conn, topics.orders, ctx.cfg.orders, ctx.cfg.seed)
        for name in missing:
            run = (kstreams.ingest(ctx, backlog, ctx.peer_settings.get(name) or kstreams.Settings())
                   if name == "kafka streams" else
                   spark_native.ingest(ctx, backlog, ctx.peer_settings.get(name) or spark_native.Settings()))
            rates[name] = run.orders_per_s
    return rates


def _plain_rate(ctx: BenchContext, results: dict[str, Any]) -> float:
    """The plain consumer's read rate of this run: from the ingest scenario, or read now."""
    if "baseline" in results.get("ingest", {}).get("systems", {}):
        return float(results["ingest"]["systems"]["baseline"]["orders_per_s"].median)
    topics = ctx.topics("sustained-baseline")
    create_pipeline(ctx.conn, topics, ctx.cfg.partitions)
    backlog = produce_backlog(ctx.conn, topics.orders, ctx.cfg.orders, ctx.cfg.seed)
    return plain.ingest(ctx, backlog).orders_per_s
