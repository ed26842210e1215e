"""Spark's own stateful aggregation (bench/workers/spark_native.py) as the benchmark runs it:
a child process of the project's Python, with pyspark's JVM, Spark's Kafka source and sink
jars (the same ones brewstream gets, without its order gate) and nothing of brewstream's.

Its output topic is read by the harness (``bench.outputs``); the latest value of every
drink must equal the oracle.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass

from bench.config import REPO
from bench.context import BenchContext
from bench.dataset import Backlog
from bench.errors import BenchError
from bench.kafka_topics import create_plain
from bench.outputs import latest_sums
from bench.procs import Child, run_to_end
from bench.runs import IngestRun, require_same
from sandbox.jars import ORDER_GATE_JAR, spark_jars

TIMEOUT_S = 3600.0
# Spark's own query as a daemon: processingTime 250 ms, the interval its earlier runs here had
# (brewstream's default then; brewstream's own now runs batches back to back, engine.defaults).
TRIGGER_S = 0.25
APP = "bench.workers.spark_native"


@dataclass(frozen=True)
class Settings:
    shuffle_partitions: int = 4
    master: str = "local[*]"

    @property
    def label(self) -> str:
        return (f"RocksDB state + changelog checkpointing, master={self.master}, "
                f"spark.sql.shuffle.partitions={self.shuffle_partitions}")


def _jars() -> str:
    return ",".join(str(j) for j in spark_jars() if j.name != ORDER_GATE_JAR)


def _args(ctx: BenchContext, input_topic: str, output: str, base: str, mode: str, settings: Settings,
          trigger_s: float = TRIGGER_S) -> list[str]:
    run = ctx.work / "runs" / base
    return [sys.executable, "-m", APP, "--bootstrap", ctx.conn.bootstrap, "--input", input_topic, "--output", output,
            "--checkpoint", str(run / "checkpoint"), "--local-dir", str(run / "local"), "--jars", _jars(),
            "--mode", mode, "--trigger-ms", str(round(trigger_s * 1000)), "--master", settings.master,
            "--shuffle-partitions", str(settings.shuffle_partitions)]


def ingest(ctx: BenchContext, backlog: Backlog, settings: Settings, name: str = "spark-native-ingest") -> IngestRun:
    """``trigger(availableNow=True)`` over the whole backlog from a fresh checkpoint."""
    output = f"bench-{ctx.stamp}-{ctx.fresh('spark-out')}"
    create_plain(ctx.conn, output, ctx.cfg.partitions)
    child = run_to_end(name, _args(ctx, backlog.topic, output, ctx.fresh("spark"), "catch-up", settings),
                       ctx.log(name), TIMEOUT_S, cwd=REPO)
    out = child.result()
    require_same(f"Spark's own aggregation ({settings.label})", latest_sums(ctx.conn, output), backlog.expected)
    if not backlog.orders:
        return IngestRun("spark native", settings.label, 0, 0.0, child.wall_s, child.wall_s, child.rss.peak,
                         child.rss.peak_parts)
    if int(out["rows"]) != backlog.orders:
        raise BenchError(f"Spark read {out['rows']} rows of {backlog.orders}; see {child.log_path}")
    first, done = float(out["first_batch"]), float(out["last_batch_end"])
    return IngestRun("spark native", settings.label, backlog.orders, done - first, first - child.started,
                     child.wall_s, child.rss.peak, child.rss.peak_parts,
                     {"batches": out["batches"], "query_started_s": float(out["query_started"]) - child.started})


class SparkDeployment:
    """One streaming query on one checkpoint; Spark has no standby."""

    system = "spark native"
    has_standby = False

    def __init__(self, ctx: BenchContext, what: str, settings: Settings | None = None,
                 trigger_s: float = TRIGGER_S) -> None:
        self.ctx = ctx
        self.settings = settings or Settings()
        self.trigger_s = trigger_s
        self.base = ctx.fresh(what)
        self.input = f"bench-{ctx.stamp}-{self.base}-orders"
        self.output = f"bench-{ctx.stamp}-{self.base}-out"
        for topic in (self.input, self.output):
            create_plain(ctx.conn, topic, ctx.cfg.partitions)

    def start(self, instance: int, name: str) -> Child:
        if instance:
            raise BenchError("Spark's own aggregation has no standby")
        args = _args(self.ctx, self.input, self.output, self.base, "daemon", self.settings, self.trigger_s)
        return Child(name, args, self.ctx.log(name), cwd=REPO)

    def lose_disk(self, instance: int) -> None:
        # The state's durable copy is the checkpoint (on a cluster: HDFS or an object store);
        # what the process had on its local disk, RocksDB's working copies, goes.
        shutil.rmtree(self.ctx.work / "runs" / self.base / "local", ignore_errors=True)

    def standby_ready(self, child: Child, timeout: float) -> None:
        raise BenchError("Spark's own aggregation has no standby")

    def describe(self) -> str:
        return f"{self.settings.label}, trigger {round(self.trigger_s * 1000)} ms"
