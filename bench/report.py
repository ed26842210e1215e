"""The results: one JSON file for machines, the same tables for a terminal and for Markdown.

Each scenario's results become ``Section``s (a table and the lines under it) once;
``print_tables`` renders them with rich, ``markdown`` as GitHub tables for BENCHMARKS.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from bench import summary
from bench.config import REPO
from bench.stats import Summary

# How each system is set up and why that is fair to it: part of every Markdown report.
METHOD = REPO / "docs" / "benchmark-peers.md"

MiB = 2**20


@dataclass
class Section:
    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    text_columns: int = 1  # leading columns of text (left-aligned); the rest are figures


def write_json(results: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=str))


def print_tables(results: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console(width=160)
    for line in header(results):
        console.print(line, markup=False)
    for section in [*headline(results), *sections(results)]:
        table = Table(title=section.title)
        for i, col in enumerate(section.columns):
            table.add_column(col, justify="left" if i < section.text_columns else "right")
        for row in section.rows:
            table.add_row(*row)
        console.print(table)
        for note in section.notes:
            console.print(note, markup=False)


def markdown(results: dict[str, Any], plots: list[Path] | None = None) -> str:
    """The report: the headline table, the plots (files beside the report), how each
    system is set up, then every scenario's own tables."""
    out = ["# brewstream against Kafka Streams, Spark, Quix Streams and a plain consumer", ""]
    out += [f"_{line}_  " for line in header(results)]
    for section in headline(results):
        out += _md_section(section)
    if plots:
        out += ["", *(f"![{p.stem}]({p.name})" for p in plots)]
    if METHOD.is_file():
        method = METHOD.read_text().strip()
        out += ["", "#" + method if method.startswith("# ") else method]  # a section of this report
    out += ["", "## Every scenario's figures"]
    for section in sections(results):
        out += _md_section(section)
    return "\n".join(out) + "\n"


def _md_section(section: Section) -> list[str]:
    out = ["", f"**{section.title}**", "", "| " + " | ".join(section.columns) + " |",
           "|" + "|".join(":---" if i < section.text_columns else "---:" for i in range(len(section.columns))) + "|"]
    out += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in section.rows]
    if section.notes:
        out += [""] + [f"{note}  " for note in section.notes]
    return out


def headline(results: dict[str, Any]) -> list[Section]:
    """The one table a reader starts with (``bench.summary``)."""
    table = summary.rows(results)
    if not table:
        return []
    sec = Section("brewstream and its peers, side by side: median figure (its ratio to brewstream's)",
                  ["", *(title for _, title in summary.COLUMNS), "leads"])
    for row in table:
        leader = row.leader()
        sec.rows.append([row.label, *row.cells(), summary.TITLES[leader] if leader else "-"])
    sec.notes.append("a ratio is the system's figure / brewstream's: below 1 is better for times and memory, above 1 "
                     "for rates; '>=': every step held, the figure is a lower bound; 'leads' is the best of the four "
                     "stateful systems (the plain consumer is the limit: "
                     "no state, no changelog, no guarantee); '-': not measured or does not apply")
    sec.notes += [f"where a peer leads: {line}" for line in summary.peers_lead(table)]
    behind = [summary.TITLES.get(s, s) for s, e in results.get("visible", {}).get("systems", {}).items()
              if not e.get("keeps_up", True)]
    if behind:
        sec.notes.append(f"fell behind the {results['visible']['rate']:,}/s feed in the latency runs (their latency "
                         f"climbed through the run): {', '.join(behind)}")
    sec.notes.append("every system's counts were checked against the oracle after every run; a miscount stops the "
                     "benchmark (the revenue join's are recorded in its table instead: the two systems' rules differ)")
    return [sec]


def header(results: dict[str, Any]) -> list[str]:
    lines = [results["label"]] if results.get("label") else []
    m = results.get("machine", {})
    lines.append(f"{m.get('cpus')} CPUs ({m.get('cpu_model')}), {m.get('memory_gib')} GiB; Python {m.get('python')}, "
                 f"{m.get('java')}; pyspark {m.get('pyspark')}, Kafka {m.get('kafka_broker')}, Kafka Streams "
                 f"{m.get('kafka_streams') or '-'}, quixstreams {m.get('quixstreams') or '-'}; brewstream at commit "
                 f"{results.get('commit') or 'unknown'}")
    start, end = results.get("load_average_start"), results.get("load_average_end")
    if start and end:
        lines.append(f"load average (1/5/15 min) at start {_loads(start)}, at end {_loads(end)}; "
                     f"{results.get('duration_s', 0) / 60:.0f} min in all")
    return lines


def sections(results: dict[str, Any]) -> list[Section]:
    out: list[Section] = []
    if "ingest" in results:
        out += _ingest(results["ingest"])
    if "scaling" in results:
        out.append(_scaling(results["scaling"]))
    if "restore" in results:
        out.append(_restore(results["restore"]))
    if "latency" in results:
        out.append(_latency(results["latency"]))
    if "visible" in results:
        out.append(_visible(results["visible"]))
    if "sustained" in results:
        out.append(_sustained(results["sustained"]))
    for system, r in results.get("peer_sustained", {}).items():
        out.append(_peer_sustained(system, r))
    if "recovery" in results:
        out.append(_recovery(results["recovery"]))
    if "takeover" in results:
        out.append(_takeover(results["takeover"]))
    if "windows" in results:
        out.append(_windows(results["windows"]))
    if "revenue" in results:
        out.append(_revenue(results["revenue"]))
    return out


def spread(s: Summary | dict[str, Any] | None, fmt: Callable[[float], str]) -> str:
    """``median (min..max)`` of a summary (or of its JSON form)."""
    if s is None:
        return "-"
    if isinstance(s, dict):
        s = Summary(**s)
    if s.n == 1:
        return fmt(s.median)
    return f"{fmt(s.median)} ({fmt(s.min)}..{fmt(s.max)})"


def _loads(values: list[float]) -> str:
    return "/".join(f"{v:.1f}" for v in values)


def _n(v: float) -> str:
    return f"{v:,.0f}"


def _s(v: float) -> str:
    return f"{v:.2f}"


def _ms(v: float) -> str:
    return f"{v * 1000:,.0f}"


def _mib(v: float) -> str:
    return f"{v / MiB:,.0f}"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _ingest(r: dict[str, Any]) -> list[Section]:
    reps = spread_n(r["systems"]["ours"]["orders_per_s"])
    main = Section(f"1. Ingest: {r['orders']:,} orders ({r['items']:,} items), median (min..max) of {reps} run(s)",
                   ["system", "settings", "orders/s", "processing s", "start-up s", "wall s", "peak RSS MiB"],
                   text_columns=2)
    for name, s in r["systems"].items():
        main.rows.append([name, s["settings"], spread(s["orders_per_s"], _n), spread(s["processing_s"], _s),
                          spread(s["startup_s"], _s), spread(s["wall_s"], _s), spread(s["peak_rss_bytes"], _mib)])
    ratios = ", ".join(f"{k} = {_x(v)}" for k, v in r["ratios"].items())
    main.notes.append(f"ratios of median orders/s: {ratios}; counts verified equal to the oracle for every run")
    if r.get("bad_records"):
        main.notes.append(f"{r['bad_records']:,} of the records are bad ({r['bad_kinds']} kinds in turn, one record in "
                          f"{r['orders'] // max(1, r['bad_records']):,}); every system skips them; rates are over "
                          "all records")
    if "ours" not in r["systems"]:
        return [main, *([_catch_up(r["catch_up"], r["systems"])] if r.get("catch_up") else [])]
    ours = r["systems"]["ours"]["runs"][0]
    parts = ", ".join(f"{k} {_mib(v)} MiB" for k, v in sorted(ours["rss_parts_at_peak"].items()))
    main.notes.append(f"brewstream's process tree at its peak (root = Python driver, jvm = Spark, children = Python "
                      f"workers): {parts}")
    cpu = ours["detail"].get("cpu_s")
    if cpu:
        total = sum(cpu.values())
        main.notes.append(f"CPU seconds of brewstream's first run, by process (whole run, start-up included; "
                          f"wall {ours['wall_s']:.1f}s): " + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items())
                          + f"; {total:.1f} in all")
    catch = r.get("catch_up")
    sections = [main]
    if catch:
        sections.append(_catch_up(catch, r["systems"]))
    sweep = Section("brewstream settings tried (one run each; the best is repeated above)",
                    ["settings", "orders/s", "after 1st batch", "start-up s", "batches", "1st batch s", "aggregate s",
                     "changelog s", "store s", "between batches s"])
    for run in r["sweep"]:
        d = run["detail"]
        warm = d["after_first_batch_orders_per_s"]
        sweep.rows.append([run["settings"], _n(run["orders_per_s"]), "-" if warm is None else _n(warm),
                           _s(run["startup_s"]), str(d["batches"]), _s(d["first_batch_s"]), _s(d["aggregate_s"]),
                           _s(d["changelog_s"]), _s(d["store_s"]), _s(d["between_batches_s"])])
    out = [*sections, sweep]
    for system, runs in r.get("peer_sweeps", {}).items():
        if not runs:
            continue
        sec = Section(f"{summary.TITLES.get(system, system)} settings tried (one run each; the best is repeated above)",
                      ["settings", "orders/s", "start-up s", "wall s", "peak RSS MiB"])
        for run in runs:
            sec.rows.append([run["settings"], _n(run["orders_per_s"]), _s(run["startup_s"]), _s(run["wall_s"]),
                             _mib(run["peak_rss_bytes"])])
        out.append(sec)
    profile = r.get("profile")
    if profile and "roles" in profile:
        for role, data in profile["roles"].items():
            if role == "other":
                continue
            sec = Section(f"py-spy, brewstream {role}: {data['cpu_s']:.1f} CPU-s sampled in one profiled run",
                          ["where", "CPU-s", "share %"])
            for name, seconds, share in data["categories"]:
                sec.rows.append([name, f"{seconds:.1f}", f"{share * 100:.1f}"])
            out.append(sec)
    return out


def _catch_up(c: dict[str, Any], systems: dict[str, Any]) -> Section:
    sec = Section("Catch-up from a cold start: orders / (wall - median wall over an empty input), median (min..max)",
                  ["system", "orders/s", "wall s", "empty-input wall s"])
    for name, rate in c["orders_per_s"].items():
        runs = c.get("empty_wall_runs_s", {}).get(name)
        empty = _s(c["empty_wall_s"][name]) + (f" ({_s(min(runs))}..{_s(max(runs))})" if runs else "")
        sec.rows.append([name, spread(rate, _n), spread(systems[name]["wall_s"], _s), empty])
    sec.notes.append("ratios: " + ", ".join(f"{k} = {_x(v)}" for k, v in c["ratios"].items())
                     + "; the empty-input wall is each system's start-up and shutdown alone")
    sec.notes.append("a rate from the difference of two walls is as noisy as the start-up it subtracts: the headline "
                     "table judges a cold start by its whole wall and reports start-up apart; '-': a run over the "
                     "backlog took no longer than the median run over an empty input")
    return sec


def spread_n(s: Summary | dict[str, Any]) -> int:
    return s["n"] if isinstance(s, dict) else s.n


def _scaling(r: dict[str, Any]) -> Section:
    reps = spread_n(r["setups"][0]["orders_per_s"])
    sec = Section(f"5. Scaling out: ingest of {r['orders']:,} orders ({r['topic_partitions']} topic partitions) on "
                  f"more executor cores, median (min..max) of {reps} run(s)",
                  ["set-up", "executor cores", "orders/s", "vs local[1]", "processing s", "start-up s", "wall s",
                   "on the driver: changelog + store s"])
    for row in r["setups"]:
        sec.rows.append([row["setup"], str(row["slots"]), spread(row["orders_per_s"], _n), _x(row["vs_local1"]),
                         spread(row["processing_s"], _s), spread(row["startup_s"], _s), spread(row["wall_s"], _s),
                         spread(row["driver_commit_s"], _s)])
    sec.notes.append(f"{r['setups'][0]['batches']} batch(es) per run; counts verified equal to the oracle for every "
                     "run; cluster executors ran brewstream from the zip the driver ships")
    return sec


def _restore(r: dict[str, Any]) -> Section:
    sec = Section(f"2. Restore: {r['records']:,} changelog records over {r['keys']:,} keys, median (min..max)",
                  ["system", "records/s", "seconds", "wall s", "peak RSS MiB"])
    for name, s in r["systems"].items():
        sec.rows.append([name, spread(s["records_per_s"], _n), spread(s["seconds"], _s), spread(s["wall_s"], _s),
                         spread(s["peak_rss_bytes"], _mib)])
    sec.notes.append("ratios of median records/s: " + ", ".join(f"{k} = {_x(v)}" for k, v in r["ratios"].items())
                     + "; restored values verified for every run")
    return sec


def _latency(r: dict[str, Any]) -> Section:
    sec = Section(f"3. Latency at {r['rate']:,} orders/s for {r['seconds']:.0f} s, ms, median (min..max) over runs",
                  ["trigger", "commit p50", "commit p95", "commit p99", "snapshot p50", "snapshot p95",
                   "snapshot p99", "keeps up"])
    for trigger, s in r["triggers"].items():
        sec.rows.append([trigger, *(spread(s[f"{w}_p{q}_s"], _ms) for w in ("commit", "snapshot")
                                    for q in (50, 95, 99)), "yes" if s["keeps_up"] else "no"])
    probes = ", ".join(f"{p['trigger']}: {'keeps up' if p['keeps_up'] else 'falls behind'}" for p in r["probes"])
    sec.notes.append(f"fastest trigger that keeps up: {r['fastest_keeping_up'] or 'none of those probed'} "
                     f"(probes: {probes}); snapshots every {r['flush_s']:.0f} s, store polled every "
                     f"{r['poll_s'] * 1000:.0f} ms")
    return sec


def _sustained(r: dict[str, Any]) -> Section:
    sec = Section(f"Sustained input rate, default flags: steps of {r['seconds_per_step']:.0f}s, lag = produced - "
                  "counted in the committed store",
                  ["step", "target orders/s", "produced orders/s", "max lag", "lag growth/s", "batches",
                   "orders/batch", "batch s", "verdict"])
    for s in r["steps"]:
        verdict = "sustained" if s["sustained"] else "feed-limited" if s["feed_limited"] else "falls behind"
        sec.rows.append([f"{s['fraction']:.2f}x plain", _n(s["rate"]), _n(s["achieved_rate"]), _n(s["max_lag"]),
                         _n(s["lag_growth_per_s"]),
                         str(s["batches"]), _n(s["mean_batch_orders"]), _s(s["mean_batch_s"]), verdict])
    for s in r["steps"][-2:]:
        if s.get("cpu_s"):
            sec.notes.append(f"CPU seconds over the {s['fraction']:.2f}x step, by process: "
                             + ", ".join(f"{k} {v:.1f}" for k, v in s["cpu_s"].items()))
    best = r["highest_sustained_orders_per_s"]
    sec.notes.append(f"plain consumer's read rate in this run {_n(r['plain_read_orders_per_s'])}/s; highest sustained "
                     f"{'-' if best is None else _n(best)}/s = {_x(r['ratio_to_plain'])}; the steps stopped at: "
                     f"{r['limited_by']}; {r['orders_counted']:,} orders produced, all counted; peak RSS "
                     f"{_mib(r['peak_rss_bytes'])} MiB")
    return sec


def _recovery(r: dict[str, Any]) -> Section:
    sec = Section(f"4. Recovery at {r['rate']:,} orders/s, trigger {r['trigger']}, seconds, median (min..max)",
                  ["after", "kill -> first new batch", "kill -> store ready", "store ready -> first batch",
                   "orders in that batch", "changelog records restored"])
    for mode in ("kill9", "disk-loss", "failover"):
        if mode not in r:
            continue
        s = r[mode]
        restored = [run["restored_records"] for run in s["runs"] if run["restored_records"] is not None]
        sec.rows.append([f"{mode} ({len(s['runs'])} kills)", spread(s["to_first_batch_s"], _s),
                         spread(s["to_store_ready_s"], _s),
                         spread(s["store_ready_to_first_batch_s"], _s),
                         ", ".join(f"{run['first_batch_orders']:,}" for run in s["runs"]),
                         ", ".join(f"{n:,}" for n in restored) or "-"])
    sec.notes.append("kill9: restart on the same dirs; disk-loss: restart after deleting the state dir; "
                     "failover: a --standby on dirs of its own takes over (store ready = it took over)")
    sec.notes.append("counts verified exact after every recovery")
    return sec


def _visible(r: dict[str, Any]) -> Section:
    sec = Section(f"Produce -> visible to a read_committed reader of each system's output, at {r['rate']:,} orders/s "
                  f"for {r['seconds']:.0f} s, ms, median (min..max) over runs",
                  ["system", "p50", "p95", "p99", "probes", "peak RSS MiB", "keeps up"])
    for system, e in r["systems"].items():
        sec.rows.append([summary.TITLES.get(system, system), spread(e["p50_s"], _ms), spread(e["p95_s"], _ms),
                         spread(e["p99_s"], _ms), ", ".join(f"{run['probes']:,}" for run in e["runs"]),
                         spread(e["peak_rss_bytes"], _mib), "yes" if e.get("keeps_up") else "no"])
    sec.notes.append(f"one order in {r['probe_every']} carries a probe item (a drink named after it); its latency is "
                     "its first arrival at the reader; keeps up: every probe seen, and the p95 of the last third of "
                     "the run at most 1.5 x that of the first third + 0.25 s; brewstream's output is its changelog, "
                     "Kafka Streams' its output topic, Spark's its Kafka sink (not transactional); each system's "
                     "output matched the oracle after every run")
    return sec


def _peer_sustained(system: str, r: dict[str, Any]) -> Section:
    title = summary.TITLES.get(system, system)
    sec = Section(f"Sustained input rate, {title}: steps of {r['seconds_per_step']:.0f}s at fractions of its own "
                  f"catch-up rate ({_n(r['reference_orders_per_s'])}/s), lag = produced - counted in its output",
                  ["step", "target orders/s", "produced orders/s", "max lag", "lag growth/s", "verdict"])
    for s in r["steps"]:
        verdict = "sustained" if s["sustained"] else "feed-limited" if s["feed_limited"] else "falls behind"
        sec.rows.append([f"{s['fraction']:.2f}x", _n(s["rate"]), _n(s["achieved_rate"]), _n(s["max_lag"]),
                         _n(s["lag_growth_per_s"]), verdict])
    best = r["highest_sustained_orders_per_s"]
    sec.notes.append(f"{r['deployment']}; highest sustained {'-' if best is None else _n(best)}/s; the steps stopped "
                     f"at: {r['limited_by']}; {r['orders_counted']:,} orders produced, all counted; peak RSS "
                     f"{_mib(r['peak_rss_bytes'])} MiB")
    return sec


def _takeover(r: dict[str, Any]) -> Section:
    sec = Section(f"SIGKILL at {r['rate']:,} orders/s -> the output whole again (every order produced up to "
                  f"{r['whole_after_s']:.0f} s after the kill visible to a read_committed reader), s, "
                  "median (min..max)",
                  ["system", "after", "kill -> whole again", "kill -> first new order visible", "peak RSS MiB"],
                  text_columns=2)
    for system, modes in r["systems"].items():
        for mode, e in modes.items():
            if "whole_s" not in e:
                sec.rows.append([summary.TITLES.get(system, system), mode, "could not hold the rate", "-", "-"])
                continue
            sec.rows.append([summary.TITLES.get(system, system), mode, spread(e["whole_s"], _s),
                             spread(e["first_new_s"], _s), spread(e["peak_rss_bytes"], _mib)])
    sec.notes.append("disk-loss: the killed instance restarts at once on an empty local disk (brewstream: state dir "
                     "deleted, Spark checkpoint kept; Kafka Streams: state dir deleted, restored from its changelog; "
                     "Spark: local dirs deleted, checkpoint kept); failover: a hot standby running from the start "
                     "takes over, nothing restarts; each output matched the oracle after every run")
    return sec


def _windows(r: dict[str, Any]) -> Section:
    minutes = r["seconds"] * r["speedup"] / 60
    sec = Section(f"Event-time windows: {r['events']:,} order events ({r['late_events']:,} late) at {r['rate']:,}/s "
                  f"for {r['seconds']:.0f} s, event time {r['speedup']:g}x the feed's ({minutes:.0f} min, "
                  f"{r['oracle_windows']} one-minute windows); clock past a window's close -> its final result "
                  "visible, ms, median (min..max) over runs",
                  ["system", "settings", "when a window is final", "windows", "p50", "p99", "max", "peak RSS MiB"],
                  text_columns=3)
    for system, e in r["systems"].items():
        worst = [run["max_s"] for run in e["runs"] if run["max_s"] is not None]
        sec.rows.append([summary.TITLES.get(system, system), e["settings"],
                         e["clock"],
                         ", ".join(f"{run['windows']} ({run['measured']} timed)" for run in e["runs"]),
                         spread(e["p50_s"], _ms), spread(e["p99_s"], _ms), _ms(max(worst)) if worst else "-",
                         spread(e["peak_rss_bytes"], _mib)])
    ours = r["systems"].get("ours")
    accepted = [run["late_accepted"] for run in ours["runs"]] if ours else []
    batches = [run for run in ours["runs"] if run.get("batch_mean_s")] if ours else []
    sec.notes.append(f"both close a window at the same event-time point, its end + {r['grace_s']:.0f} s: brewstream's "
                     f"watermark delay {r['watermark_delay_s']:.0f} s + allowed lateness "
                     f"{r['allowed_lateness_s']:.0f} s, Kafka Streams' grace {r['grace_s']:.0f} s; brewstream's "
                     "clock is the least of its partitions' (a watermark), Kafka Streams' the highest event time "
                     "of its one windowing task, which reads every partition through a repartition topic")
    sec.notes.append(f"events happen up to {r['lag_max_s']:.0f} s before they are fed, or, {r['late_prob']:.0%} of "
                     f"them, {r['late_lag_s'][0] / 60:.0f}-{r['late_lag_s'][1] / 60:.0f} min before (late: past "
                     f"every rule's close); margins: an on-time event's window closes at least "
                     f"{r['on_time_margin_s']:.0f} s of event time ({r['on_time_margin_feed_s']:.1f} s of feed) "
                     f"after the newest event fed with it, a late one's at least {r['late_margin_s']:.0f} s "
                     f"({r['late_margin_feed_s']:.1f} s of feed) before, so batching and interleaving cannot change "
                     "which events count")
    sec.notes.append("delay: from the produce of the record whose arrival moves the system's clock past the window's "
                     "close to the result's arrival at a read_committed reader of its output; 'timed': the windows "
                     "the feed closed, each checked; every final result equal to the oracle's count and amount, none "
                     "twice, none missing; brewstream's late topic held exactly the late events"
                     + (f"; events brewstream accepted after its watermark had passed their window's end (within "
                        f"the allowed lateness): {', '.join(f'{n:,}' for n in accepted)}" if accepted else ""))
    if batches:
        sec.notes.append("brewstream's batches (start to commit), mean per run: "
                         + ", ".join(f"{run['batch_mean_s']:.2f} s over {run['batches']}" for run in batches)
                         + "; a window's result comes with the batch holding the record that closes it, which "
                         "starts once the batch before it is done and 100 records wait, or 250 ms after that batch "
                         "started (the default: no trigger interval); Kafka Streams "
                         "judges each event as it comes and commits every 100 ms, after one more hop through its "
                         "repartition topic")
    return sec


REVENUE_RULES = {"kafka streams": "item by item: an unpriced item alone to the DLQ",
                 "brewstream": "whole order: an order with an unpriced item to the DLQ"}


def _revenue(r: dict[str, Any]) -> Section:
    sec = Section(f"Revenue: {r['orders']:,} orders ({r['items']:,} items) priced with the menu version valid at their "
                  f"event time ({r['menu_records']:,} versions), catch-up of both topics, median (min..max)",
                  ["system", "vs the oracle", "rule for an item without a price", "orders/s", "processing s",
                   "start-up s", "wall s", "peak RSS MiB"], text_columns=3)
    for name, e in r["systems"].items():
        exact = (f"exact, {e['exact_runs']}/{e['runs']} runs" if e["exact_runs"] == e["runs"] else
                 f"DIFFERENT in {e['runs'] - e['exact_runs']}/{e['runs']} runs")
        sec.rows.append([summary.TITLES.get(name, name) if name != "brewstream" else summary.TITLES["ours"], exact,
                         REVENUE_RULES[name], spread(e["orders_per_s"], _n), spread(e["processing_s"], _s),
                         spread(e["startup_s"], _s), spread(e["wall_s"], _s), spread(e["peak_rss_bytes"], _mib)])
    o = r["oracle"]
    sec.notes.append(f"the as-of oracle over the whole menu history: {o['unpriced_items']:,} items without a price at "
                     f"their time, in {o['refused_orders']:,} orders; {o['partly_priced_orders']:,} of those orders "
                     f"have priced items too, {o['item_rule_cents'] - o['whole_order_rule_cents']:,} cents that "
                     "Kafka Streams counts and brewstream sends to its DLQ with their order; each system is checked "
                     "against its own rule (revenue per drink and per shop, and its DLQ)")
    if "kafka streams" in r["systems"]:
        sec.notes.append(f"Kafka Streams: versioned store (history retention {r['retention_ms'] / 3_600_000:g} h), "
                         f"leftJoin with grace {r['grace_ms'] / 1000:g} s, exactly_once_v2, num.stream.threads="
                         f"{r['threads']}; processing runs from the first order read to every item summed")
    if "brewstream" in r["systems"]:
        sec.notes.append(f"brewstream: `brewstream revenue --available-now --grace {r['grace_ms'] / 1000:g}s "
                         f"--retention {r['retention_ms'] / 3_600_000:g}h`, default flags otherwise "
                         f"({r['ours_settings']}), over the same topics; processing runs from the start of its first "
                         "batch of orders to its last commit")
    sec.notes.append("the input ends with an order of drinks on no menu, later than everything by more than the "
                     "grace (Kafka Streams' join clock moves only with items), and a menu record later than that by "
                     "more than the grace (brewstream's moves with either side); brewstream's DLQ holds that order "
                     "beyond the oracle's, Kafka Streams' join still holds its items when it stops")
    for name, e in r["systems"].items():
        if e["exact_runs"] != e["runs"]:
            sec.notes.append(f"{name} differs from the oracle: {_revenue_diff(e['agreement'])}")
    return sec


def _revenue_diff(agree: dict[str, Any]) -> str:
    drinks = [f"{d} {got if got is not None else '-'} vs {want}" for d, want, got in agree["per_drink"] if got != want]
    text = f"{agree['drinks_equal']}/{agree['drinks']} drinks equal ({', '.join(drinks[:5]) or 'none differ'})"
    if "refused_orders" in agree:
        return (f"{text}; refused {agree['refused_orders']:,} orders vs {agree['oracle_refused_orders']:,}, too late "
                f"{agree['too_late']:,}, waiting {agree['waiting']:,}, other DLQ {agree['other_dlq'] or 'none'}")
    return f"{text}; DLQ {agree['dlq_items']:,} items vs {agree['oracle_unpriced']:,}"
