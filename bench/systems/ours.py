"""brewstream as the benchmark runs it: the real console script, as a child process group.

Per-batch timings come from the daemon's own INFO line, stamped when it reaches the
harness; the line is logged right after the batch's store commit.
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson

from bench.context import BenchContext, DaemonDirs
from bench.errors import BenchError
from bench.event_stream import Plan
from bench.kafka_topics import create_pipeline
from bench.outputs import WindowResult
from bench.procs import Child, run_to_end
from bench.rss import cpu_seconds
from bench.runs import IngestRun, RestoreRun, require_same
from restorer.reader import RESTORED
from restorer.store import Store
from service.drink_count.counts import DrinkCounts, drink_counts
from service.drink_count.pipeline import BATCH_PATTERN
from service.engine.defaults import DEFAULT_TRIGGER_S
from service.engine.query import READY_PATTERN
from service.instance.health import STANDBY, role_pattern
from service.windows.pipeline import BATCH_PATTERN as WINDOWS_BATCH
from topics.catalog import Topics
from topics.clock import format_duration

BREW = str(Path(sys.executable).parent / "brewstream")
BATCH = BATCH_PATTERN
READY = READY_PATTERN
STANDBY_LINE = role_pattern(STANDBY)
INGEST_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class Settings:
    max_offsets_per_trigger: int | None = None
    trigger_s: float = DEFAULT_TRIGGER_S
    master: str = "local[*]"
    flush_s: float = 5.0
    extra: tuple[str, ...] = ()  # more `brewstream run` flags (--conf, --min-partitions)
    name: str = ""  # a short label instead of the settings (a cluster's master URL changes every run)

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        cap = self.max_offsets_per_trigger or "none"
        return f"master={self.master} max-offsets-per-trigger={cap}"


@dataclass(frozen=True)
class Batch:
    t: float  # when its log line arrived: just after the store commit
    batch_id: int
    seq: int
    orders: int
    aggregate_s: float
    changelog_s: float
    store_s: float

    @property
    def started(self) -> float:
        return self.t - self.aggregate_s - self.changelog_s - self.store_s


def run_args(ctx: BenchContext, topics: Topics, dirs: DaemonDirs, settings: Settings, available_now: bool) -> list[str]:
    args = [BREW, "run", "--bootstrap", ctx.conn.bootstrap, "--topic-prefix", topics.prefix,
            "--state-dir", str(dirs.state), "--checkpoint-dir", str(dirs.checkpoint),
            "--trigger", f"{round(settings.trigger_s * 1000)}ms", "--flush", f"{round(settings.flush_s * 1000)}ms",
            "--master", settings.master]
    if settings.max_offsets_per_trigger:
        args += ["--max-offsets-per-trigger", str(settings.max_offsets_per_trigger)]
    if available_now:
        args.append("--available-now")
    return [*args, *settings.extra]


def start_daemon(ctx: BenchContext, topics: Topics, dirs: DaemonDirs, settings: Settings, name: str,
                 standby: bool = False) -> Child:
    args = run_args(ctx, topics, dirs, settings, available_now=False) + (["--standby"] if standby else [])
    return Child(name, args, ctx.log(name))


def batches(child: Child, after: int = 0) -> list[Batch]:
    out: list[Batch] = []
    for line in child.lines[after:]:
        m = BATCH.search(line.text)
        if m:
            out.append(Batch(line.t, int(m["batch_id"]), int(m["seq"]), int(m["orders"]), float(m["aggregate_s"]),
                             float(m["changelog_s"]), float(m["store_s"])))
    return out


def read_store(dirs: DaemonDirs) -> DrinkCounts | None:
    """A read-only look at the store, which works while the daemon writes it."""
    if not (dirs.store / "CURRENT").exists():
        return None
    with Store(dirs.store, read_only=True) as store:
        return drink_counts(store.read_all())


def ingest(ctx: BenchContext, topics: Topics, settings: Settings, expected: dict[str, int],
           prefix_args: list[str] | None = None, name: str = "ours-ingest", allow_empty: bool = False,
           records: int | None = None) -> IngestRun:
    """``brewstream run --available-now`` from an empty state dir over the whole backlog;
    ``records``: how many records it holds, bad ones included (the rate is over all of
    them, as for every system); by default the good orders the store counted."""
    dirs = ctx.dirs(name)
    args = [*(prefix_args or []), *run_args(ctx, topics, dirs, settings, available_now=True)]
    broker_before = cpu_seconds(ctx.broker_pid) if ctx.broker_pid else None
    child = run_to_end(name, args, ctx.log(name), INGEST_TIMEOUT_S)
    cpu = child.rss.cpu_s()
    if broker_before is not None and ctx.broker_pid:
        cpu["broker"] = round(cpu_seconds(ctx.broker_pid) - broker_before, 2)
    done = batches(child)
    if allow_empty and not done:  # an empty input: only the wall time says anything
        return IngestRun("ours", settings.label, 0, 0.0, 0.0, child.wall_s, child.rss.peak, child.rss.peak_parts)
    if not done:
        raise BenchError(f"{name} committed no batch; see {child.log_path}")
    state = read_store(dirs)
    if state is None:
        raise BenchError(f"{name} left no store in {dirs.state}")
    require_same(f"brewstream ({settings.label})", state.counts, expected)
    ready = next((line.t for line in child.lines if READY.search(line.text)), child.started)
    first, last = done[0].started, done[-1].t
    detail = {
        "batches": len(done),
        # Up to the ready line: state dir, fencing, catch-up, Spark's session and its Python
        # workers. After it: the query's start and its first batch planned.
        "store_ready_s": ready - child.started,
        "spark_start_s": first - ready,
        "aggregate_s": sum(b.aggregate_s for b in done),
        "changelog_s": sum(b.changelog_s for b in done),
        "store_s": sum(b.store_s for b in done),
        "between_batches_s": (last - first) - sum(b.t - b.started for b in done),
        "shutdown_s": child.ended - last,
        # The first batch also starts the Python workers (imports of pyspark, pandas,
        # pyarrow); what follows it is the daemon's pace once everything is warm.
        "first_batch_s": done[0].t - done[0].started,
        "after_first_batch_orders_per_s": (sum(b.orders for b in done[1:]) / (last - done[0].t)
                                           if len(done) > 1 and last > done[0].t else None),
        "cpu_s": cpu,  # by process, over the whole run (start-up included)
    }
    orders = state.processed_orders if records is None else records
    return IngestRun("ours", settings.label, orders, last - first, first - child.started,
                     child.wall_s, child.rss.peak, child.rss.peak_parts, detail)


def restore(ctx: BenchContext, topics: Topics, expected: dict[str, int]) -> RestoreRun:
    """``brewstream restore`` into an empty state dir; the store must hold the last values."""
    dirs = ctx.dirs("ours-restore")
    args = [BREW, "restore", "--bootstrap", ctx.conn.bootstrap, "--topic-prefix", topics.prefix,
            "--state-dir", str(dirs.state)]
    child = run_to_end("ours-restore", args, ctx.log("ours-restore"), INGEST_TIMEOUT_S)
    line, m = child.wait_for(RESTORED, 0)
    state = read_store(dirs)
    if state is None:
        raise BenchError(f"brewstream restore left no store in {dirs.state}")
    require_same("brewstream restore", state.counts, expected)
    return RestoreRun("ours", int(m["records"]), int(m["keys"]), float(m["seconds"]), child.wall_s, child.rss.peak,
                      {"summary": line.text})



class OursDeployment:
    """brewstream as a daemon with default flags (trigger 250 ms) on a pipeline of its own;
    its changelog is the output a downstream reader sees (absolute counts, one transaction
    per batch). Instance 1 is a ``--standby`` on dirs of its own."""

    system = "ours"
    has_standby = True

    def __init__(self, ctx: BenchContext, what: str, standby: bool = False) -> None:
        self.ctx = ctx
        self.topics = ctx.topics(what)
        create_pipeline(ctx.conn, self.topics, ctx.cfg.partitions)
        self.input = self.topics.orders
        self.output = self.topics.changelog
        self.dirs = [ctx.dirs(what), ctx.dirs(f"{what}-standby")]
        self.settings = Settings(trigger_s=ctx.cfg.default_trigger_s, flush_s=ctx.cfg.flush_s)

    def start(self, instance: int, name: str) -> Child:
        return start_daemon(self.ctx, self.topics, self.dirs[instance], self.settings, name, standby=instance > 0)

    def lose_disk(self, instance: int) -> None:
        # The Spark checkpoint stays: the daemon must notice that it runs ahead of the store.
        shutil.rmtree(self.dirs[instance].state, ignore_errors=True)

    def standby_ready(self, child: Child, timeout: float) -> None:
        child.wait_for(STANDBY_LINE, timeout)

    def describe(self) -> str:
        return f"default flags (trigger {round(self.settings.trigger_s * 1000)} ms), a --standby on dirs of its own"


# ------------------------------------------------------------------ event-time windows

def windows_daemon(ctx: BenchContext, topics: Topics, dirs: DaemonDirs, plan: Plan, name: str) -> Child:
    """``brewstream windows`` on the pipeline's event topic: tumbling ``plan.window_ns``,
    final results only, from the earliest offset; every other flag its default
    (trigger 250 ms, idle timeout 30 s)."""
    args = [BREW, "windows", "--bootstrap", ctx.conn.bootstrap, "--topic-prefix", topics.prefix,
            "--state-dir", str(dirs.state), "--checkpoint-dir", str(dirs.checkpoint),
            "--window", _duration(plan.window_ns), "--watermark-delay", _duration(plan.watermark_delay_ns),
            "--allowed-lateness", _duration(plan.allowed_lateness_ns), "--emit", "final", "--from", "earliest"]
    return Child(name, args, ctx.log(name))


def windows_counted(child: Child, timeout: float) -> None:
    """Until the daemon logs a committed batch that counted events: it is up."""
    deadline = time.monotonic() + timeout
    after = 0
    while True:
        line, m = child.wait_for(WINDOWS_BATCH, max(0.0, deadline - time.monotonic()), after)
        if int(m["events"]):
            return
        after = child.lines.index(line) + 1


def windows_events_read(child: Child) -> int:
    """Events (late ones included) in the daemon's committed batches so far."""
    return sum(int(m["events"]) for line in list(child.lines) if (m := WINDOWS_BATCH.search(line.text)))


def windows_batch_seconds(child: Child) -> list[float]:
    """How long each committed batch that read events took, start to store commit, but
    the first (which also starts the Python workers)."""
    return [float(m["aggregate_s"]) + float(m["changelog_s"]) + float(m["store_s"]) for line in list(child.lines)
            if (m := WINDOWS_BATCH.search(line.text)) and int(m["events"])][1:]


def windows_settings(plan: Plan) -> str:
    return (f"--window {_duration(plan.window_ns)} --watermark-delay {_duration(plan.watermark_delay_ns)} "
            f"--allowed-lateness {_duration(plan.allowed_lateness_ns)} --emit final, defaults otherwise "
            f"(trigger {format_duration(DEFAULT_TRIGGER_S)}, idle timeout 30s)")


def parse_window(key: bytes | None, value: bytes | None, arrived: float) -> WindowResult | None:
    """A record of ``brew.order-windows``: ``{"kind","start","end","count","amount",
    "late_accepted","emit","watermark"}``, times in ISO 8601 with milliseconds."""
    if not value:
        return None
    doc = orjson.loads(value)
    return WindowResult(_iso_ns(doc["start"]), _iso_ns(doc["end"]), int(doc["count"]),
                        round(float(doc["amount"]) * 100), arrived, int(doc["late_accepted"]))


def _iso_ns(text: str) -> int:
    moment = datetime.fromisoformat(text)
    return (moment - EPOCH) // timedelta(microseconds=1) * 1000


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _duration(ns: int) -> str:
    return format_duration(ns / 10**9)
