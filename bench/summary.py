"""The one table a reader starts with: systems as columns, scenarios as rows, each cell a
figure and its ratio to brewstream's (pure: results in, rows out).

Every figure is the median of its runs in this benchmark run. A ratio is the system's
figure divided by brewstream's; whether lower or higher is better depends on the row.
``leads`` names the best of the stateful systems in each row (the plain consumer is the
limit, no state and no guarantee, and never leads).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MiB = 2**20

# (key in the summary, column title): brewstream first, the plain consumer (the limit) last.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("ours", "brewstream"),
    ("kafka streams", "Kafka Streams"),
    ("spark native", "Spark native"),
    ("quix", "Quix Streams"),
    ("plain", "plain consumer"),
)
STATEFUL = ("ours", "kafka streams", "spark native", "quix")
TITLES = dict(COLUMNS)


@dataclass
class Row:
    label: str
    short: str  # for sentences: "the cold catch-up's wall"
    unit: str
    lower_is_better: bool
    fmt: Callable[[float], str]
    values: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)  # a word instead of a figure ("no standby")
    at_least: set[str] = field(default_factory=set)  # figures that are lower bounds (every step held)

    def ratio(self, system: str) -> float | None:
        ours, value = self.values.get("ours"), self.values.get(system)
        return value / ours if ours and value is not None else None

    def leader(self) -> str | None:
        """The best stateful system of the row, if two or more have a figure."""
        have = {s: v for s, v in self.values.items() if s in STATEFUL}
        if len(have) < 2:
            return None
        pick = min if self.lower_is_better else max
        return pick(have, key=lambda s: have[s])

    def cells(self) -> list[str]:
        out = []
        for system, _title in COLUMNS:
            value = self.values.get(system)
            if value is None:
                out.append(self.notes.get(system, "-"))
                continue
            r = self.ratio(system)
            shown = (">= " if system in self.at_least else "") + self.fmt(value)
            out.append(shown if system == "ours" or r is None else f"{shown} ({r:.2f}x)")
        return out


def rows(results: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    ingest = results.get("ingest")
    if ingest:
        systems = ingest["systems"]
        n = ingest["orders"]
        names = {"ours": "ours", "kafka streams": "kafka streams", "spark native": "spark native",
                 "quix": "quix exactly-once", "plain": "baseline"}
        wall = Row(f"cold catch-up of {n:,} records: whole process, launch to exit, s", "the cold catch-up's wall",
                   "s", True, _s)
        startup = Row("start-up: the same command over an empty input, s", "start-up", "s", True, _s)
        rate = Row("catch-up rate without start-up: records / processing time, records/s",
                   "the catch-up rate without start-up", "records/s", False, _n)
        rss = Row("peak RSS of the process tree, catch-up, MiB", "memory in a catch-up", "MiB", True, _mib)
        empty = ingest.get("catch_up", {}).get("empty_wall_s", {})
        for col, name in names.items():
            if name in systems:
                wall.values[col] = _med(systems[name]["wall_s"])
                rate.values[col] = _med(systems[name]["orders_per_s"])
                rss.values[col] = _med(systems[name]["peak_rss_bytes"])
            if name in empty:
                startup.values[col] = float(empty[name])
        out += [wall, startup, rate]
    sustained = Row("highest sustained input rate, orders/s", "the highest sustained rate", "orders/s", False, _n)
    if "sustained" in results:
        ours = results["sustained"]
        if ours.get("highest_sustained_orders_per_s"):
            sustained.values["ours"] = float(ours["highest_sustained_orders_per_s"])
            if str(ours.get("limited_by", "")).startswith(("none", "feed")):
                sustained.at_least.add("ours")
    for system, r in results.get("peer_sustained", {}).items():
        if r.get("highest_sustained_orders_per_s"):
            sustained.values[system] = float(r["highest_sustained_orders_per_s"])
            if str(r.get("limited_by", "")).startswith(("none", "feed")):
                sustained.at_least.add(system)
        elif r.get("steps"):
            sustained.notes[system] = "none of the steps"
    if sustained.values or sustained.notes:
        out.append(sustained)
    visible = results.get("visible")
    if visible:
        rate_s = f"{visible['rate']:,}/s"
        p50 = Row(f"produce -> visible to a read_committed reader at {rate_s}, p50 ms", "median latency", "ms", True,
                  _ms)
        p99 = Row(f"produce -> visible to a read_committed reader at {rate_s}, p99 ms", "p99 latency", "ms", True, _ms)
        for system, r in visible["systems"].items():
            if r.get("p50_s"):
                p50.values[system] = _med(r["p50_s"])
            if r.get("p99_s"):
                p99.values[system] = _med(r["p99_s"])
        out += [p50, p99]
    restore = results.get("restore")
    if restore:
        row = Row(f"restore after disk loss: {restore['records']:,} changelog records read into state, records/s",
                  "restore", "records/s", False, _n)
        for name, col in (("ours", "ours"), ("kafka streams", "kafka streams"), ("quix", "quix"), ("limit", "plain")):
            if name in restore["systems"]:
                row.values[col] = _med(restore["systems"][name]["records_per_s"])
        row.notes["spark native"] = "see disk loss"
        out.append(row)
    takeover = results.get("takeover")
    if takeover:
        loss = Row("SIGKILL + disk loss -> output whole again (restart on an empty local disk), s",
                   "recovery after disk loss", "s", True, _s)
        fail = Row("SIGKILL -> output whole again with a hot standby, s", "failover", "s", True, _s)
        for system, modes in takeover["systems"].items():
            for mode, row in (("disk-loss", loss), ("failover", fail)):
                if mode not in modes:
                    continue
                if "whole_s" in modes[mode]:
                    row.values[system] = _med(modes[mode]["whole_s"])
                else:
                    row.notes[system] = f"could not hold {takeover['rate']:,}/s"
            if "failover" not in modes:
                fail.notes[system] = "no standby"
        fail.notes.setdefault("quix", "no standby")
        out += [loss, fail]
    windows = results.get("windows")
    if windows:
        p50 = Row("event-time window closed -> its final result visible to a read_committed reader, p50 ms",
                  "the median delay of a window's final result", "ms", True, _ms)
        p99 = Row("event-time window closed -> its final result visible to a read_committed reader, p99 ms",
                  "the p99 delay of a window's final result", "ms", True, _ms)
        for system, r in windows["systems"].items():
            p50.values[system] = _med(r["p50_s"])
            p99.values[system] = _med(r["p99_s"])
        out += [p50, p99]
    if ingest:
        out.append(rss)
    if visible:
        row = Row(f"peak RSS of the process tree, daemon at {visible['rate']:,}/s, MiB", "memory as a daemon", "MiB",
                  True, _mib)
        for system, r in visible["systems"].items():
            row.values[system] = _med(r["peak_rss_bytes"])
        out.append(row)
    if windows:
        row = Row(f"peak RSS of the process tree, event-time windows at {windows['rate']:,} events/s, MiB",
                  "memory in the windows scenario", "MiB", True, _mib)
        for system, r in windows["systems"].items():
            row.values[system] = _med(r["peak_rss_bytes"])
        out.append(row)
    return out


def peers_lead(table: list[Row]) -> list[str]:
    """One plain sentence per row where a peer does better than brewstream."""
    out = []
    for row in table:
        leader = row.leader()
        if leader is None or leader == "ours" or "ours" not in row.values:
            continue
        r = row.ratio(leader)
        out.append(f"{TITLES[leader]} leads on {row.short}: {row.fmt(row.values[leader])} {row.unit} against "
                   f"brewstream's {row.fmt(row.values['ours'])} {row.unit}" + (f" ({r:.2f}x)" if r is not None else ""))
    return out


def _med(summary: Any) -> float:
    return float(summary["median"] if isinstance(summary, dict) else summary.median)


def _s(v: float) -> str:
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def _n(v: float) -> str:
    return f"{v:,.0f}"


def _ms(v: float) -> str:
    return f"{v * 1000:,.0f}"


def _mib(v: float) -> str:
    return f"{v / MiB:,.0f}"
