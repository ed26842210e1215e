"""Scenario 1: ingest throughput over one seeded backlog, from empty state every time.

The backlog is produced once; every run of every system reads all of it: the plain
consumer (the limit), Quix Streams exactly-once and at-least-once, and brewstream with
``--available-now``. brewstream's settings are swept first (one run each) and the best
is repeated. Each run's counts must equal the oracle, or the benchmark stops.

Catch-up from a cold start: every system also runs ``reps`` times over an empty input
topic with the same settings; ``orders / (wall - median empty wall)`` is the rate a user restarting on a
backlog lives through: start-up and shutdown cancel, the warm-up of the first batches
stays in.
"""

from __future__ import annotations

from typing import Any

from bench import profiling
from bench.context import BenchContext
from bench.dataset import Backlog, produce_backlog
from bench.errors import BenchError
from bench.kafka_topics import create_pipeline, reset_outputs
from bench.runs import IngestRun
from bench.stats import ratio, summarize
from bench.systems import ours, plain, quix
from topics.catalog import Topics

GUARANTEES = ("exactly-once", "at-least-once")


def run(ctx: BenchContext) -> dict[str, Any]:
    cfg = ctx.cfg
    topics = ctx.topics("ingest")
    create_pipeline(ctx.conn, topics, cfg.partitions)
    ctx.say(f"ingest: producing {cfg.orders:,} orders (seed {cfg.seed}) to {topics.orders}")
    backlog = produce_backlog(ctx.conn, topics.orders, cfg.orders, cfg.seed)
    ctx.say(f"ingest: {backlog.orders:,} orders, {backlog.items:,} items, {sum(backlog.expected.values()):,} cups")

    systems: dict[str, list[IngestRun]] = {"baseline": [], **{f"quix {g}": [] for g in GUARANTEES}, "ours": []}
    for rep in range(1, cfg.reps + 1):
        systems["baseline"].append(_say(ctx, rep, plain.ingest(ctx, backlog)))
    for guarantee in GUARANTEES:
        for rep in range(1, cfg.reps + 1):
            systems[f"quix {guarantee}"].append(_say(ctx, rep, quix.ingest(ctx, backlog, guarantee)))

    sweep = [_ours(ctx, topics, backlog, settings, "sweep") for settings in _sweep_settings(ctx)]
    best = max(sweep, key=lambda r: r.orders_per_s)
    chosen = next(s for s in _sweep_settings(ctx) if s.label == best.settings)
    ctx.say(f"ingest: brewstream's best settings: {chosen.label}")
    empty_runs = _empty_walls(ctx, chosen)
    for rep in range(1, cfg.reps + 1):
        systems["ours"].append(_say(ctx, rep, _ours(ctx, topics, backlog, chosen, "rep")))

    result: dict[str, Any] = {
        "orders": backlog.orders, "items": backlog.items, "topic_partitions": cfg.partitions,
        "systems": {name: _summary(runs) for name, runs in systems.items()},
        "sweep": [_run_dict(r) for r in sweep],
        "ours_settings": chosen.label,
        "ratios": _ratios(systems),
        "catch_up": _catch_up(systems, empty_runs),
        "counts_verified": True,
    }
    if cfg.profile:
        result["profile"] = _profile(ctx, topics, backlog, chosen)
    return result


def _sweep_settings(ctx: BenchContext) -> list[ours.Settings]:
    return [ours.Settings(max_offsets_per_trigger=cap, master=master)
            for master in ctx.cfg.sweep.masters for cap in ctx.cfg.sweep.caps]


def _ours(ctx: BenchContext, topics: Topics, backlog: Backlog, settings: ours.Settings, why: str) -> IngestRun:
    reset_outputs(ctx.conn, topics, ctx.cfg.partitions)
    run = ours.ingest(ctx, topics, settings, backlog.expected)
    ctx.say(f"ingest: ours ({why}, {settings.label}): {run.orders_per_s:,.0f} orders/s, "
            f"start-up {run.startup_s:.1f}s, {run.detail['batches']} batches")
    return run


def _say(ctx: BenchContext, rep: int, run: IngestRun) -> IngestRun:
    ctx.say(f"ingest: {run.system} rep {rep}: {run.orders_per_s:,.0f} orders/s (processing "
            f"{run.processing_s:.2f}s, start-up {run.startup_s:.2f}s, peak RSS {run.peak_rss / 2**20:,.0f} MiB)")
    return run


def _summary(runs: list[IngestRun]) -> dict[str, Any]:
    return {
        "settings": runs[0].settings,
        "orders_per_s": summarize([r.orders_per_s for r in runs]),
        "processing_s": summarize([r.processing_s for r in runs]),
        "startup_s": summarize([r.startup_s for r in runs]),
        "wall_s": summarize([r.wall_s for r in runs]),
        "wall_orders_per_s": summarize([r.wall_orders_per_s for r in runs]),
        "peak_rss_bytes": summarize([float(r.peak_rss) for r in runs]),
        "runs": [_run_dict(r) for r in runs],
    }


def _run_dict(r: IngestRun) -> dict[str, Any]:
    return {"system": r.system, "settings": r.settings, "orders": r.orders, "orders_per_s": r.orders_per_s,
            "processing_s": r.processing_s, "startup_s": r.startup_s, "wall_s": r.wall_s,
            "peak_rss_bytes": r.peak_rss, "rss_parts_at_peak": r.rss_parts, "detail": r.detail}


def _empty_walls(ctx: BenchContext, settings: ours.Settings) -> dict[str, list[float]]:
    """Each system's wall times over an empty input topic, its start-up and shutdown alone:
    ``reps`` runs, the systems in turn (``_catch_up`` takes their median). One run would
    carry its own noise (brewstream's moved by 2.5 s between runs on one machine) into
    every catch-up rate."""
    topics = ctx.topics("ingest-empty")
    create_pipeline(ctx.conn, topics, ctx.cfg.partitions)
    empty = Backlog(topics.orders, 0, 0, {})
    runs: dict[str, list[float]] = {"ours": [], "baseline": [], "quix exactly-once": []}
    for _ in range(ctx.cfg.reps):
        # From empty state like every run over the backlog: an earlier empty run's changelog
        # (its markers) would be restored first, a cost the runs it is subtracted from never pay.
        reset_outputs(ctx.conn, topics, ctx.cfg.partitions)
        runs["ours"].append(ours.ingest(ctx, topics, settings, {}, name="ours-empty", allow_empty=True).wall_s)
        runs["baseline"].append(plain.ingest(ctx, empty).wall_s)
        runs["quix exactly-once"].append(quix.ingest(ctx, empty, "exactly-once").wall_s)
    ctx.say("ingest: over an empty input, wall " + ", ".join(
        f"{k} {summarize(w).median:.1f}s ({min(w):.1f}-{max(w):.1f})" for k, w in runs.items()))
    return runs


def _catch_up(systems: dict[str, list[IngestRun]], empty_runs: dict[str, list[float]]) -> dict[str, Any]:
    """orders / (wall - median empty wall), per system (median over its runs), and the ratios."""
    empty = {name: summarize(walls).median for name, walls in empty_runs.items()}
    rates = {name: summarize([r.orders / max(1e-9, r.wall_s - empty[name]) for r in systems[name]])
             for name in empty if systems.get(name)}
    med = {name: s.median for name, s in rates.items()}
    return {
        "empty_wall_s": empty,
        "empty_wall_runs_s": empty_runs,
        "orders_per_s": rates,
        "ratios": {
            "ours/baseline": ratio(med.get("ours"), med.get("baseline")),
            "ours/quix exactly-once": ratio(med.get("ours"), med.get("quix exactly-once")),
        },
    }


def _ratios(systems: dict[str, list[IngestRun]]) -> dict[str, float | None]:
    med = {name: summarize([r.orders_per_s for r in runs]).median for name, runs in systems.items()}
    return {
        "ours/quix exactly-once": ratio(med["ours"], med["quix exactly-once"]),
        "ours/quix at-least-once": ratio(med["ours"], med["quix at-least-once"]),
        "ours/baseline": ratio(med["ours"], med["baseline"]),
    }


def _profile(ctx: BenchContext, topics: Topics, backlog: Backlog, settings: ours.Settings) -> dict[str, Any]:
    if not profiling.available():
        return {"skipped": "py-spy is not installed"}
    reset_outputs(ctx.conn, topics, ctx.cfg.partitions)
    raw = ctx.work / "profile" / "ours-ingest.pyspy.txt"
    raw.parent.mkdir(parents=True, exist_ok=True)
    ctx.say(f"ingest: profiling one brewstream run under py-spy ({settings.label})")
    try:
        run = ours.ingest(ctx, topics, settings, backlog.expected, prefix_args=profiling.record_args(raw),
                          name="ours-profiled")
    except BenchError as exc:
        # py-spy needs ptrace; where it is not allowed the measurements still stand.
        ctx.say(f"ingest: the profiled run failed ({exc}); no profile")
        return {"skipped": str(exc)}
    summary = profiling.summarize(raw)
    kept = ctx.cfg.output.parent / "ours-ingest.pyspy.txt"
    kept.write_bytes(raw.read_bytes())
    return {"collapsed_stacks": str(kept), "orders_per_s_under_profiler": run.orders_per_s,
            "batch_timings": run.detail, **summary}
