"""``brewstream run``: the drink-count pipeline, as the runner needs it."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from restorer.codec import decode_u64, meta_key
from restorer.store import Store
from service.dlq.records import warn_internal
from service.drink_count.aggregate import aggregate_batch
from service.drink_count.board import BoardFlusher
from service.drink_count.counts import BAD_ORDERS, PROCESSED_ORDERS
from service.drink_count.http import routes
from service.drink_count.shuffle import add_shares, shares_counter
from service.drink_count.sink import BatchReport, DrinkCountSink
from service.drink_count.wing import WING
from service.engine.contract import Pipeline, RunConfig, Shuffled
from service.engine.runner import run_pipeline
from service.engine.sink import PHASES_PATTERN
from service.ops.metrics import Metrics
from service.shuffle.stage_run import InputStageRun
from service.shuffle.task_stage import NOT_A_PART, TaskBatch, TaskStageSink
from topics.errors import BrewError
from topics.kafka import max_record_bytes

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
    direct = Pipeline(
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
        check=None if cfg.shuffle else refuse_shuffled,
    )
    return shuffled(direct, cfg) if cfg.shuffle else direct


def shuffled(direct: Pipeline, cfg: RunConfig) -> Pipeline:
    """drink-count behind a shuffle (``service.shuffle``): the input stage counts the orders
    per input partition and drink and hands each task its share through the repartition
    topic; the pipeline's own query reads that topic and adds the shares to the counts.
    The store, its changelog, the board and the queries are the direct pipeline's."""
    t = cfg.topics
    processed_key, bad_key = meta_key(PROCESSED_ORDERS), meta_key(BAD_ORDERS)

    def report(b: TaskBatch, metrics: Metrics) -> None:
        orders = bad = drinks = 0
        for key, delta in b.changes:
            if key == processed_key:
                orders += decode_u64(delta)
            elif key == bad_key:
                bad += decode_u64(delta)
            else:
                drinks += 1
        fields = {"batch_id": b.batch_id, "seq": b.seq, "orders": orders, "bad": bad, "drinks": drinks,
                  "parts": b.parts, **b.times.fields()}
        log.info(BATCH_LINE, b.batch_id, b.seq, orders, bad, drinks, b.times, extra=fields)
        metrics.orders.labels(metrics.pipeline).inc(orders)
        metrics.batch_committed(time.time(), orders + bad, {NOT_A_PART: b.strays} if b.strays else {}, b.committed,
                                b.times.phases())

    return replace(
        direct, input_topic=t.drink_count_repartition,
        make_sink=lambda store, changelog, faults, metrics, options: TaskStageSink(
            store, changelog, faults, options, t.drink_count_repartition, t.orders, add_shares, t.dlq,
            on_batch=lambda b: report(b, metrics)),
        shuffled=Shuffled(t.orders, lambda: InputStageRun(
            cfg, t.orders, t.drink_count_repartition, t.dlq, shares_counter(cfg.max_name_bytes),
            max_record_bytes(cfg.conn, t.dlq))),
    )


def refuse_shuffled(store: Store) -> None:
    """A store counted through the shuffle holds each task's cursors, which the direct
    pipeline would not keep: its counts would go wrong, so it is refused."""
    if store.counted_through_shuffle():
        raise BrewError("this store was counted through the shuffle (run --shuffle), and the direct pipeline cannot "
                        "go on from it: start brewstream run with --shuffle")


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
