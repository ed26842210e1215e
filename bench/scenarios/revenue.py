"""The revenue join, Kafka Streams and brewstream side by side (``bench.revenue``).

``--reps`` runs, each on fresh topics filled once: ``--orders`` orders (at most
``--revenue-orders``) and the seeded menu history, the flush order and the closing menu
record. Kafka Streams' versioned join catches up first (the thread count the ingest sweep
chose), then ``brewstream revenue --available-now`` reads the same topics from an empty
state dir with its default flags (but the join's --grace and --retention). Each is checked against the as-of
oracle under its own rule for an item without a price (Kafka Streams': the item alone goes
to the DLQ; brewstream's: its whole order does). A system that disagrees is recorded as
such (its figures kept, ``exact`` false, the differences in the results) and the benchmark
goes on: what the two joins do differently is what this scenario shows.
"""

from __future__ import annotations

from typing import Any

from bench.context import BenchContext
from bench.revenue import JoinSettings, run
from bench.revenue_data import Plan
from bench.revenue_ours import OursSettings
from bench.stats import summarize
from bench.systems import kstreams

SYSTEMS = {"kafka streams": "kstreams", "brewstream": "brewstream"}  # results name -> key of a run


def run_all(ctx: BenchContext) -> dict[str, Any]:
    cfg = ctx.cfg
    peer = ctx.peer_settings.get("kafka streams") or kstreams.Settings()
    plan = Plan(orders=min(cfg.orders, cfg.revenue_orders), seed=cfg.seed)
    settings = JoinSettings(threads=peer.threads, close_menu=True)
    ours = OursSettings() if cfg.runs("ours") else None
    with_ks = cfg.runs("kstreams")
    runs = []
    for rep in range(1, cfg.reps + 1):
        app_id = f"bench-{ctx.stamp}-{ctx.fresh('revenue')}"
        ctx.say(f"revenue: {plan.orders:,} orders priced by Kafka Streams' versioned join and brewstream's, "
                f"run {rep}/{cfg.reps}")
        result = run(ctx.conn, plan, settings, cfg.partitions, ctx.path("revenue"), keep_topics=False,
                     app_id=app_id, kafka_streams=with_ks, ours=ours)
        for name, key in SYSTEMS.items():
            if result[key] is not None and not result[key]["agreement"]["exact"]:
                ctx.say(f"revenue: {name} DIFFERS from the as-of oracle (its rule) in run {rep}: "
                        f"{_differences(result[key]['agreement'])}")
        runs.append(result)
    last = runs[-1]
    systems: dict[str, Any] = {}
    for name, key in SYSTEMS.items():
        mine = [r[key] for r in runs if r[key] is not None]
        if not mine:
            continue
        systems[name] = {
            "orders_per_s": summarize([r["orders_per_s"] for r in mine]),
            "processing_s": summarize([r["processing_s"] for r in mine]),
            "startup_s": summarize([r["startup_s"] for r in mine]),
            "wall_s": summarize([r["wall_s"] for r in mine]),
            "peak_rss_bytes": summarize([float(r["peak_rss_bytes"]) for r in mine]),
            "exact_runs": sum(bool(r["agreement"]["exact"]) for r in mine),
            "runs": len(mine),
            "agreement": mine[-1]["agreement"],  # the last run's, with its differences if any
        }
    return {
        "orders": last["orders"], "items": last["items"], "menu_records": last["menu_records"],
        "grace_ms": settings.grace_ms, "retention_ms": settings.retention_ms, "threads": settings.threads,
        "ours_settings": ours.label if ours else None, "oracle": last["oracle"], "systems": systems,
    }


def _differences(agree: dict[str, Any]) -> str:
    parts = [f"{agree['drinks_equal']}/{agree['drinks']} drinks, {agree['shops_equal']}/{agree['shops']} shops equal"]
    if "dlq_items" in agree:
        parts.append(f"DLQ {agree['dlq_items']} items against {agree['oracle_unpriced']}")
    else:
        parts.append(f"refused {agree['refused_orders']} orders against {agree['oracle_refused_orders']}, too late "
                     f"{agree['too_late']}, waiting {agree['waiting']}, other DLQ {agree['other_dlq']}")
    return "; ".join(parts)
