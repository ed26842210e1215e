"""Scenario 1: ingest throughput over one seeded backlog, from empty state every time.

The backlog is produced once (good orders, and one bad record in ``BAD_EVERY`` of the 24
kinds of ``BAD_KINDS``); every run of every system reads all of it: the plain consumer
(the limit), Quix Streams exactly-once and at-least-once, Kafka Streams (EOS v2), Spark's
own stateful aggregation (``availableNow``), and brewstream with ``--available-now``.
The settings of brewstream, Kafka Streams and Spark are swept first (one run each) and
each one's best is repeated. Each run's counts must equal the oracle, or the benchmark
stops.

Catch-up from a cold start: every system also runs ``reps`` times over an empty input
topic with the same settings; ``orders / (wall - median empty wall)`` is the rate a user restarting on a
backlog lives through: start-up and shutdown cancel, the warm-up of the first batches
stays in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from bench import profiling
from bench.context import BenchContext
from bench.dataset import BAD_EVERY, BAD_KINDS, Backlog, produce_backlog
from bench.errors import BenchError
from bench.kafka_topics import create_pipeline, reset_outputs
from bench.runs import IngestRun
from bench.stats import ratio, summarize
from bench.systems import kstreams, ours, plain, quix, spark_native
from topics.catalog import Topics

GUARANTEES = ("exactly-once", "at-least-once")


def run(ctx: BenchContext) -> dict[str, Any]:
    cfg = ctx.cfg
    topics = ctx.topics("ingest")
    create_pipeline(ctx.conn, topics, cfg.partitions)
    ctx.say(f"ingest: producing {cfg.orders:,} records (seed {cfg.seed}, one in {BAD_EVERY:,} bad) to {topics.orders}")
    backlog = produce_backlog(ctx.conn, topics.orders, cfg.orders, cfg.seed)
    ctx.say(f"ingest: {backlog.orders:,} records, {backlog.bad:,} of them bad; {backlog.items:,} items, "
            f"{sum(backlog.expected.values()):,} cups")

    systems: dict[str, list[IngestRun]] = {}
    if cfg.runs("plain"):
        systems["baseline"] = [_say(ctx, rep, plain.ingest(ctx, backlog)) for rep in range(1, cfg.reps + 1)]
    if cfg.runs("quix"):
        for guarantee in GUARANTEES:
            systems[f"quix {guarantee}"] = [_say(ctx, rep, quix.ingest(ctx, backlog, guarantee))
                                            for rep in range(1, cfg.reps + 1)]
    sweeps: dict[str, list[IngestRun]] = {}
    chosen_labels: dict[str, str] = {}
    ks_settings = sp_settings = None
    if cfg.runs("kstreams"):
        ks_settings, sweeps["kafka streams"] = _sweep(
            ctx, "kafka streams", [kstreams.Settings(threads=t) for t in cfg.kstreams_threads],
            lambda s, why: kstreams.ingest(ctx, backlog, s, name=f"kstreams-{why}"))
        systems["kafka streams"] = [_say(ctx, rep, kstreams.ingest(ctx, backlog, ks_settings))
                                    for rep in range(1, cfg.reps + 1)]
        chosen_labels["kafka streams"] = ks_settings.label
        ctx.peer_settings["kafka streams"] = ks_settings
    if cfg.runs("spark"):
        sp_settings, sweeps["spark native"] = _sweep(
            ctx, "spark native", [spark_native.Settings(shuffle_partitions=n) for n in cfg.spark_shuffle_partitions],
            lambda s, why: spark_native.ingest(ctx, backlog, s, name=f"spark-native-{why}"))
        systems["spark native"] = [_say(ctx, rep, spark_native.ingest(ctx, backlog, sp_settings))
                                   for rep in range(1, cfg.reps + 1)]
        chosen_labels["spark native"] = sp_settings.label
        ctx.peer_settings["spark native"] = sp_settings

    sweep: list[IngestRun] = []
    chosen = None
    if cfg.runs("ours"):
        sweep = [_ours(ctx, topics, backlog, settings, "sweep") for settings in _sweep_settings(ctx)]
        best = max(sweep, key=lambda r: r.orders_per_s)
        chosen = next(s for s in _sweep_settings(ctx) if s.label == best.settings)
        ctx.say(f"ingest: brewstream's best settings: {chosen.label}")
        chosen_labels["ours"] = chosen.label
    empty_runs = _empty_walls(ctx, chosen, ks_settings, sp_settings)
    if chosen is not None:
        systems["ours"] = [_say(ctx, rep, _ours(ctx, topics, backlog, chosen, "rep")) for rep in range(1, cfg.reps + 1)]

    result: dict[str, Any] = {
        "orders": backlog.orders, "bad_records": backlog.bad, "bad_kinds": len(BAD_KINDS), "items": backlog.items,
        "topic_partitions": cfg.partitions,
        "systems": {name: _summary(runs) for name, runs in systems.items()},
        "sweep": [_run_dict(r) for r in sweep],
        "peer_sweeps": {name: [_run_dict(r) for r in runs] for name, runs in sweeps.items()},
        "ours_settings": chosen.label if chosen else None,
        "chosen_settings": chosen_labels,
        "ratios": _ratios(systems),
        "catch_up": _catch_up(systems, empty_runs),
        "counts_verified": True,
    }
    if cfg.profile and chosen is not None:
        result["profile"] = _profile(ctx, topics, backlog, chosen)
    return result


S = TypeVar("S", kstreams.Settings, spark_native.Settings)


def _sweep(ctx: BenchContext, system: str, candidates: list[S],
           measure: Callable[[S, str], IngestRun]) -> tuple[S, list[IngestRun]]:
    """One run of each candidate setting of a peer; the fastest is the one repeated. Every
    system gets the setting it runs best with on this machine, as brewstream does."""
    if len(candidates) == 1:
        return candidates[0], []
    runs = []
    for settings in candidates:
        run = measure(settings, "sweep")
        ctx.say(f"ingest: {system} (sweep, {settings.label}): {run.orders_per_s:,.0f} orders/s, "
                f"wall {run.wall_s:.1f}s")
        runs.append(run)
    best = max(zip(candidates, runs, strict=True), key=lambda pair: pair[1].orders_per_s)[0]
    ctx.say(f"ingest: {system}'s best settings: {best.label}")
    return best, runs


def _sweep_settings(ctx: BenchContext) -> list[ours.Settings]:
    return [ours.Settings(max_offsets_per_trigger=cap, master=master)
            for master in ctx.cfg.sweep.masters for cap in ctx.cfg.sweep.caps]


def _ours(ctx: BenchContext, topics: Topics, backlog: Backlog, settings: ours.Settings, why: str) -> IngestRun:
    reset_outputs(ctx.conn, topics, ctx.cfg.partitions)
    run = ours.ingest(ctx, topics, settings, backlog.expected, records=backlog.orders)
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


def _empty_walls(ctx: BenchContext, settings: ours.Settings | None, ks: kstreams.Settings | None,
                 sp: spark_native.Settings | None) -> dict[str, list[float]]:
    """Each system's wall times over an empty input topic, its start-up and shutdown alone:
    ``reps`` runs, the systems in turn (``_catch_up`` takes their median). One run would
    carry its own noise (brewstream's moved by 2.5 s between runs on one machine) into
    every catch-up rate."""
    cfg = ctx.cfg
    topics = ctx.topics("ingest-empty")
    create_pipeline(ctx.conn, topics, cfg.partitions)
    empty = Backlog(topics.orders, 0, 0, {})
    runs: dict[str, list[float]] = {}
    for _ in range(cfg.reps):
        if settings is not None:
            # From empty state like every run over the backlog: an earlier empty run's changelog
            # (its markers) would be restored first, a cost the runs it is subtracted from never pay.
            reset_outputs(ctx.conn, topics, cfg.partitions)
            runs.setdefault("ours", []).append(
                ours.ingest(ctx, topics, settings, {}, name="ours-empty", allow_empty=True).wall_s)
        if cfg.runs("plain"):
            runs.setdefault("baseline", []).append(plain.ingest(ctx, empty).wall_s)
        if cfg.runs("quix"):
            runs.setdefault("quix exactly-once", []).append(quix.ingest(ctx, empty, "exactly-once").wall_s)
        if ks is not None:
            runs.setdefault("kafka streams", []).append(kstreams.ingest(ctx, empty, ks, name="kstreams-empty").wall_s)
        if sp is not None:
            runs.setdefault("spark native", []).append(
                spark_native.ingest(ctx, empty, sp, name="spark-native-empty").wall_s)
    ctx.say("ingest: over an empty input, wall " + ", ".join(
        f"{k} {summarize(w).median:.1f}s ({min(w):.1f}-{max(w):.1f})" for k, w in runs.items()))
    return runs


def _catch_up(systems: dict[str, list[IngestRun]], empty_runs: dict[str, list[float]]) -> dict[str, Any]:
    """orders / (wall - median empty wall), per system (median over its runs), and the ratios."""
    empty = {name: summarize(walls).median for name, walls in empty_runs.items()}
    # A run no longer than the empty input's median has no rate here (the difference is noise).
    per_run = {name: [r.orders / (r.wall_s - empty[name]) for r in systems[name] if r.wall_s > empty[name]]
               for name in empty if systems.get(name)}
    rates = {name: summarize(values) if values else None for name, values in per_run.items()}
    med = {name: s.median for name, s in rates.items() if s is not None}
    return {
        "empty_wall_s": empty,
        "empty_wall_runs_s": empty_runs,
        "orders_per_s": rates,
        "ratios": {f"ours/{name}": ratio(med.get("ours"), med.get(name)) for name in med if name != "ours"},
    }


def _ratios(systems: dict[str, list[IngestRun]]) -> dict[str, float | None]:
    med = {name: summarize([r.orders_per_s for r in runs]).median for name, runs in systems.items()}
    return {f"ours/{name}": ratio(med.get("ours"), med[name]) for name in med if name != "ours"}


def _profile(ctx: BenchContext, topics: Topics, backlog: Backlog, settings: ours.Settings) -> dict[str, Any]:
    if not profiling.available():
        return {"skipped": "py-spy is not installed"}
    reset_outputs(ctx.conn, topics, ctx.cfg.partitions)
    raw = ctx.work / "profile" / "ours-ingest.pyspy.txt"
    raw.parent.mkdir(parents=True, exist_ok=True)
    ctx.say(f"ingest: profiling one brewstream run under py-spy ({settings.label})")
    try:
        run = ours.ingest(ctx, topics, settings, backlog.expected, prefix_args=profiling.record_args(raw),
                          records=backlog.orders, name="ours-profiled")
    except BenchError as exc:
        # py-spy needs ptrace; where it is not allowed the measurements still stand.
        ctx.say(f"ingest: the profiled run failed ({exc}); no profile")
        return {"skipped": str(exc)}
    summary = profiling.summarize(raw)
    kept = ctx.cfg.output.parent / "ours-ingest.pyspy.txt"
    kept.write_bytes(raw.read_bytes())
    return {"collapsed_stacks": str(kept), "orders_per_s_under_profiler": run.orders_per_s,
            "batch_timings": run.detail, **summary}
