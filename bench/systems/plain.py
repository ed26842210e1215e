"""The plain-consumer limits, each run as a child process of the project's Python."""

from __future__ import annotations

import sys

from bench.config import REPO
from bench.context import BenchContext
from bench.dataset import Backlog
from bench.procs import run_to_end
from bench.runs import IngestRun, RestoreRun, require_same

TIMEOUT_S = 1800.0


def ingest(ctx: BenchContext, backlog: Backlog) -> IngestRun:
    name = "baseline-ingest"
    child = run_to_end(name, [sys.executable, "-m", "bench.workers.baseline_count", "--bootstrap", ctx.conn.bootstrap,
                              "--topic", backlog.topic], ctx.log(name), TIMEOUT_S, cwd=REPO)
    out = child.result()
    require_same("the plain consumer", out["counts"], backlog.expected)
    first, done = float(out["first"]), float(out["done"])
    return IngestRun("baseline", "confluent-kafka consume(10000) + orjson", int(out["orders"]), done - first,
                     first - child.started, child.wall_s, child.rss.peak, child.rss.peak_parts)


def restore(ctx: BenchContext, topic: str, expected: dict[str, int]) -> RestoreRun:
    name = "limit-restore"
    child = run_to_end(name, [sys.executable, "-m", "bench.workers.changelog_read", "--bootstrap", ctx.conn.bootstrap,
                              "--topic", topic], ctx.log(name), TIMEOUT_S, cwd=REPO)
    out = child.result()
    require_same("the plain changelog reader", out["latest"], expected)
    return RestoreRun("limit", int(out["records"]), len(out["latest"]), float(out["seconds"]), child.wall_s,
                      child.rss.peak)
