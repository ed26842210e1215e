"""Kafka Streams, the Java peer (bench/kstreams/), as the benchmark runs it.

``make bench`` fetches kafka-streams (4.4.0 in bench/kstreams/pom.xml, against the 4.1.1
broker) with its dependencies into .cache/jars/kstreams and compiles the application into
.cache/bench/brewbench-kstreams.jar.
Each run is a child JVM in a session of its own; its output topic is read by the harness
(``bench.outputs``), so the counts are checked as a downstream consumer sees them.

Settings: ``processing.guarantee=exactly_once_v2`` and Kafka Streams' defaults
(commit.interval.ms 100 under EOS, its RocksDB options, the record cache, the JVM's own
heap sizing), one stream thread unless the ingest sweep picks two. Daemons use static membership
(``group.instance.id``), so an instance restarted after a crash takes its tasks back
without a rebalance, and the lowest session timeout the broker accepts
(group.min.session.timeout.ms, 6 s), so a dead instance's tasks move as early as Kafka
allows; the failover pair runs ``num.standby.replicas=1``.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import orjson

from bench.config import REPO
from bench.context import BenchContext
from bench.dataset import Backlog
from bench.errors import BenchError
from bench.event_stream import Plan
from bench.kafka_topics import create_plain
from bench.outputs import WindowResult, latest_sums
from bench.procs import Child, run_to_end
from bench.runs import IngestRun, RestoreRun, require_same

JARS = REPO / ".cache" / "jars" / "kstreams"
APP_JAR = REPO / ".cache" / "bench" / "brewbench-kstreams.jar"
SOURCES = REPO / "bench" / "kstreams" / "src" / "brewbench"
MAIN = "brewbench.DrinkCount"
STORE = "drink-sums"
SESSION_TIMEOUT_MS = 6000  # the broker's group.min.session.timeout.ms (its default)
TIMEOUT_S = 3600.0
RUNNING = re.compile(r"state REBALANCING -> RUNNING")


def require() -> str:
    """Kafka Streams' version; a clear error when `make bench` has not built the application."""
    found = sorted(JARS.glob("kafka-streams-*.jar"))
    if not found or not APP_JAR.is_file():
        raise BenchError(f"no Kafka Streams application at {APP_JAR}; `make bench` builds it")
    if any(src.stat().st_mtime > APP_JAR.stat().st_mtime for src in SOURCES.glob("*.java")):
        raise BenchError(f"the Kafka Streams application at {APP_JAR} is older than its sources in {SOURCES}; "
                         "`make bench` builds it again")
    return found[0].name.removeprefix("kafka-streams-").removesuffix(".jar")


def changelog_topic(app_id: str) -> str:
    return f"{app_id}-{STORE}-changelog"


def _java(app_id: str, input_topic: str, output: str, state_dir: Path, bootstrap: str, mode: str,
          main: str = MAIN, **flags: str | int) -> list[str]:
    args = ["java", "-cp", f"{JARS}/*:{APP_JAR}", main, "--mode", mode, "--bootstrap", bootstrap,
            "--input", input_topic, "--output", output, "--app-id", app_id, "--state-dir", str(state_dir)]
    for key, value in flags.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    return args


@dataclass(frozen=True)
class Settings:
    threads: int = 1

    @property
    def label(self) -> str:
        return f"exactly_once_v2, num.stream.threads={self.threads}, defaults otherwise"


def ingest(ctx: BenchContext, backlog: Backlog, settings: Settings, name: str = "kstreams-ingest") -> IngestRun:
    """A fresh application (new application.id, so new internal topics and an empty state
    dir) over the whole backlog; it stops once every good item is summed and closes
    cleanly, which commits its last transaction. The output must then equal the oracle."""
    app_id = f"bench-{ctx.stamp}-{ctx.fresh('kstreams')}"
    output = f"{app_id}-out"
    create_plain(ctx.conn, output, ctx.cfg.partitions)
    args = _java(app_id, backlog.topic, output, ctx.path("kstreams-state"), ctx.conn.bootstrap, "count",
                 items=backlog.items, threads=settings.threads)
    child = run_to_end(name, args, ctx.log(name), TIMEOUT_S)
    out = child.result()
    require_same(f"Kafka Streams ({settings.label})", latest_sums(ctx.conn, output), backlog.expected)
    if not backlog.orders:
        return IngestRun("kafka streams", settings.label, 0, 0.0, child.wall_s, child.wall_s, child.rss.peak,
                         child.rss.peak_parts)
    first, done = float(out["first"]), float(out["done"])
    return IngestRun("kafka streams", settings.label, backlog.orders, done - first, first - child.started,
                     child.wall_s, child.rss.peak, child.rss.peak_parts,
                     {"running_s": float(out["running"]) - child.started, "shutdown_s": child.ended - done})


def restore(ctx: BenchContext, app_id: str, input_topic: str, output: str, expected: dict[str, int],
            records: int) -> RestoreRun:
    """Kafka Streams on an empty state dir restores its store from the changelog
    (``changelog_topic(app_id)``) before it runs: the disk-loss path. The time is its
    restore listener's, first partition started to last partition done; the store read
    back through interactive queries must hold the last value of every key. The same
    ``group.instance.id`` every time, so a rep does not wait out the last one's session."""
    name = "kstreams-restore"
    args = _java(app_id, input_topic, output, ctx.path("kstreams-restore"), ctx.conn.bootstrap, "restore",
                 restore_partitions=ctx.cfg.partitions, instance_id="restore", session_timeout_ms=SESSION_TIMEOUT_MS)
    child = run_to_end(name, args, ctx.log(name), TIMEOUT_S)
    out = child.result()
    require_same("Kafka Streams restore", out["latest"], expected)
    if int(out["records"]) != records:
        raise BenchError(f"Kafka Streams restored {out['records']} records of {records}; see {child.log_path}")
    return RestoreRun("kafka streams", int(out["records"]), len(out["latest"]), float(out["restore_s"]),
                      child.wall_s, child.rss.peak)


class KStreamsDeployment:
    """One Kafka Streams application (one application.id), one or two instances."""

    system = "kafka streams"
    has_standby = True

    def __init__(self, ctx: BenchContext, what: str, standby: bool = False, settings: Settings | None = None) -> None:
        self.ctx = ctx
        self.settings = settings or Settings()
        self.app_id = f"bench-{ctx.stamp}-{ctx.fresh(what)}"
        self.input = f"{self.app_id}-orders"
        self.output = f"{self.app_id}-out"
        self.standby = standby
        for topic in (self.input, self.output):
            create_plain(ctx.conn, topic, ctx.cfg.partitions)
        base = ctx.path(what)
        self.state_dirs = [base / "instance-0", base / "instance-1"]

    def start(self, instance: int, name: str) -> Child:
        args = _java(self.app_id, self.input, self.output, self.state_dirs[instance], self.ctx.conn.bootstrap,
                     "daemon", instance_id=f"instance-{instance}", session_timeout_ms=SESSION_TIMEOUT_MS,
                     standby_replicas=1 if self.standby else 0, threads=self.settings.threads)
        return Child(name, args, self.ctx.log(name))

    def lose_disk(self, instance: int) -> None:
        shutil.rmtree(self.state_dirs[instance], ignore_errors=True)

    def standby_ready(self, child: Child, timeout: float) -> None:
        # Running after the rebalance that gave it its tasks, standbys among them; the
        # scenario's warm-up then lets the standby catch up.
        child.wait_for(RUNNING, timeout)

    def describe(self) -> str:
        return (f"exactly_once_v2, num.stream.threads={self.settings.threads}, group.instance.id per instance, "
                f"session.timeout.ms={SESSION_TIMEOUT_MS}"
                + (", num.standby.replicas=1, two instances" if self.standby else ", one instance"))


# ------------------------------------------------------------------ event-time windows

WINDOWS_MAIN = "brewbench.WindowCount"
WINDOWED = re.compile(r"first event windowed")


class KStreamsWindows:
    """The windowed count (``WindowCount.java``) as one application: a fresh application.id,
    its input and output topics, one instance."""

    system = "kafka streams"

    def __init__(self, ctx: BenchContext, plan: Plan, settings: Settings | None = None) -> None:
        self.ctx = ctx
        self.plan = plan
        self.settings = settings or Settings()
        self.app_id = f"bench-{ctx.stamp}-{ctx.fresh('kstreams-windows')}"
        self.input = f"{self.app_id}-events"
        self.output = f"{self.app_id}-windows"
        for topic in (self.input, self.output):
            create_plain(ctx.conn, topic, ctx.cfg.partitions)
        self.state_dir = ctx.path("kstreams-windows")

    def start(self, name: str) -> Child:
        args = _java(self.app_id, self.input, self.output, self.state_dir, self.ctx.conn.bootstrap, "daemon",
                     WINDOWS_MAIN, threads=self.settings.threads, window_ms=self.plan.window_ns // 10**6,
                     grace_ms=self.plan.close_ns // 10**6)
        return Child(name, args, self.ctx.log(name))



def windows_counted(child: Child, timeout: float) -> None:
    """Until the window aggregation has taken its first event: it is up."""
    child.wait_for(WINDOWED, timeout)


def windows_settings(plan: Plan, settings: Settings) -> str:
    return (f"TimeWindows.ofSizeAndGrace({plan.window_ns // 10**9}s, {plan.close_ns // 10**9}s), "
            "suppress(untilWindowCloses(unbounded())), exactly_once_v2, "
            f"num.stream.threads={settings.threads}, defaults otherwise (commit.interval.ms 100)")


def parse_window(key: bytes | None, value: bytes | None, arrived: float) -> WindowResult | None:
    """A record of the windowed count's output: ``{"start":ms,"end":ms,"count":n,"amount_cents":c}``."""
    if not value:
        return None
    doc = orjson.loads(value)
    return WindowResult(int(doc["start"]) * 10**6, int(doc["end"]) * 10**6, int(doc["count"]),
                        int(doc["amount_cents"]), arrived)
