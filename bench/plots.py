"""The report's plots, as PNG files beside the results: throughput per system, the latency
CDF of each daemon, the timeline of a SIGKILL (failover and disk loss), and the delay of
each event-time window's final result.

Each function returns the file it wrote, or None when the run has no data for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from bench.summary import TITLES

COLORS = {"ours": "#1f77b4", "kafka streams": "#d62728", "spark native": "#ff7f0e", "quix": "#2ca02c",
          "plain": "#7f7f7f"}
INGEST_NAMES = {"ours": "ours", "kafka streams": "kafka streams", "spark native": "spark native",
                "quix": "quix exactly-once", "plain": "baseline"}


def write_all(results: dict[str, Any], stem: Path) -> list[Path]:
    """Every plot this run has data for, as ``<stem>-<name>.png``."""
    made = [throughput(results, stem.with_name(f"{stem.name}-throughput.png")),
            latency_cdf(results, stem.with_name(f"{stem.name}-latency-cdf.png")),
            takeover_timeline(results, stem.with_name(f"{stem.name}-failover.png")),
            window_delays(results, stem.with_name(f"{stem.name}-windows.png"))]
    return [p for p in made if p is not None]


def _save(fig: Figure, path: Path) -> Path:
    """Every plot's last step: laid out, written at one resolution, its memory let go."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def throughput(results: dict[str, Any], path: Path) -> Path | None:
    ingest = results.get("ingest")
    if not ingest:
        return None
    systems = ingest["systems"]
    present = [(col, name) for col, name in INGEST_NAMES.items() if name in systems]
    sustained = {"ours": (results.get("sustained") or {}).get("highest_sustained_orders_per_s")}
    sustained.update({s: r.get("highest_sustained_orders_per_s") for s, r in results.get("peer_sustained", {}).items()})
    fig, (walls, rates) = plt.subplots(1, 2, figsize=(12, 4.2))
    labels = [TITLES[col] for col, _ in present]
    wall = [systems[name]["wall_s"]["median"] for _, name in present]
    walls.barh(labels, wall, color=[COLORS[col] for col, _ in present])
    walls.invert_yaxis()
    walls.set_xlabel("seconds, launch to exit (lower is better)")
    walls.set_title(f"Cold catch-up of {ingest['orders']:,} records")
    for i, v in enumerate(wall):
        walls.annotate(f"{v:.1f}s", (v, i), xytext=(3, 0), textcoords="offset points", va="center", fontsize=8)
    y = range(len(present))
    catch = [systems[name]["orders_per_s"]["median"] for _, name in present]
    held = [sustained.get(col) or float("nan") for col, _ in present]
    rates.barh([i - 0.2 for i in y], catch, height=0.4, color=[COLORS[col] for col, _ in present],
               label="catch-up, over processing time")
    rates.barh([i + 0.2 for i in y], held, height=0.4, color=[COLORS[col] for col, _ in present], alpha=0.45,
               hatch="//", label="highest sustained input rate")
    rates.set_yticks(list(y), labels)
    rates.invert_yaxis()
    rates.set_xscale("log")
    rates.set_xlabel("orders/s, log scale (higher is better)")
    rates.set_title("Throughput")
    rates.legend(fontsize=8, loc="best")
    return _save(fig, path)


def latency_cdf(results: dict[str, Any], path: Path) -> Path | None:
    visible = results.get("visible")
    if not visible or not any(r.get("cdf_s") for r in visible["systems"].values()):
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for system, r in visible["systems"].items():
        cdf = r.get("cdf_s") or []
        if cdf:
            ax.plot([v * 1000 for v in cdf], [k / (len(cdf) - 1) for k in range(len(cdf))], color=COLORS[system],
                    label=f"{TITLES[system]} (p99 {r['p99_s']['median'] * 1000:,.0f} ms)")
    ax.set_xscale("log")
    ax.set_xlabel("produce -> visible to a read_committed reader, ms (log scale)")
    ax.set_ylabel("share of orders")
    ax.set_title(f"Latency at {visible['rate']:,} orders/s")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return _save(fig, path)


def takeover_timeline(results: dict[str, Any], path: Path) -> Path | None:
    takeover = results.get("takeover")
    if not takeover:
        return None
    modes = [m for m in ("failover", "disk-loss") if any(m in s for s in takeover["systems"].values())]
    if not modes:
        return None
    fig, axes = plt.subplots(1, len(modes), figsize=(6.5 * len(modes), 4.5), squeeze=False)
    for ax, mode in zip(axes[0], modes, strict=True):
        for system, entry in takeover["systems"].items():
            if "timeline" not in entry.get(mode, {}):
                continue
            points = [(t, lat) for t, lat in entry[mode]["timeline"] if lat is not None]
            if points:
                ax.scatter([t for t, _ in points], [lat for _, lat in points], s=4, color=COLORS[system],
                           label=f"{TITLES[system]} (whole again {entry[mode]['whole_s']['median']:.1f}s)")
        ax.axvline(0, color="black", linestyle="--", linewidth=1)
        ax.annotate("SIGKILL", (0, 1), xycoords=("data", "axes fraction"), xytext=(3, -12),
                    textcoords="offset points", fontsize=8)
        ax.set_yscale("log")
        ax.set_xlabel("order produced, seconds after the kill")
        ax.set_ylabel("produce -> visible, s (log scale)")
        ax.set_title("failover to a hot standby" if mode == "failover" else "restart after disk loss")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="upper right", markerscale=3)
    return _save(fig, path)


def window_delays(results: dict[str, Any], path: Path) -> Path | None:
    windows = results.get("windows")
    if not windows or not any(run["delays"] for e in windows["systems"].values() for run in e["runs"]):
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for system, e in windows["systems"].items():
        for k, run in enumerate(e["runs"]):
            if not run["delays"]:
                continue
            ax.plot([end / 60 for end, _ in run["delays"]], [d * 1000 for _, d in run["delays"]], marker="o",
                    markersize=3, linewidth=1, color=COLORS[system], alpha=1.0 if k == 0 else 0.4,
                    label=f"{TITLES[system]} (p50 {e['p50_s']['median'] * 1000:,.0f} ms, "
                          f"p99 {e['p99_s']['median'] * 1000:,.0f} ms)" if k == 0 else None)
    ax.set_yscale("log")
    ax.set_xlabel("window end, minutes of event time after the stream's start")
    ax.set_ylabel("clock past the close -> final result visible, ms (log)")
    ax.set_title(f"Event-time windows: each window's final result ({windows['rate']:,} events/s, "
                 f"event time {windows['speedup']:g}x)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    return _save(fig, path)
