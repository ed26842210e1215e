"""``brewstream windows``: the event-time windows pipeline, as the runner needs it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from service.runner import Pipeline, RunConfig, run_pipeline
from service.windows.output import iso
from service.windows.sink import WindowsReport, WindowsSink
from service.windows.state import check_value
from service.windows.step import WindowsConfig
from service.windows.table import WindowsReporter

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("brewstream")


@dataclass(frozen=True)
class TableConfig:
    print_s: float = 5.0
    rows: int = 8


DEFAULT_TABLE = TableConfig()


def pipeline(cfg: RunConfig, windows: WindowsConfig, table: TableConfig = DEFAULT_TABLE,
             start_from: str = "latest") -> Pipeline:
    t = cfg.topics
    return Pipeline(
        name="windows", input_topic=t.events, changelog_topic=t.windows_changelog, dlq_topic=t.dlq,
        output_topics=(t.windows, t.late_events),
        make_sink=lambda store, changelog, faults: WindowsSink(store, changelog, t, windows, faults,
                                                               on_batch=log_batch),
        make_reporter=lambda store, sink: WindowsReporter(store, cast(WindowsSink, sink).tick, table.print_s,
                                                          table.rows, windows.table_ns),
        start_when_empty=start_from,
        reader_options={"includeHeaders": "true"},
        check_value=check_value,
    )


def run(cfg: RunConfig, windows: WindowsConfig, table: TableConfig = DEFAULT_TABLE, start_from: str = "latest",
        spark: SparkSession | None = None) -> int:
    return run_pipeline(pipeline(cfg, windows, table, start_from), cfg, spark)


def log_batch(r: WindowsReport) -> None:
    what = f"batch {r.batch_id}" if r.batch_id is not None else "idle step"
    log.info("%s (seq %d): events=%d late=%d bad=%d results=%d watermark=%s | aggregate %.2fs changelog %.3fs "
             "store %.3fs", what, r.seq, r.events, r.late, r.bad, r.results,
             iso(r.watermark) if r.watermark is not None else "-", r.aggregate_s, r.changelog_s, r.store_s)
