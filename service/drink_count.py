"""``brewstream run``: the drink-count pipeline, as the runner needs it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from service.board import BoardFlusher
from service.runner import Pipeline, RunConfig, run_pipeline
from service.sink import BatchReport, DrinkCountSink

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
        name="drink-count", input_topic=t.orders, changelog_topic=t.changelog, dlq_topic=t.dlq,
        output_topics=(t.counts,),
        make_sink=lambda store, changelog, faults: DrinkCountSink(store, changelog, t.orders, t.dlq, faults,
                                                                  on_batch=log_batch),
        make_reporter=lambda store, _sink: BoardFlusher(store, cfg.conn, t.counts, board.top_n, board.flush_s),
    )


def run(cfg: RunConfig, board: BoardConfig = DEFAULT_BOARD, spark: SparkSession | None = None) -> int:
    return run_pipeline(pipeline(cfg, board), cfg, spark)


def log_batch(r: BatchReport) -> None:
    log.info("batch %d (seq %d): orders=%d bad=%d drinks=%d | aggregate %.2fs changelog %.3fs store %.3fs",
             r.batch_id, r.seq, r.orders, r.bad, r.drinks_changed, r.aggregate_s, r.changelog_s, r.store_s)
