"""``brewstream run``: the drink-count pipeline, as the runner needs it."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from service.dlq.records import warn_internal
from service.drink_count.aggregate import aggregate_batch
from service.drink_count.board import BoardFlusher
from service.drink_count.http import routes
from service.drink_count.sink import BatchReport, DrinkCountSink
from service.drink_count.wing import WING
from service.engine.contract import Pipeline, RunConfig
from service.engine.runner import run_pipeline
from service.engine.sink import PHASES_PATTERN
from service.ops.metrics import Metrics

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("brewstream")


@dataclass(frozen=True)
class BoardConfig:
    flush_s: float = 5.0
    top_n: int = 10


DEFAULT_BOARD = BoardConfig()


def pipeline(cfg: RunConfig, board: BoardConfig = DEFAULT_BOARD) -> Pipeline:
    t = cfg.topics
    return Pipeline(
        wing=WING, input_topic=WING.input_topic(t), changelog_topic=WING.changelog_topic(t),
        dlq_topic=WING.dlq_topic(t),
        output_topics=(t.counts,),
        make_sink=lambda store, changelog, faults, metrics, options: DrinkCountSink(
            store, changelog, t.orders, t.dlq, faults, on_batch=lambda r: batch_done(r, metrics), options=options),
        make_reporter=lambda store, _sink, metrics, may_publish: BoardFlusher(
            store, cfg.conn, t.counts, board.top_n, board.flush_s,
            on_flush=metrics.flush_seconds.labels(metrics.pipeline).observe, may_publish=may_publish,
            changelog_topic=WING.changelog_topic(t)),
        batch_module="service.drink_count.aggregate",
        dry_run=lambda df: aggregate_batch(df, {}, cfg.max_name_bytes),
        routes=routes(),
    )


def run(cfg: RunConfig, board: BoardConfig = DEFAULT_BOARD, spark: SparkSession | None = None) -> int:
    return run_pipeline(pipeline(cfg, board), cfg, spark)


# The batch line and the pattern every reader of it uses (drills, the benchmark, tools).
BATCH_LINE = "batch %d (seq %d): orders=%d bad=%d drinks=%d | %s"
BATCH_PATTERN = re.compile(r"batch (?P<batch_id>\d+) \(seq (?P<seq>\d+)\): orders=(?P<orders>\d+) bad=(?P<bad>\d+) "
                           r"drinks=(?P<drinks>\d+) \| " + PHASES_PATTERN)


def batch_done(r: BatchReport, metrics: Metrics) -> None:
    """One log line per batch (structured fields under --log-format json) and the metrics."""
    fields = {"batch_id": r.batch_id, "seq": r.seq, "orders": r.orders, "bad": r.bad, "drinks": r.drinks_changed,
              **r.times.fields()}
    log.info(BATCH_LINE, r.batch_id, r.seq, r.orders, r.bad, r.drinks_changed, r.times, extra=fields)
    warn_internal(r.bad_reasons)
    metrics.orders.labels(metrics.pipeline).inc(r.orders)
    metrics.batch_committed(time.time(), r.orders + r.bad, r.bad_reasons, r.changelog_records, r.times.phases())
