"""Recovery drills: kill the daemon over and over, lose its disk, and check the numbers.

A drill runs on topics of its own (a fresh prefix), so it never touches a live pipeline.
It feeds a known stream of orders (about 1% of them bad) in the background, runs
``brewstream run`` as a child process group, and SIGKILLs the group: at random moments
(some during start-up and restore, most while batches are committing) and, in turn, at
each named fault point. ``disk-loss`` also deletes the state dir, the Spark checkpoint
or both before restarts. At the end it lets the daemon drain the input and compares:

- the store's counts with an oracle summed from the generated orders;
- the DLQ with the bad orders fed (each exactly once);
- a fresh restore from the changelog with the oracle.
"""

from __future__ import annotations

import itertools
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import orjson

from restorer.faults import ENV as FAULT_ENV
from restorer.faults import POINTS
from restorer.reader import apply_changelog
from restorer.store import StateDir, Store
from service.dlq.read import DlqRecord, read_dlq
from service.drills.process import ChildProcess
from service.drink_count.counts import DrinkCounts, check_count, drink_counts
from service.drink_count.pipeline import BATCH_PATTERN
from service.engine.query import READY_PATTERN
from topics.admin import create_topics, delete_topics
from topics.catalog import Topics
from topics.clock import WaitTimedOut, wait_until
from topics.errors import BrewError
from topics.feed import PacedFeeder
from topics.kafka import KafkaConnection, end_offsets, partitions_of, require_broker
from topics.orders_gen import OrderGenerator
from topics.records import read_from

DISK_ACTIONS = ("delete state dir", "delete checkpoint", "delete both", "keep disk")
FIRST_BATCH_TIMEOUT_S = 180.0
DRAIN_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class DrillConfig:
    """Every drill's settings; ``service.drills.failover`` runs the "failover" mode."""

    conn: KafkaConnection
    mode: str  # "kill9", "disk-loss" or "failover"
    orders: int = 20_000
    kills: int = 5
    seed: int = 1
    work_dir: Path = Path("state/drills")
    max_kill_delay_s: float = 10.0
    feed_seconds: float | None = None  # default: spread over the expected kills
    max_offsets_per_trigger: int = 500
    keep_topics: bool = False
    run_args: tuple[str, ...] = ()  # more `brewstream run` flags for every daemon: --master, --conf …


@dataclass(frozen=True)
class DrillSetup:
    """A drill's own topics and work dir, and the records it feeds with their oracle."""

    topics: Topics
    work: Path
    records: list[tuple[bytes | None, bytes | None]]
    expected: dict[str, int]
    bad: int
    feed_s: float


def set_up(cfg: DrillConfig, min_feed_s: float) -> DrillSetup:
    """Fresh topics (a prefix of their own) and work dir; the feed spread over ``feed_seconds``,
    else 25 s per kill (at least ``min_feed_s``)."""
    require_broker(cfg.conn)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    topics = Topics(f"drill-{cfg.mode}-{cfg.seed}-{stamp}.")
    work = cfg.work_dir / f"{cfg.mode}-{cfg.seed}-{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    create_topics(cfg.conn, 3, 1, topics)
    records, expected, bad = stream(cfg.orders, cfg.seed)
    feed_s = cfg.feed_seconds if cfg.feed_seconds is not None else max(min_feed_s, cfg.kills * 25.0)
    return DrillSetup(topics, work, records, expected, bad, feed_s)


def daemon_command(cfg: DrillConfig, topics: Topics, state: Path, checkpoint: Path, *more: str) -> list[str]:
    """Every drill daemon's `brewstream run`: a short trigger and flush and small batches, so
    kills land among many commits."""
    return [sys.executable, "-m", "service.cli", "run", *cfg.conn.cli_args(), "--topic-prefix", topics.prefix,
            "--state-dir", str(state), "--checkpoint-dir", str(checkpoint), "--trigger", "200ms", "--flush", "2s",
            "--max-offsets-per-trigger", str(cfg.max_offsets_per_trigger), *cfg.run_args, *more]


@dataclass
class Kill:
    n: int
    how: str
    after: str
    processed: int
    action: str = "-"


@dataclass
class Verdict:
    """What every drill compares at its end, against an oracle summed from what it fed."""

    expected: dict[str, int] = field(default_factory=dict)
    counted: dict[str, int] = field(default_factory=dict)
    restored: dict[str, int] = field(default_factory=dict)
    bad_fed: int = 0
    dlq_records: int = 0
    dlq_unique: int = 0
    # Records fed, and committed records the input holds, when the drill read it back: the
    # oracle describes the input only when they are equal.
    fed: int | None = None
    in_input: int | None = None

    @property
    def input_as_fed(self) -> bool:
        return self.in_input is None or self.in_input == self.fed

    @property
    def exact(self) -> bool:
        return (self.counted == self.expected and self.restored == self.expected
                and self.dlq_records == self.dlq_unique == self.bad_fed and self.input_as_fed)

    def report(self, say: Callable[[str], None]) -> None:
        say(f"orders counted: {sum(self.counted.values())} cups over {len(self.counted)} drinks; "
            f"oracle: {sum(self.expected.values())} cups over {len(self.expected)} drinks")
        say(f"DLQ: {self.dlq_records} records, {self.dlq_unique} distinct, {self.bad_fed} bad orders fed")
        if self.in_input is not None:
            say(f"input: {self.in_input} committed records, {self.fed} fed")
        if self.exact:
            say("verdict: exact (store, DLQ and a fresh restore from the changelog all match the oracle)")
            return
        for label, got in (("store", self.counted), ("restore", self.restored)):
            diff = {d: got.get(d, 0) - self.expected.get(d, 0) for d in sorted(set(got) | set(self.expected))
                    if got.get(d, 0) != self.expected.get(d, 0)}
            if diff:
                say(f"verdict: NOT exact — {label} minus oracle per drink: {diff}")
        if not self.dlq_records == self.dlq_unique == self.bad_fed:
            say("verdict: NOT exact — the DLQ does not hold each bad order exactly once")
        if not self.input_as_fed:
            say(f"verdict: NOT exact — the input holds {self.in_input} committed records and {self.fed} were fed: "
                "Kafka wrote some twice or lost some, so the oracle does not describe the input")


@dataclass
class DrillResult(Verdict):
    kills: list[Kill] = field(default_factory=list)


def order_stream(seed: int) -> Iterator[tuple[tuple[bytes | None, bytes | None], dict[str, int] | None]]:
    """Endless: each record to feed, with the cups per drink it adds to the oracle, or None
    for a malformed one (about 1%)."""
    rng = random.Random(seed)
    for order in OrderGenerator(seed, run_id=f"drill{seed}"):
        if rng.random() < 0.01:
            yield (order["shop_id"].encode(), b'{"order_id": "broken", "items": ['), None
            continue
        cups: dict[str, int] = {}
        for item in order["items"]:
            cups[item["drink"]] = cups.get(item["drink"], 0) + item["quantity"]
        yield (order["shop_id"].encode(), orjson.dumps(order)), cups


def add_cups(expected: dict[str, int], cups: dict[str, int]) -> None:
    for drink, n in cups.items():
        expected[drink] = expected.get(drink, 0) + n


def stream(orders: int, seed: int) -> tuple[list[tuple[bytes | None, bytes | None]], dict[str, int], int]:
    """The records to feed, the oracle of their good orders, and how many are bad."""
    records: list[tuple[bytes | None, bytes | None]] = []
    expected: dict[str, int] = {}
    bad = 0
    for record, cups in itertools.islice(order_stream(seed), orders):
        records.append(record)
        if cups is None:
            bad += 1
        else:
            add_cups(expected, cups)
    return records, expected, bad


def run_drill(cfg: DrillConfig, out: TextIO = sys.stdout) -> DrillResult:
    if cfg.mode not in ("kill9", "disk-loss"):
        raise BrewError(f"unknown drill {cfg.mode!r}")
    rng = random.Random(cfg.seed)
    setup = set_up(cfg, min_feed_s=10.0)
    topics, work = setup.topics, setup.work
    state, checkpoint = work / "state", work / "checkpoint"
    result = DrillResult(expected=setup.expected, bad_fed=setup.bad)
    say = printer(out)
    say(f"drill {cfg.mode}: {cfg.orders} orders ({setup.bad} bad) over ~{setup.feed_s:.0f}s to {topics.orders}, "
        f"{cfg.kills} kills, seed {cfg.seed}; work dir {work}")
    feeder = PacedFeeder.spread(cfg.conn, topics.orders, setup.records, setup.feed_s, "drill-feeder")
    feeder.start()
    try:
        for n in range(1, cfg.kills + 1):
            action = "-"
            if cfg.mode == "disk-loss" and n > 1:
                action = DISK_ACTIONS[(n - 2) % len(DISK_ACTIONS)]
                _lose(action, state, checkpoint)
            how = _kill_kind(n, rng)
            env = {FAULT_ENV: f"{how}@{rng.randint(1, 3)}"} if how in POINTS else {}
            daemon = _Daemon(cfg, topics, state, checkpoint, work / f"daemon-{n}.log", env)
            after = daemon.run_until_killed(
                how, rng, cfg.max_kill_delay_s,
                idle=lambda: not feeder.is_alive() and drained(cfg.conn, topics.orders, state))
            kill = Kill(n, how if how in POINTS else "SIGKILL at random", after, _processed(state), action)
            result.kills.append(kill)
            say(f"  kill {n}: {kill.how:<24} {kill.after:<22} processed={kill.processed:<7} "
                f"{'(' + action + ' before this run)' if action != '-' else ''}")
        if cfg.mode == "disk-loss":
            _lose("delete both", state, checkpoint)
            say("  final run: after deleting the state dir and the checkpoint")
        feeder.join()
        feeder.finish()  # every order the oracle sums was committed
        daemon = _Daemon(cfg, topics, state, checkpoint, work / "daemon-final.log", {})
        daemon.drain(lambda: drained(cfg.conn, topics.orders, state), DRAIN_TIMEOUT_S)
        result.counted = read_counts(state)
        result.dlq_records, result.dlq_unique = count_dlq(cfg.conn, topics.dlq)
        result.restored = restore_check(cfg.conn, topics.changelog, work / "restore-check")
    finally:
        feeder.stop()
        if not cfg.keep_topics:
            delete_topics(cfg.conn, topics)
    result.report(say)
    return result


def _kill_kind(n: int, rng: random.Random) -> str:
    # Every third run dies at a named fault point, in turn; the others at random.
    if n % 3 == 0:
        return POINTS[(n // 3 - 1) % len(POINTS)]
    return "random-startup" if rng.random() < 0.25 else "random"


class _Daemon:
    """One run of the daemon under the drill (``service.drills.process``), until it is killed."""

    def __init__(self, cfg: DrillConfig, topics: Topics, state: Path, checkpoint: Path, log: Path,
                 env: dict[str, str]) -> None:
        self.log = log
        self.child = ChildProcess("the daemon", daemon_command(cfg, topics, state, checkpoint), log, env=env)
        self.proc = self.child.proc
        self.started = self.child.started

    def run_until_killed(self, how: str, rng: random.Random, max_delay: float, idle: Callable[[], bool]) -> str:
        if how in POINTS:
            # The fault point kills the process group's Python and JVM itself.
            self._wait_exit(FIRST_BATCH_TIMEOUT_S + 60, "to reach its fault point")
            return f"at {how}"
        if how == "random-startup":
            delay = rng.uniform(0.5, 8.0)
            if self._alive_for(delay):
                self._kill()
            return f"{delay:.1f}s after start"
        anchor = self._wait_for_batch(idle)
        delay = rng.uniform(0.0, max_delay)
        self._alive_for(delay)
        self._kill()
        return f"{delay:.1f}s after {anchor}"

    def drain(self, done: Callable[[], bool], timeout: float) -> None:
        try:
            wait_until(done, timeout, "the daemon to consume the input", every=1.0, give_up=self._exited)
        except WaitTimedOut as exc:
            self._kill()
            raise BrewError(f"{exc}; see {self.log}") from None
        self.proc.send_signal(signal.SIGTERM)
        if self.proc.wait(120) != 0:
            raise BrewError(f"the daemon exited with {self.proc.returncode} on SIGTERM; see {self.log}")

    def _wait_for_batch(self, idle: Callable[[], bool]) -> str:
        """Wait for the first batch of this run; once everything fed is counted there is
        none to wait for, and a query that has started is killed as it idles."""
        next_idle_check = 0.0

        def started() -> str | None:
            nonlocal next_idle_check
            text = self.log.read_text(errors="replace")
            if BATCH_PATTERN.search(text):
                return "1st batch"
            if READY_PATTERN.search(text) and time.monotonic() >= next_idle_check:
                next_idle_check = time.monotonic() + 2.0  # opens the store and asks Kafka
                if idle():
                    return "start, idle"
            return None

        try:
            return wait_until(started, FIRST_BATCH_TIMEOUT_S, "its first batch", give_up=self._exited)
        except WaitTimedOut as exc:
            self._kill()
            raise BrewError(f"{exc}; see {self.log}") from None

    def _exited(self) -> str | None:
        code = self.proc.poll()
        return None if code is None else f"the daemon exited with {code}"

    def _alive_for(self, seconds: float) -> bool:
        try:
            self.proc.wait(seconds)
        except subprocess.TimeoutExpired:
            return True
        raise BrewError(f"the daemon exited with {self.proc.returncode} on its own; see {self.log}")

    def _wait_exit(self, timeout: float, what: str) -> None:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._kill()
            raise BrewError(f"the daemon did not die {what} within {timeout:.0f}s; see {self.log}") from None
        if code != -signal.SIGKILL:
            raise BrewError(f"the daemon exited with {code} instead of dying {what}; see {self.log}")
        self._kill()  # anything of the group still standing

    def _kill(self) -> None:
        self.child.kill()


def _lose(action: str, state: Path, checkpoint: Path) -> None:
    if action in ("delete state dir", "delete both"):
        shutil.rmtree(state, ignore_errors=True)
    if action in ("delete checkpoint", "delete both"):
        shutil.rmtree(checkpoint, ignore_errors=True)


def read_store(state: Path) -> DrinkCounts | None:
    store_path = StateDir(state).store_path
    if not (store_path / "CURRENT").exists():
        return None
    with Store(store_path, read_only=True) as store:
        return drink_counts(store.read_all())


def _processed(state: Path) -> int:
    snapshot = read_store(state)
    return 0 if snapshot is None else snapshot.processed_orders + snapshot.bad_orders


def read_counts(state: Path) -> dict[str, int]:
    snapshot = read_store(state)
    return {} if snapshot is None else dict(snapshot.counts)


def drained(conn: KafkaConnection, topic: str, state: Path) -> bool:
    snapshot = read_store(state)
    if snapshot is None:
        return False
    consumer = conn.consumer()
    try:
        ends = {p: high for p, (_, high) in end_offsets(consumer, topic, partitions_of(conn, topic)).items()}
    finally:
        consumer.close()
    return snapshot.state.next_offsets(topic) == {p: e for p, e in ends.items() if e > 0}


def committed_records(conn: KafkaConnection, topic: str) -> int:
    """The records of ``topic`` a read_committed reader sees, as the daemon reads it."""
    return sum(1 for _ in read_from(conn, topic))


def count_dlq(conn: KafkaConnection, topic: str) -> tuple[int, int]:
    """(records, distinct source positions) in the DLQ, read committed. A record that is not
    brewstream's counts as its own source, so it shows as one record too many."""
    sources = [(r.source_topic, r.source_partition, r.source_offset) if isinstance(r, DlqRecord) else r
               for r in read_dlq(conn, topic)]
    return len(sources), len(set(sources))


def restore_check(conn: KafkaConnection, changelog: str, folder: Path) -> dict[str, int]:
    shutil.rmtree(folder, ignore_errors=True)
    with Store(folder) as store:
        apply_changelog(conn, changelog, store, check_count)
        return drink_counts(store.read_all()).counts


def printer(out: TextIO) -> Callable[[str], None]:
    def say(line: str) -> None:
        print(line, file=out, flush=True)
    return say
