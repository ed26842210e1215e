"""``brewstream revenue``: the revenue join, as the runner needs it."""

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
from service.records.event_time import MAX_AHEAD_LIMIT_NS
from service.revenue.http import routes
from service.revenue.join import JoinConfig
from service.revenue.orders import OrderBatch
from service.revenue.sink import RevenueConfig, RevenueReport, RevenueSink
from service.revenue.state import WINDOW_NS, decode_revenue_state
from service.revenue.table import RevenueReporter
from service.revenue.wing import WING
from topics.clock import format_duration, iso_ns
from topics.errors import BrewError
from topics.kafka import topic_exists
from topics.menu_gen import check_currency

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from restorer.store import Store

log = logging.getLogger("brewstream")


@dataclass(frozen=True)
class TableConfig:
    print_s: float = 5.0
    rows: int = 8


def pipeline(cfg: RunConfig, revenue: RevenueConfig, table: TableConfig = TableConfig(),
             start_from: str = "earliest") -> Pipeline:
    t = cfg.topics

    def check(store: Store) -> None:
        # What an active refuses its store for, and a standby as soon as it follows one.
        stored = decode_revenue_state(store.items()).reserved.meta.get(WINDOW_NS)
        if stored is not None and stored != revenue.join.window_ns:
            raise BrewError(f"the state dir {store.path.parent} sums revenue in windows of "
                            f"{format_duration(stored / 1e9)}; run with --window {format_duration(stored / 1e9)} "
                            "or another --state-dir")
        if not topic_exists(cfg.conn, t.menu):
            raise BrewError(f"the menu topic {t.menu} does not exist; create it with `brewstream topics create`")

    def dry_run(df: DataFrame) -> OrderBatch:
        from service.revenue.orders import parse_orders
        return parse_orders(df, {}, revenue.max_ahead_ns, cfg.max_name_bytes)

    return Pipeline(
        wing=WING, input_topic=WING.input_topic(t), changelog_topic=WING.changelog_topic(t),
        dlq_topic=WING.dlq_topic(t),
        output_topics=(),
        make_sink=lambda store, changelog, faults, metrics, options: RevenueSink(
            store, changelog, t, revenue, faults, on_batch=lambda r: batch_done(r, metrics), options=options),
        make_reporter=lambda store, sink, _metrics, _may_publish: RevenueReporter(
            store, cast(RevenueSink, sink).tick, revenue.tick_s, table.print_s, table.rows, revenue.currency),
        start_when_empty=start_from,
        reader_options={"includeHeaders": "true"},
        batch_module="service.revenue.orders",
        dry_run=dry_run,
        routes=routes(),
        check=check,
    )


def revenue_config(grace_s: float, retention_s: float, window_s: float, currency: str, max_ahead_s: float,
                   tick_s: float) -> RevenueConfig:
    """The join a user asked for with the command's flags; ValueError says what is wrong."""
    ns = 10**9
    if not 0 <= grace_s <= retention_s <= MAX_AHEAD_LIMIT_NS / ns:
        raise ValueError("--grace must lie between 0 and --retention, and --retention within ten years")
    if not 0 < window_s * ns <= MAX_AHEAD_LIMIT_NS:
        raise ValueError("--window must lie between 1ns and ten years")
    if not 0 <= max_ahead_s * ns <= MAX_AHEAD_LIMIT_NS:
        raise ValueError("--max-event-time-ahead must lie between 0 and ten years")
    check_currency(currency)
    if tick_s <= 0:
        raise ValueError("--menu-interval must be above 0")
    return RevenueConfig(JoinConfig(round(grace_s * ns), round(retention_s * ns), round(window_s * ns)), currency,
                         round(max_ahead_s * ns), tick_s)


def run(cfg: RunConfig, revenue: RevenueConfig, table: TableConfig = TableConfig(), start_from: str = "earliest",
        spark: SparkSession | None = None) -> int:
    return run_pipeline(pipeline(cfg, revenue, table, start_from), cfg, spark)


# The batch line and the pattern its readers use.
BATCH_LINE = "%s (seq %d): orders=%d menu=%d priced=%d no-price=%d too-late=%d bad=%d waiting=%d menu-time=%s | %s"
BATCH_PATTERN = re.compile(r"(batch (?P<batch_id>\d+)|menu read) \(seq (?P<seq>\d+)\): orders=(?P<orders>\d+) "
                           r"menu=(?P<menu>\d+) priced=(?P<priced>\d+) no-price=(?P<no_price>\d+) "
                           r"too-late=(?P<too_late>\d+) bad=(?P<bad>\d+) waiting=(?P<waiting>\d+) "
                           r"menu-time=(?P<menu_time>\S+) \| " + PHASES_PATTERN)


def batch_done(r: RevenueReport, metrics: Metrics) -> None:
    """One log line per batch (structured fields under --log-format json) and the metrics."""
    what = f"batch {r.batch_id}" if r.batch_id is not None else "menu read"
    bad = sum(r.bad_reasons.values())
    no_price, too_late = r.refused.get("no price", 0), r.refused.get("too late", 0)
    menu_time = iso_ns(r.menu_time) if r.menu_time is not None else "-"
    fields = {"batch_id": r.batch_id, "seq": r.seq, "orders": r.orders, "menu_records": r.menu_records,
              "priced": r.priced, "no_price": no_price, "too_late": too_late, "bad": bad, "waiting": r.waiting,
              "menu_time": menu_time, **r.times.fields()}
    log.info(BATCH_LINE, what, r.seq, r.orders, r.menu_records, r.priced, no_price, too_late, bad, r.waiting,
             menu_time, r.times, extra=fields)
    warn_internal(r.bad_reasons)
    p = metrics.pipeline
    metrics.batch_committed(time.time(), r.orders, r.bad_reasons, r.changelog_records, r.times.phases())
    metrics.menu_records.labels(p).inc(r.menu_records)
    metrics.orders_waiting.labels(p).set(r.waiting)
    for cause, n in r.refused.items():
        metrics.orders_refused.labels(p, cause).inc(n)
    if r.menu_time is not None:
        metrics.menu_watermark.labels(p).set(r.menu_time / 1e9)

