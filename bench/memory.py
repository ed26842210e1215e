"""``python -m bench.memory``: where a brewstream daemon's memory goes, and what each
memory setting costs in speed.

Orders are fed to ``brewstream run`` at ``--rate`` for ``--seconds`` (after a warm-up),
as the latency scenario feeds them (``bench.feed.PacedFeed``; the daemon started with
``bench.systems.ours.run_args``). Each run reports:

- peak RSS over the run of the whole tree and of each part (the Python driver, the
  Spark driver JVM, the Python workers Spark forks), sampled as the benchmark samples it;
- produce -> committed store latency (p50, p99) of every order fed after the warm-up,
  read by a follower of the store (``bench.storewatch``), and whether the daemon kept
  up (the latency scenario's rule, ``LatencyRun.keeps_up``);
- for the variants of ``--breakdown`` (run with Native Memory Tracking on), a quarter,
  half and three quarters into the measured window (the largest kept): every process's RSS, PSS
  and anonymous / file-backed split, the JVM's Native Memory Tracking summary by
  category, RocksDB's own figures, and the RSS of a Python that only imported what the
  driver imports.

``--variants`` runs the same load once per named setting set (``VARIANTS``; join names
with ``+`` to combine them), the breakdown run first when asked for.
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click
import orjson

from bench.config import REPO, BenchConfig
from bench.context import BenchContext
from bench.dataset import OrderStream, order_stream
from bench.errors import BenchError
from bench.feed import PacedFeed
from bench.kafka_topics import create_pipeline, delete_containing
from bench.memory_probe import (
    JvmMaps,
    TreeMemory,
    gc_counts,
    heap_info,
    import_baseline_rss,
    jvm_maps,
    native_memory,
    read_tree,
    rocksdb_figures,
)
from bench.nmt import HeapInfo, NmtSummary
from bench.procs import Child, kill_all
from bench.rss import tree_rss
from bench.scenarios.latency import CATCH_UP_TIMEOUT_S, POLL_S, WARMUP_SLACK_S, LatencyRun, first_batch, targets
from bench.storewatch import StoreWatcher
from bench.systems import ours
from service.instance.periodic import Every
from service.instance.signals import Terminated, terminate_by_exception
from service.spark.cache_files import CACHE_ENV
from topics.clock import WaitTimedOut, wait_until
from topics.errors import BrewError
from topics.kafka import KafkaConnection, require_broker

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
DEFAULT_OUTPUT = REPO / "bench" / "results" / "memory.json"
DEFAULT_WORK = REPO / ".sandbox" / "bench-memory"
NMT_OPTION = "-XX:NativeMemoryTracking=summary"
JAVA_KEY = "spark.driver.defaultJavaOptions"  # brewstream's own options come first, a collector here replaces its
PEAK_EVERY_S = 0.5
BREAKDOWN_AT = (0.25, 0.5, 0.75)  # fractions of the measured window
MIB = 1024 * 1024


@dataclass(frozen=True)
class Variant:
    """Settings of one run: Java options for the driver JVM, Spark settings, environment."""

    java: tuple[str, ...] = ()
    conf: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    def __add__(self, other: Variant) -> Variant:
        return Variant(self.java + other.java, self.conf + other.conf, self.env + other.env)

    def args(self, nmt: bool) -> list[str]:
        java = [*self.java, *([NMT_OPTION] if nmt else [])]
        out = [f"--conf={JAVA_KEY}={' '.join(java)}"] if java else []
        return out + [f"--conf={k}={v}" for k, v in self.conf]


RESERVED = ("spark.testing.reservedMemory", str(64 * 1024 * 1024))
VARIANTS: dict[str, Variant] = {
    "default": Variant(),
    "serialgc": Variant(java=("-XX:+UseSerialGC",)),
    # The collector a catch-up runs, and a daemon ran before the serial one with a 64 MiB young generation.
    "parallel": Variant(java=("-XX:+UseParallelGC", "-XX:GCTimeRatio=19")),
    "heap512": Variant(conf=(("spark.driver.memory", "512m"),)),
    # Spark refuses a heap under 1.5 x its reserved 300 MiB (INVALID_DRIVER_MEMORY); below
    # 450m the reservation is cut to 64 MiB (spark.testing.reservedMemory), which only
    # changes how much of the heap Spark's memory manager counts as its own.
    "heap384": Variant(conf=(("spark.driver.memory", "384m"), RESERVED)),
    "heap256": Variant(conf=(("spark.driver.memory", "256m"), RESERVED)),
    "heap192": Variant(conf=(("spark.driver.memory", "192m"), RESERVED)),
    "heap128": Variant(conf=(("spark.driver.memory", "128m"), RESERVED)),
    "heap96": Variant(conf=(("spark.driver.memory", "96m"), RESERVED)),
    "xms32": Variant(java=("-Xms32m",)),  # the JVM's initial heap is 1/64 of the machine's memory otherwise
    # The parallel collector grows its young generation for throughput, to hundreds of MiB.
    "young128": Variant(java=("-Xmn128m",)),
    "young96": Variant(java=("-Xmn96m",)),
    "young64": Variant(java=("-Xmn64m",)),
    "young32": Variant(java=("-Xmn32m",)),
    "young16": Variant(java=("-Xmn16m",)),
    # Or let it size the young generation for a looser throughput goal (GC time 1 / (1 + N)
    # of the run, 1% by default): small at a daemon's pace, as large as a burst needs.
    "gcratio9": Variant(java=("-XX:GCTimeRatio=9",)),
    "gcratio19": Variant(java=("-XX:GCTimeRatio=19",)),
    "codecache64": Variant(java=("-XX:ReservedCodeCacheSize=64m",)),
    "codecache32": Variant(java=("-XX:ReservedCodeCacheSize=32m",)),
    "tiered": Variant(java=("-XX:TieredStopAtLevel=4",)),  # the daemon runs C1 alone by default
    "xss512k": Variant(java=("-Xss512k",)),
    "arena2": Variant(env=(("MALLOC_ARENA_MAX", "2"),)),
    "gcthreads1": Variant(java=("-XX:ParallelGCThreads=1",)),
    # Without Spark's class archive (service.spark.jvm_archive): slower starts, classes in metaspace instead.
    "noarchive": Variant(env=((CACHE_ENV, "off"),)),
}


def variant(name: str) -> Variant:
    """A name of ``VARIANTS``, or several joined with ``+``."""
    out = Variant()
    for part in name.split("+"):
        if part not in VARIANTS:
            raise click.BadParameter(f"unknown variant {part!r}; pick from {', '.join(VARIANTS)} (join with +)")
        out = out + VARIANTS[part]
    return out


class PartPeaks:
    """Peak RSS of the tree and of each part (``bench.rss.tree_rss``'s split), sampled."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.tree = 0
        self.parts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._every = Every(PEAK_EVERY_S, self.sample, f"peaks-{pid}")

    def start(self) -> None:
        self._every.start()

    def stop(self) -> None:
        self._every.stop()

    def sample(self) -> None:
        parts = tree_rss(self.pid)
        with self._lock:
            self.tree = max(self.tree, sum(parts.values()))
            for part, rss in parts.items():
                self.parts[part] = max(self.parts.get(part, 0), rss)


@dataclass
class Breakdown:
    tree: TreeMemory
    nmt: NmtSummary | None
    nmt_problem: str
    rocksdb: dict[str, int]
    import_baseline_rss: int | None
    heap: HeapInfo | None = None
    maps: JvmMaps | None = None


@dataclass
class MemoryRun:
    name: str
    args: list[str]
    env: dict[str, str]
    orders: int
    commit_p50_s: float | None
    commit_p99_s: float | None
    keeps_up: bool
    caught_up_s: float | None
    batches: int
    mean_batch_s: float
    peak_tree_rss: int  # over the whole run, start-up included (as the benchmark reports it)
    peak_parts: dict[str, int]  # root (driver), jvm, children (the workers): each its own peak
    measured_peak_tree_rss: int  # over the measured window only
    measured_peak_parts: dict[str, int]
    breakdown: Breakdown | None = None
    gc: dict[str, float] = field(default_factory=dict)  # jstat -gcutil at the end of the window, whole run


def run_once(ctx: BenchContext, stream: OrderStream, name: str, settings: Variant, seconds: float,
             warmup_s: float, breakdown: bool, baseline: int | None = None) -> MemoryRun:
    cfg, conn = ctx.cfg, ctx.conn
    slug = re.sub(r"[^A-Za-z0-9_-]+", "_", name)  # topic names take letters, digits, '.', '_' and '-'
    topics = ctx.topics(f"memory-{slug}")
    create_pipeline(conn, topics, cfg.partitions)
    dirs = ctx.dirs(f"memory-{slug}")
    extra = tuple(settings.args(nmt=breakdown))
    args = ours.run_args(ctx, topics, dirs, ours.Settings(trigger_s=cfg.default_trigger_s, flush_s=cfg.flush_s,
                                                          extra=extra), available_now=False)
    env = dict(settings.env)
    watcher = StoreWatcher(dirs.store, topics.orders, cfg.poll_s)
    watcher.start()
    daemon = Child(f"memory-{slug}", args, ctx.log(f"memory-{slug}"), env)
    feed = PacedFeed(conn, topics.orders, stream, cfg.latency_rate, 1)
    whole = PartPeaks(daemon.proc.pid)
    measured = PartPeaks(daemon.proc.pid)
    whole.start()
    found: Breakdown | None = None
    gc: dict[str, float] = {}
    caught_up: float | None = None
    try:
        first_batch(conn, topics.orders, stream, cfg.latency_rate, watcher, daemon.exit_reason)
        feed.start()
        warm_until = time.monotonic() + warmup_s
        wait_until(lambda: time.monotonic() >= warm_until and 1 in feed.placed
                   and watcher.committed({feed.placed[1][0]: feed.placed[1][1] + 1}),
                   warmup_s + WARMUP_SLACK_S, "the end of the warm-up", every=POLL_S, give_up=daemon.exit_reason)
        measured.start()
        begin = feed.last_index
        started = time.monotonic()
        if breakdown:
            # A quarter, half and three quarters into the window (the heap grows and is
            # collected between them); the largest tree is the one kept.
            for part in BREAKDOWN_AT:
                time.sleep(max(0.0, started + part * seconds - time.monotonic()))
                seen = _breakdown(daemon.proc.pid, dirs.store, baseline)
                if found is None or seen.tree.rss() > found.tree.rss():
                    found = seen
        time.sleep(max(0.0, started + seconds - time.monotonic()))
        end = feed.last_index
        jvms = read_tree(daemon.proc.pid).of("jvm")
        gc = gc_counts(jvms[0].pid) if jvms else {}
        feed.stop()
        measured.stop()
        if feed.error or feed.failed or len(feed.placed) != feed.sent:
            raise BenchError(f"the feed lost records: {feed.failed} failed {feed.error}")
        last_produce = feed.produced_at[feed.last_index - 1]
        with contextlib.suppress(WaitTimedOut):
            caught_up = wait_until(lambda: watcher.committed(targets(feed)) and time.monotonic(),
                                   CATCH_UP_TIMEOUT_S, "the store to catch up", every=POLL_S,
                                   give_up=daemon.exit_reason) - last_produce
    finally:
        feed.halt.set()
        whole.stop()
        measured.stop()
        daemon.terminate()
        code = daemon.finish(120)
        watcher.stop()
    if code != 0:
        raise BenchError(f"the daemon exited {code} on SIGTERM; see {daemon.log_path}")
    commit, uncommitted = _commit_latencies(watcher, feed, range(begin, end))
    done = [b for b in ours.batches(daemon) if b.started >= feed.produced_at[begin]]
    mean_batch_s = sum(b.t - b.started for b in done) / max(1, len(done))
    judged = LatencyRun(ctx.cfg.default_trigger_s, seconds, end - begin, commit, [], uncommitted, caught_up,
                        len(done), sum(b.orders for b in done) / max(1, len(done)), mean_batch_s, whole.tree)
    out = MemoryRun(name, args[1:], env, end - begin, judged.pct("commit", 50), judged.pct("commit", 99),
                    judged.keeps_up, caught_up, len(done), mean_batch_s, whole.tree, dict(whole.parts),
                    measured.tree, dict(measured.parts), found, gc)
    ctx.say(f"{name}: peak tree {_mib(out.peak_tree_rss)}, JVM {_mib(out.peak_parts.get('jvm'))}; commit p50 "
            f"{_ms(out.commit_p50_s)} p99 {_ms(out.commit_p99_s)}; {'keeps up' if out.keeps_up else 'falls behind'}")
    return out


def _breakdown(pid: int, store: Path, baseline: int | None) -> Breakdown:
    tree = read_tree(pid)
    jvms = tree.of("jvm")
    if not jvms:
        return Breakdown(tree, None, "no JVM in the tree", rocksdb_figures(store), baseline)
    nmt, problem = native_memory(jvms[0].pid)
    heap = heap_info(jvms[0].pid)
    return Breakdown(tree, nmt, problem, rocksdb_figures(store), baseline, heap, jvm_maps(jvms[0].pid, heap))


def _commit_latencies(watcher: StoreWatcher, feed: PacedFeed, measured: range) -> tuple[list[float], int]:
    index = watcher.index()
    commit: list[float] = []
    missing = 0
    for i in measured:
        p, o = feed.placed[i]
        sample = index.first_sample(p, o)
        if sample is None:
            missing += 1
        else:
            commit.append(sample.t - feed.produced_at[i])
    return commit, missing


# ------------------------------------------------------------------ tables

def breakdown_rows(b: Breakdown) -> list[tuple[str, str, int | None]]:
    """(part, what, bytes) for the breakdown table."""
    rows: list[tuple[str, str, int | None]] = []
    jvms = b.tree.of("jvm")
    if jvms:
        jvm = jvms[0]
        rows += [("spark jvm", "RSS", jvm.rss), ("spark jvm", "  anonymous", jvm.anon)]
        rows.append(("spark jvm", "  file-backed", jvm.file))
        if b.maps is not None:
            rows.append(("spark jvm", "  of the RSS: the Java heap (resident pages in its range)", b.maps.heap))
            rows.append(("spark jvm", "  of the RSS: the class archives (.jsa mappings)", b.maps.class_archive))
            if b.maps.heap is not None:
                rows.append(("spark jvm", "  of the RSS: the rest (metaspace, code, stacks, GC, malloc, jars)",
                             jvm.rss - b.maps.heap - b.maps.class_archive))
        if b.nmt is not None:
            rows.append(("spark jvm", "NMT committed, total", b.nmt.committed))
            for name, cat in sorted(b.nmt.categories.items(), key=lambda kv: -kv[1].committed):
                if cat.committed >= MIB // 2:
                    rows.append(("spark jvm", f"  NMT {name}", cat.committed))
        if b.heap is not None:
            rows += [("spark jvm", "heap committed (GC.heap_info)", b.heap.committed),
                     ("spark jvm", "heap in use (GC.heap_info)", b.heap.used)]
        rows.append(("spark jvm", "threads", jvm.threads))
    for driver in b.tree.of("driver"):
        rows += [("python driver", "RSS", driver.rss), ("python driver", "  anonymous", driver.anon),
                 ("python driver", "  file-backed (libraries)", driver.file),
                 ("python driver", "threads", driver.threads)]
    if b.import_baseline_rss is not None:
        rows.append(("python driver", "a Python that only imported the same modules", b.import_baseline_rss))
    for key, value in sorted(b.rocksdb.items()):
        rows.append(("python driver", f"  {key}", value))
    workers = b.tree.of("python workers")
    rows += [("python workers", "count", len(workers)), ("python workers", "RSS, summed", b.tree.rss("python workers")),
             ("python workers", "PSS, summed", b.tree.pss("python workers"))]
    others = b.tree.of("other")
    if others:
        rows.append(("other", f"RSS of {len(others)} other processes", b.tree.rss("other")))
    rows += [("tree", "RSS", b.tree.rss()), ("tree", "PSS", b.tree.pss())]
    return rows


def _count_row(what: str) -> bool:
    return what in ("threads", "count")


def print_breakdown(b: Breakdown) -> None:
    click.echo("\nWhere the memory is (middle of the measured window)")
    click.echo(f"{'part':<16} {'what':<62} {'MiB':>9}")
    for part, what, value in breakdown_rows(b):
        shown = "-" if value is None else (f"{value:>9}" if _count_row(what) else f"{value / MIB:>9.1f}")
        click.echo(f"{part:<16} {what:<62} {shown:>9}")
    if b.nmt is None:
        click.echo(f"(no NMT summary: {b.nmt_problem})")


def print_variants(runs: list[MemoryRun]) -> None:
    click.echo("\nSettings side by side (peaks over the measured window; the whole run's peak in brackets)")
    head = (f"{'variant':<28} {'tree MiB':>16} {'JVM MiB':>14} {'driver':>7} {'workers':>8} "
            f"{'p50 ms':>7} {'p99 ms':>7} {'batch s':>8} {'keeps up':>8} {'young GCs':>14} {'full GCs':>13}")
    click.echo(head)
    for r in runs:
        m, w = r.measured_peak_parts, r.peak_parts
        click.echo(f"{r.name:<28} {r.measured_peak_tree_rss / MIB:>7.0f} ({r.peak_tree_rss / MIB:>5.0f}) "
                   f"{m.get('jvm', 0) / MIB:>6.0f} ({w.get('jvm', 0) / MIB:>5.0f}) {m.get('root', 0) / MIB:>7.0f} "
                   f"{m.get('children', 0) / MIB:>8.0f} {_num(r.commit_p50_s)} {_num(r.commit_p99_s)} "
                   f"{r.mean_batch_s:>8.3f} {'yes' if r.keeps_up else 'NO':>8} {_gcs(r.gc, 'YGC', 'YGCT'):>14} "
                   f"{_gcs(r.gc, 'FGC', 'FGCT'):>13}")


def _gcs(gc: dict[str, float], count: str, seconds: str) -> str:
    return f"{gc[count]:,.0f} / {gc[seconds]:.2f}s" if count in gc and seconds in gc else "-"


def _num(seconds: float | None) -> str:
    return f"{'-':>7}" if seconds is None else f"{seconds * 1000:>7.0f}"


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / MIB:,.0f} MiB"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:,.0f}ms"


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


# ------------------------------------------------------------------ command line

def _label(name: str, tracked: bool) -> str:
    return f"{name} (tracked)" if tracked else name


def _names(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    for name in names:
        variant(name)  # refuses an unknown one before anything starts
    return names


@click.command(context_settings=CONTEXT)
@click.option("--bootstrap", required=True, help="The Kafka broker to create the run's topics on.")
@click.option("--rate", type=click.IntRange(min=1), default=5_000, show_default=True, help="Orders per second fed.")
@click.option("--seconds", type=click.FloatRange(min=5), default=45.0, show_default=True,
              help="Measured seconds of feed in each run (after the warm-up).")
@click.option("--warmup", "warmup_s", type=click.FloatRange(min=0), default=15.0, show_default=True,
              help="Seconds fed before the measurement starts (the JIT's first minutes are the slow ones).")
@click.option("--breakdown", "tracked", default="default", show_default=True,
              help="Variants run with the JVM's Native Memory Tracking on and broken down by process and "
                   "category, comma-separated ('' for none).")
@click.option("--variants", default="", show_default=True,
              help=f"Runs without tracking, one per setting set, side by side: {', '.join(VARIANTS)}; "
                   "join names with + to combine them (serialgc+heap256).")
@click.option("--partitions", type=click.IntRange(min=1), default=3, show_default=True,
              help="Partitions of the orders topic.")
@click.option("--seed", type=int, default=42, show_default=True, help="Seed of the generated orders.")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_WORK,
              show_default=True, help="State dirs and logs of the runs.")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_OUTPUT,
              show_default=True, help="Where the results JSON goes.")
def memory(bootstrap: str, rate: int, seconds: float, warmup_s: float, tracked: str, variants: str,
           partitions: int, seed: int, work_dir: Path, output: Path) -> None:
    """Where a brewstream daemon's memory goes at a steady feed of orders, and what each
    memory setting of the Spark driver's JVM saves and costs."""
    names, broken_down = _names(variants), _names(tracked)
    if not broken_down and not names:
        raise click.UsageError("nothing to run: no --breakdown and no --variants")
    conn = KafkaConnection(bootstrap)
    require_broker(conn)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work = work_dir / stamp
    work.mkdir(parents=True, exist_ok=True)
    cfg = BenchConfig(latency_rate=rate, partitions=partitions, seed=seed, bootstrap=bootstrap, work_dir=work_dir,
                      output=output)
    ctx = BenchContext(cfg, conn, work, stamp)
    ctx.say(f"generating {int(rate * (warmup_s + seconds)) + 1:,} orders; logs in {work / 'logs'}")
    stream = order_stream(seed, int(rate * (warmup_s + seconds)) + 1)
    results: dict[str, Any] = {"rate": rate, "seconds": seconds, "warmup_seconds": warmup_s, "runs": []}
    runs: list[MemoryRun] = []

    def save() -> None:  # after every run: a later failure keeps what was measured
        results["runs"] = [_plain(asdict(r)) for r in runs]
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))

    plan = [(n, True) for n in broken_down] + [(n, False) for n in names]
    failed: dict[str, str] = {}
    # Measured before any run: a Python started during one would take CPU from the daemon.
    baseline = import_baseline_rss() if broken_down else None
    try:
        for name, breakdown in plan:
            try:
                runs.append(run_once(ctx, stream, _label(name, breakdown), variant(name), seconds, warmup_s,
                                     breakdown, baseline))
            except (BenchError, WaitTimedOut) as exc:  # a setting the JVM or Spark refuses: the next still runs
                ctx.say(f"{_label(name, breakdown)}: FAILED: {exc}")
                failed[_label(name, breakdown)] = str(exc)
            results["failed"] = failed
            save()
    finally:
        kill_all()
        delete_containing(conn, f"bench-{stamp}")
    for r in runs:
        if r.breakdown is not None:
            print_breakdown(r.breakdown)
    print_variants(runs)
    for name, why in failed.items():
        click.echo(f"{name}: failed: {why}")
    click.echo(f"results written to {output}")


def main() -> None:
    terminate_by_exception()  # SIGTERM unwinds like Ctrl+C, so every daemon is still stopped
    try:
        memory.main(standalone_mode=False)
    except (click.exceptions.Abort, KeyboardInterrupt, Terminated):
        click.echo("bench.memory: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except BrewError as exc:
        click.echo(f"bench.memory: FAILED: {exc}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
