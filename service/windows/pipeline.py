"""``brewstream windows``: the event-time windows pipeline, as the runner needs it."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from service.dlq.records import warn_internal
from service.engine.contract import Pipeline, RunConfig
from service.engine.runner import run_pipeline
from service.engine.sink import PHASES_PATTERN
from service.ops.metrics import Metrics
from service.records.event_time import DEFAULT_MAX_AHEAD_NS, MAX_AHEAD_LIMIT_NS
from service.windows.aggregate import aggregate_events
from service.windows.assign import MAX_SPAN_NS, WindowSpec
from service.windows.clock_guard import guard_clocks
from service.windows.http import routes
from service.windows.output import iso
from service.windows.sink import WindowsReport, WindowsSink, check_shape
from service.windows.step import WindowsConfig
from service.windows.table import WindowsReporter
from service.windows.wing import WING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from restorer.changelog import ChangelogWriter
    from restorer.store import Store

log = logging.getLogger("brewstream")


@dataclass(frozen=True)
class TableConfig:
    print_s: float = 5.0
    rows: int = 8


DEFAULT_TABLE = TableConfig()


def pipeline(cfg: RunConfig, windows: WindowsConfig, table: TableConfig = DEFAULT_TABLE,
             start_from: str = "latest", reset_watermark: bool = False) -> Pipeline:
    t = cfg.topics

    def check(store: Store) -> None:
        # What an active refuses its store for, and a standby as soon as it follows one.
        check_shape(store, windows)
        if not reset_watermark:
            guard_clocks(cfg.conn, store, None, t.events, windows, cfg.max_name_bytes, repair=False)

    def prepare(store: Store, changelog: ChangelogWriter) -> None:
        if reset_watermark:
            guard_clocks(cfg.conn, store, changelog, t.events, windows, cfg.max_name_bytes, repair=True)

    return Pipeline(
        wing=WING, input_topic=WING.input_topic(t), changelog_topic=WING.changelog_topic(t),
        dlq_topic=WING.dlq_topic(t),
        output_topics=(t.windows, t.late_events),
        make_sink=lambda store, changelog, faults, metrics, options: WindowsSink(
            store, changelog, t, windows, faults, on_batch=lambda r: batch_done(r, metrics), options=options),
        make_reporter=lambda store, sink, _metrics, _may_publish: WindowsReporter(
            store, cast(WindowsSink, sink).tick, table.print_s, table.rows, windows.table_ns),
        start_when_empty=start_from,
        reader_options={"includeHeaders": "true"},
        batch_module="service.windows.aggregate",
        dry_run=lambda df: aggregate_events(df, {}, windows.spec, None, windows.table_ns, cfg.max_name_bytes,
                                            max_ahead_ns=windows.max_ahead_ns),
        routes=routes(),
        check=check,
        prepare=prepare,
    )


def windows_config(window_s: float, hop_s: float | None, gap_s: float | None, delay_s: float, idle_s: float,
                   allowed_s: float, emit_early: bool = False, table_rows: int = 8,
                   max_ahead_s: float = DEFAULT_MAX_AHEAD_NS / 10**9) -> WindowsConfig:
    """The windows a user asked for with the command's flags; ValueError says what is wrong."""
    ns = 10**9
    if hop_s is not None and gap_s is not None:
        raise ValueError("--hop and --session-gap do not go together")
    if not 0 <= delay_s * ns <= MAX_SPAN_NS or window_s * ns > MAX_SPAN_NS:
        raise ValueError("--watermark-delay and --window must lie between 0 and ten years")
    if not 0 <= max_ahead_s * ns <= MAX_AHEAD_LIMIT_NS:
        raise ValueError("--max-event-time-ahead must lie between 0 and ten years")
    if gap_s is not None:
        spec = WindowSpec.session(int(gap_s * ns), int(allowed_s * ns))
    elif hop_s is not None:
        spec = WindowSpec.hopping(int(window_s * ns), int(hop_s * ns), int(allowed_s * ns))
    else:
        spec = WindowSpec.tumbling(int(window_s * ns), int(allowed_s * ns))
    return WindowsConfig(spec, int(delay_s * ns), int(idle_s * 1000), emit_early, int(window_s * ns), table_rows,
                         min(round(max_ahead_s * ns), MAX_AHEAD_LIMIT_NS))


def run(cfg: RunConfig, windows: WindowsConfig, table: TableConfig = DEFAULT_TABLE, start_from: str = "latest",
        spark: SparkSession | None = None, reset_watermark: bool = False) -> int:
    return run_pipeline(pipeline(cfg, windows, table, start_from, reset_watermark), cfg, spark)


# The batch line and the pattern its readers use (the benchmark).
BATCH_LINE = "%s (seq %d): events=%d late=%d bad=%d results=%d watermark=%s | %s"
BATCH_PATTERN = re.compile(r"batch (?P<batch_id>\d+) \(seq (?P<seq>\d+)\): events=(?P<events>\d+) "
                           r"late=(?P<late>\d+) bad=(?P<bad>\d+) results=(?P<results>\d+) "
                           r"watermark=(?P<watermark>\S+) \| " + PHASES_PATTERN)


def batch_done(r: WindowsReport, metrics: Metrics) -> None:
    """One log line per batch (structured fields under --log-format json) and the metrics."""
    what = f"batch {r.batch_id}" if r.batch_id is not None else "idle step"
    bad, results = sum(r.bad_reasons.values()), sum(r.results.values())
    wm = iso(r.watermark) if r.watermark is not None else "-"
    fields = {"batch_id": r.batch_id, "seq": r.seq, "events": r.events, "late": r.late, "bad": bad,
              "results": results, "watermark": wm, "open_windows": r.open_windows, **r.times.fields()}
    log.info(BATCH_LINE, what, r.seq, r.events, r.late, bad, results, wm, r.times, extra=fields)
    warn_internal(r.bad_reasons)
    p = metrics.pipeline
    metrics.batch_committed(time.time(), r.events, r.bad_reasons, r.changelog_records, r.times.phases())
    metrics.late_events.labels(p).inc(r.late)
    for emit, n in r.results.items():
        metrics.window_results.labels(p, emit).inc(n)
    metrics.open_windows.labels(p).set(r.open_windows)
    if r.watermark is not None:
        metrics.watermark.labels(p).set(r.watermark / 1e9)
