"""``brewstream drill broker-faults``: Kafka's own failures, one at a time, while the daemon
counts, and the numbers checked at the end.

On topics of its own (replication factor 3), while orders (about 1% malformed) stream in
at a steady rate, the drill runs the daemon alone, then an active with a hot standby
(``--standby``), and injects into the cluster, one at a time with seeded random pauses
between them, every fault kind of ``KINDS``, ``rounds`` times each in a seeded order:

- the leader of a changelog partition, the transaction coordinator of the changelog's
  transactional.id (or, behind a shuffle, of the input stage's or a task's, at random),
  the active KRaft controller: SIGKILLed, then started again;
- a broker that leads input partitions: SIGSTOPped for longer than the client timeouts,
  then SIGCONTed;
- a rolling restart: each broker stopped cleanly and back in every ISR before the next;
- two brokers SIGKILLed at once (the ISR below min.insync.replicas, and on a three-node
  KRaft cluster the quorum lost): every feed transaction is refused and sent again, never
  lost or doubled; then both back;
- the active daemon SIGKILLed while a broker is down: restarted alone, or the standby
  takes over (the killed one comes back as the standby);
- with the sandbox's fault proxy (the daemons bootstrap through it; the drill's own feeder
  and readers use the direct listeners): latency, a blackhole longer than the request
  timeout, and connections reset while a changelog transaction is open, all between the
  daemons and the leader of a changelog partition.

For each fault it measures the longest stall: the longest time from the injection until
the daemon counts again after the cluster healed during which input was waiting and no
batch committed (orders arrive every 100 ms, so input is always waiting); and whether any
daemon exited or printed a traceback. Commits are seen in the daemons' own batch lines,
read as they are written (not through Kafka, which is what is being faulted).

At the end of each pass: the store, the DLQ (each bad order once) and a fresh restore
from the changelog against an oracle summed from the orders the feeder had committed, and
the input read back holding as many records as were fed (a feed that doubled a record
would make the oracle wrong, not the daemon); and
no transaction left hanging: the coordinator describes every transactional.id the daemons
wrote under (the changelog's, and behind a shuffle the input stage's and each task's; DescribeTransactions,
``sandbox.kafka_wire``) in no open state, and every partition they wrote transactionally
(changelog, DLQ, repartition topic) has its last stable offset at its high watermark.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from confluent_kafka import TopicPartition

from restorer.changelog import task_transactional_id, transactional_id
from restorer.repartition import input_stage_id
from sandbox import roles
from sandbox.kraft import free_port
from service.drills.cluster_control import ClusterControl
from service.drills.failover import Instance, is_standby
from service.drills.kinds import BROKER_PAUSE_S, KINDS, NEEDS, NETWORK_KINDS, PASSES
from service.drills.recovery import (
    DrillConfig,
    Verdict,
    add_cups,
    committed_records,
    count_dlq,
    drained,
    order_stream,
    printer,
    read_counts,
    restore_check,
)
from service.drink_count.pipeline import BATCH_PATTERN
from service.engine.runner import TOOK_OVER_PATTERN
from service.instance.health import RESTORING, ROLE_PATTERN, role_pattern
from topics.admin import create_topics, delete_topics
from topics.catalog import Topics
from topics.clock import WaitTimedOut, wait_until
from topics.errors import BrewError
from topics.feed import PacedFeeder
from topics.kafka import REQUEST_TIMEOUT_S, KafkaConnection, partitions_of

START_TIMEOUT_S = 240.0
RECOVER_TIMEOUT_S = 180.0
SETTLE_TIMEOUT_S = 240.0
DRAIN_TIMEOUT_S = 600.0
TAKEOVER_TIMEOUT_S = 120.0
WATCH_EVERY_S = 0.05
TRANSACTION_STATE = "__transaction_state"
# An active instance restores once it holds the lease (``engine.runner``, ``_be_active``).
CLAIMED = role_pattern(RESTORING)


@dataclass(frozen=True)
class BrokerDrillConfig:
    control: ClusterControl
    rounds: int = 3
    seed: int = 1
    rate: int = 50  # orders a second
    passes: tuple[str, ...] = PASSES
    kinds: tuple[str, ...] = tuple(KINDS)
    pause_s: float = BROKER_PAUSE_S  # how long input-leader-pause keeps a broker stopped
    down_s: tuple[float, float] = (3.0, 10.0)  # how long a killed broker stays down (random in range)
    outage_s: float = 15.0  # how long two-brokers-kill keeps both down
    latency_ms: int = 800
    latency_s: float = 15.0
    blackhole_s: float = REQUEST_TIMEOUT_S + 5.0
    resets: int = 3
    max_gap_s: float = 5.0  # random pause before each fault, up to this
    work_dir: Path = Path("state/drills")
    keep_topics: bool = False
    run_args: tuple[str, ...] = ()

    @property
    def shuffled(self) -> bool:
        """Whether the daemons run behind a shuffle (``run --shuffle``)."""
        return "--shuffle" in self.run_args

    def schedule(self, rng: random.Random) -> list[str]:
        """Every kind ``rounds`` times: each round in a shuffled order of its own."""
        kinds = [k for k in KINDS if k in self.kinds and self.feasible(k)]
        order: list[str] = []
        for _ in range(self.rounds):
            round_ = list(kinds)
            rng.shuffle(round_)
            order += round_
        return order

    def feasible(self, kind: str) -> bool:
        if kind in NETWORK_KINDS:
            return self.control.network
        return all(self.control.can(a) for a in ("kill", "start", *NEEDS.get(kind, ())))


@dataclass
class FaultRun:
    """One injected fault and what the daemons did through it."""

    n: int
    kind: str
    what: str = ""
    started: float = 0.0  # monotonic: the injection
    healed: float = 0.0  # the cluster (or network) whole again
    counting: float | None = None  # the first commit after healed; None: none within the timeout
    stall_s: float = 0.0
    exits: list[str] = field(default_factory=list)
    tracebacks: int = 0
    error: str = ""

    @property
    def after_heal_s(self) -> float | None:
        return None if self.counting is None else max(0.0, self.counting - self.healed)

    @property
    def ok(self) -> bool:
        return self.counting is not None and not self.exits and not self.tracebacks and not self.error


@dataclass
class PassResult(Verdict):
    mode: str = "alone"
    faults: list[FaultRun] = field(default_factory=list)
    exits: list[str] = field(default_factory=list)  # every unexpected exit, faults' and between them
    open_transactions: list[str] = field(default_factory=list)
    transaction_check: str = ""

    @property
    def passed(self) -> bool:
        return (self.exact and not self.exits and not self.open_transactions
                and all(f.ok for f in self.faults))


@dataclass
class BrokerDrillResult:
    passes: list[PassResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.passes) and all(p.passed for p in self.passes)


def stall_seconds(commits: list[float], start: float, end: float) -> float:
    """Pure: the longest time within [start, end] with no commit in it, ``end`` being the
    first commit after the fault healed (or the time given up at)."""
    points = [start, *sorted(c for c in commits if start < c < end), end]
    return max((b - a for a, b in itertools.pairwise(points)), default=0.0)


def first_commit_after(commits: list[float], moment: float) -> float | None:
    """Pure: the first commit time after ``moment``, or None."""
    return min((c for c in commits if c > moment), default=None)


# ---------------------------------------------------------------- the feed


class SteadyFeeder(PacedFeeder):
    """Orders at a steady rate until stopped (``topics.feed.PacedFeeder``); the oracle sums
    what was queued, ``finish`` proves every record was committed (a tick the cluster aborts
    is sent again whole, never lost or doubled), and the pass reads the input back to see
    that it holds as many records as were fed."""

    def __init__(self, conn: KafkaConnection, topic: str, seed: int, rate: int) -> None:
        self.seed = seed
        self.expected: dict[str, int] = {}
        self.bad = 0
        super().__init__(conn, topic, self._orders(), 0.1, max(1, round(rate / 10)), "drill-feeder")

    def _orders(self) -> Iterator[tuple[bytes | None, bytes | None]]:
        for record, cups in order_stream(self.seed):
            if cups is None:
                self.bad += 1
            else:
                add_cups(self.expected, cups)
            yield record


# ---------------------------------------------------------------- the daemons


class LogWatch(threading.Thread):
    """Reads every daemon's log as it is written: when each batch committed (as seen here),
    and the tracebacks printed."""

    def __init__(self, logs: list[Path]) -> None:
        super().__init__(name="drill-log-watch", daemon=True)
        self.logs = logs
        self.commits: list[float] = []
        self.tracebacks: list[float] = []
        self._offsets = {path: 0 for path in logs}
        self._partial = {path: b"" for path in logs}
        self._halt = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        while not self._halt.wait(WATCH_EVERY_S):
            self.read()

    def read(self) -> None:
        for path in self.logs:
            try:
                with open(path, "rb") as fh:
                    fh.seek(self._offsets[path])
                    data = fh.read()
            except FileNotFoundError:
                continue
            if not data:
                continue
            now = time.monotonic()
            self._offsets[path] += len(data)
            data = self._partial[path] + data
            *lines, self._partial[path] = data.split(b"\n")
            with self.lock:
                for raw in lines:
                    line = raw.decode(errors="replace")
                    if BATCH_PATTERN.search(line):
                        self.commits.append(now)
                    elif line.startswith("Traceback (most recent call last)"):
                        self.tracebacks.append(now)

    def stop(self) -> None:
        self._halt.set()
        self.join(5)
        self.read()

    def snapshot(self) -> tuple[list[float], list[float]]:
        with self.lock:
            return list(self.commits), list(self.tracebacks)


class Daemons:
    """The daemons under test: who is active, killing one on purpose, and restarting any
    that exits on its own (an exit is recorded: the drill fails on it)."""

    def __init__(self, instances: list[Instance], standby_pass: bool, say: Callable[[str], None]) -> None:
        self.instances = instances
        self.standby_pass = standby_pass
        self.say = say
        self.lock = threading.RLock()
        self.expected: set[str] = set()
        self.exits: list[str] = []
        self.on_exit: Callable[[str], None] = lambda _line: None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._supervise, name="drill-supervisor", daemon=True)

    def start(self) -> None:
        """The first one as active, then (once it has claimed the lease: it is restoring)
        the others as standbys, their Spark starting while the active's does."""
        first, *others = self.instances
        first.start(standby=False)
        first.wait_for(lambda t: CLAIMED.search(t) is not None, "to claim the lease", START_TIMEOUT_S)
        for inst in others:
            inst.start(standby=True)
        first.wait_for(lambda t: BATCH_PATTERN.search(t) is not None, "to commit its first batch", START_TIMEOUT_S)
        for inst in others:
            inst.wait_for(is_standby, "to be a standby", START_TIMEOUT_S)
        self._thread.start()

    def active(self) -> Instance:
        """The instance whose current run last said it is active."""
        def find() -> Instance | None:
            for inst in self.instances:
                if inst.proc is not None and inst.proc.poll() is None and _role(inst) == "active":
                    return inst
            return None
        try:
            return wait_until(find, TAKEOVER_TIMEOUT_S, "an active instance", every=0.1)
        except WaitTimedOut as exc:
            raise BrewError(str(exc)) from None

    def others(self, inst: Instance) -> list[Instance]:
        return [i for i in self.instances if i is not inst]

    def kill(self, inst: Instance) -> None:
        with self.lock:
            self.expected.add(inst.name)
            inst.kill()

    def restart(self, inst: Instance, standby: bool) -> None:
        with self.lock:
            self.expected.discard(inst.name)
            inst.start(standby=standby)

    def stop_all(self) -> None:
        self._stop.set()
        with self.lock:
            for inst in self.instances:
                self.expected.add(inst.name)

    def _supervise(self) -> None:
        while not self._stop.wait(0.2):
            with self.lock:
                for inst in self.instances:
                    code = None if inst.proc is None else inst.proc.poll()
                    if code is None or inst.name in self.expected:
                        continue
                    last = _last_line(inst.text())
                    line = f"{inst.name} exited with {code} ({last}); see {inst.log}"
                    self.exits.append(line)
                    self.on_exit(line)
                    self.say(f"    ! {line}; starting it again")
                    inst.start(standby=self.standby_pass)


def _role(inst: Instance) -> str | None:
    found = ROLE_PATTERN.findall(inst.text())
    return found[-1] if found else None


def _events(text: str, n: int = 12) -> str:
    """A daemon log's last ``n`` lines but its batch lines and boards: what it last did."""
    lines = [ln for ln in text.splitlines() if ln[:2].isdigit() and BATCH_PATTERN.search(ln) is None]
    return "\n".join(ln[:300] for ln in lines[-n:]) or "no output"


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "no output"


def unready(port: int) -> str | None:
    """Why the daemon's /readyz does not say ready, or None when it does."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            return None if resp.status == 200 else f"/readyz {resp.status}"
    except urllib.error.HTTPError as exc:
        return exc.read().decode(errors="replace").strip()[:200] or f"/readyz {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        return f"/readyz unanswered: {exc}"


# ---------------------------------------------------------------- one pass


@dataclass
class Pass:
    cfg: BrokerDrillConfig
    mode: str
    topics: Topics
    rng: random.Random
    daemons: Daemons
    watch: LogWatch
    ports: dict[str, int]
    say: Callable[[str], None]

    @property
    def control(self) -> ClusterControl:
        return self.cfg.control

    @property
    def direct(self) -> KafkaConnection:
        return self.cfg.control.direct

    def watched_topics(self) -> list[str]:
        t = self.topics
        return [t.orders, t.changelog, t.dlq, t.counts, t.instances, TRANSACTION_STATE]

    def settle(self) -> None:
        """Before each fault: every replica in sync, the active counting, the standby
        following, and both saying ready."""
        began = time.monotonic()
        try:
            roles.wait_full_isr(self.direct, self.watched_topics(), SETTLE_TIMEOUT_S)
        except BrewError as exc:
            raise BrewError(f"the cluster did not heal: {exc}") from None
        active = self.daemons.active()

        def unsettled() -> str | None:
            """What is still missing, or None."""
            commits, _ = self.watch.snapshot()
            if not commits or commits[-1] < began:
                return f"no batch committed since the settle began; {active.name} is active"
            if self.mode == "standby":
                lagging = [i.name for i in self.daemons.others(active) if not is_standby(i.text())]
                if lagging:
                    return f"{', '.join(lagging)} not a standby"
            why = [f"{i.name} {reason}" for i in self.daemons.instances
                   if (reason := unready(self.ports[i.name])) is not None]
            return "; ".join(why) or None

        try:
            wait_until(lambda: unsettled() is None, SETTLE_TIMEOUT_S, "the daemons to count and be ready again",
                       every=0.2)
        except WaitTimedOut as exc:
            tails = "".join(f"\n{i.name}'s last events ({i.log}):\n{_events(i.text())}" for i in self.daemons.instances)
            raise BrewError(f"{exc}: {unsettled()}{tails}") from None

    def leader_of(self, topic: str) -> tuple[int, int]:
        """A random partition of ``topic`` and its leader."""
        parts = [p for p in roles.partitions(self.direct, [topic]) if p.leader is not None]
        if not parts:
            raise BrewError(f"no partition of {topic} has a leader")
        part = self.rng.choice(parts)
        assert part.leader is not None
        return part.partition, part.leader

    def down_time(self) -> float:
        low, high = self.cfg.down_s
        return self.rng.uniform(low, high)


def _kill_and_start(run: Pass, node: int, role: str) -> str:
    run.control.act("kill", node)
    down = run.down_time()
    time.sleep(down)  # the broker stays down this long, on purpose
    back = run.control.act("start", node)
    return f"node {node} ({role}) killed, down {down:.1f}s; {back}"


def fault_changelog_leader_kill(run: Pass) -> str:
    partition, node = run.leader_of(run.topics.changelog)
    return _kill_and_start(run, node, f"leader of changelog partition {partition}")


def fault_coordinator_kill(run: Pass) -> str:
    tid = run.rng.choice(transactional_ids(run.direct, run.topics, run.cfg.shuffled))
    node = roles.transaction_coordinator(run.direct.bootstrap, tid)
    return _kill_and_start(run, node, f"transaction coordinator of {tid}")


def fault_controller_kill(run: Pass) -> str:
    node = wait_until(lambda: roles.active_controller(run.direct.bootstrap), 30, "an active controller")
    return _kill_and_start(run, node, "active controller")


def fault_input_leader_pause(run: Pass) -> str:
    partition, node = run.leader_of(run.topics.orders)
    run.control.act("pause", node)
    time.sleep(run.cfg.pause_s)  # paused this long, on purpose: past the client timeouts
    back = run.control.act("resume", node)
    return f"node {node} (leader of input partition {partition}) paused {run.cfg.pause_s:.0f}s; {back}"


def fault_rolling_restart(run: Pass) -> str:
    order = run.control.node_ids()
    run.rng.shuffle(order)
    for node in order:
        run.control.act("stop", node)
        run.control.act("start", node)
        roles.wait_full_isr(run.direct, run.watched_topics(), SETTLE_TIMEOUT_S)
    return f"nodes {', '.join(map(str, order))} stopped and back in every ISR, one after another"


def fault_two_brokers_kill(run: Pass) -> str:
    pair = sorted(run.rng.sample(run.control.node_ids(), 2))
    run.control.act_all("kill", pair)
    time.sleep(run.cfg.outage_s)  # below min.insync.replicas this long, on purpose
    run.control.act_all("start", pair)
    return f"nodes {pair[0]} and {pair[1]} killed at once, down {run.cfg.outage_s:.0f}s, both back"


def fault_daemon_kill(run: Pass) -> str:
    partition, node = run.leader_of(run.topics.changelog)
    active = run.daemons.active()
    run.control.act("kill", node)
    began = time.monotonic()
    time.sleep(run.rng.uniform(0.5, 3.0))  # into the broker's outage, on purpose
    run.daemons.kill(active)
    if run.mode == "standby":
        new = run.daemons.others(active)[0]
        new.wait_for(lambda t: TOOK_OVER_PATTERN.search(t) is not None, "to take over", TAKEOVER_TIMEOUT_S)
        run.daemons.restart(active, standby=True)
        how = f"{new.name} took over, {active.name} back as the standby"
    else:
        run.daemons.restart(active, standby=False)
        how = f"{active.name} started again"
    time.sleep(max(0.0, run.down_time() - (time.monotonic() - began)))
    back = run.control.act("start", node)
    return (f"node {node} (leader of changelog partition {partition}) killed, then the active daemon "
            f"{active.name}; {how}; {back}")


def fault_net_latency(run: Pass) -> str:
    partition, node = run.leader_of(run.topics.changelog)
    run.control.latency(node, run.cfg.latency_ms)
    time.sleep(run.cfg.latency_s)  # the latency holds this long, on purpose
    run.control.heal()
    return f"{run.cfg.latency_ms} ms to node {node} (leader of changelog partition {partition}) for " \
           f"{run.cfg.latency_s:.0f}s"


def fault_net_blackhole(run: Pass) -> str:
    partition, node = run.leader_of(run.topics.changelog)
    run.control.blackhole(node)
    time.sleep(run.cfg.blackhole_s)  # longer than the request timeout, on purpose
    run.control.heal()
    return f"node {node} (leader of changelog partition {partition}) blackholed for {run.cfg.blackhole_s:.0f}s"


def fault_net_reset(run: Pass) -> str:
    partition, node = run.leader_of(run.topics.changelog)
    mid = 0
    for _ in range(run.cfg.resets):
        mid += open_transaction_seen(run.direct, run.topics.changelog, timeout=5.0)
        run.control.reset(node)
        time.sleep(run.rng.uniform(0.5, 2.0))
    return (f"connections to node {node} (leader of changelog partition {partition}) reset {run.cfg.resets} times, "
            f"{mid} of them with a changelog transaction seen open")


FAULTS: dict[str, Callable[[Pass], str]] = {
    "changelog-leader-kill": fault_changelog_leader_kill,
    "coordinator-kill": fault_coordinator_kill,
    "controller-kill": fault_controller_kill,
    "input-leader-pause": fault_input_leader_pause,
    "rolling-restart": fault_rolling_restart,
    "two-brokers-kill": fault_two_brokers_kill,
    "daemon-kill": fault_daemon_kill,
    "net-latency": fault_net_latency,
    "net-blackhole": fault_net_blackhole,
    "net-reset": fault_net_reset,
}


def open_transaction_seen(conn: KafkaConnection, topic: str, timeout: float) -> bool:
    """Wait (up to ``timeout``) until some partition of ``topic`` has a transaction open: its
    last stable offset behind its high watermark."""
    committed = conn.consumer({"isolation.level": "read_committed"})
    everything = conn.consumer({"isolation.level": "read_uncommitted"})
    try:
        partitions = partitions_of(conn, topic)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if open_partitions(committed, everything, topic, partitions):
                return True
            time.sleep(0.01)
        return False
    finally:
        committed.close()
        everything.close()


def open_partitions(committed: object, everything: object, topic: str, partitions: list[int]) -> list[int]:
    """Partitions of ``topic`` whose last stable offset (read_committed) is behind the high
    watermark (read_uncommitted): an open transaction holds them."""
    from confluent_kafka import Consumer

    assert isinstance(committed, Consumer) and isinstance(everything, Consumer)
    out = []
    for p in partitions:
        tp = TopicPartition(topic, p)
        lso = committed.get_watermark_offsets(tp, timeout=5, cached=False)[1]
        high = everything.get_watermark_offsets(tp, timeout=5, cached=False)[1]
        if lso < high:
            out.append(p)
    return out


def transactional_ids(conn: KafkaConnection, topics: Topics, shuffled: bool) -> list[str]:
    """Every transactional.id the daemons write under: the changelog's and, behind a
    shuffle, the input stage's and each task's (``changelog.task_transactional_id``)."""
    if not shuffled:
        return [transactional_id(topics.changelog)]
    tasks = [task_transactional_id(topics.changelog, t) for t in partitions_of(conn, topics.changelog)]
    return [transactional_id(topics.changelog), input_stage_id(topics.drink_count_repartition), *tasks]


def hanging_transactions(conn: KafkaConnection, topics: Topics, shuffled: bool = False) -> tuple[list[str], str]:
    """What is left open once the daemons stopped: the coordinator's state of every
    transactional.id they wrote under, and every partition they wrote transactionally
    (changelog, DLQ and, behind a shuffle, the repartition topic) whose last stable offset
    is behind its high watermark. Returns (problems, what was checked)."""
    problems: list[str] = []
    states = []
    for tid in transactional_ids(conn, topics, shuffled):
        state = roles.transaction_state(conn.bootstrap, tid)
        states.append(f"{tid} {state.state}")
        if state.open:
            problems.append(f"{tid} is {state.state} (partitions {list(state.partitions)})")
    written = [topics.changelog, topics.dlq, *([topics.drink_count_repartition] if shuffled else [])]
    committed = conn.consumer({"isolation.level": "read_committed"})
    everything = conn.consumer({"isolation.level": "read_uncommitted"})
    checked = 0
    try:
        for topic in written:
            parts = partitions_of(conn, topic)
            checked += len(parts)
            problems += [f"{topic}[{p}]: last stable offset behind the high watermark"
                         for p in open_partitions(committed, everything, topic, parts)]
    finally:
        committed.close()
        everything.close()
    return problems, (f"DescribeTransactions: {', '.join(states)}; last stable offset = high watermark on "
                      f"{checked} partitions of {', '.join(written)}" if not problems else "; ".join(problems))


def run_pass(cfg: BrokerDrillConfig, mode: str, out: TextIO) -> PassResult:
    say = printer(out)
    rng = random.Random(f"{cfg.seed}-{mode}")
    direct = cfg.control.direct
    stamp = time.strftime("%Y%m%d-%H%M%S")
    topics = Topics(f"drill-brokers-{mode}-{cfg.seed}-{stamp}.")
    work = cfg.work_dir / f"brokers-{mode}-{cfg.seed}-{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    cfg.control.heal()
    create_topics(direct, 3, 3, topics)
    schedule = cfg.schedule(rng)
    say(f"pass {mode}: {len(schedule)} faults on {topics.prefix}*, orders at {cfg.rate}/s; work dir {work}")

    daemon_cfg = DrillConfig(cfg.control.daemon, "broker-faults", work_dir=work, run_args=cfg.run_args)
    names = ["a", "b"] if mode == "standby" else ["a"]
    ports = {name: free_port() for name in names}
    instances = [Instance(daemon_cfg, topics, work, name, ("--metrics-port", str(ports[name]))) for name in names]
    result = PassResult(mode=mode)
    daemons = Daemons(instances, mode == "standby", say)
    watch = LogWatch([i.log for i in instances])
    feeder = SteadyFeeder(direct, topics.orders, cfg.seed, cfg.rate)
    run = Pass(cfg, mode, topics, rng, daemons, watch, ports, say)
    current: list[FaultRun] = []
    daemons.on_exit = lambda line: current[-1].exits.append(line) if current else None
    watch.start()
    feeder.start()
    try:
        daemons.start()
        for n, kind in enumerate(schedule, start=1):
            run.settle()
            time.sleep(rng.uniform(1.0, max(1.0, cfg.max_gap_s)))  # a random pause between faults, on purpose
            fault = FaultRun(n, kind)
            current.append(fault)
            result.faults.append(fault)
            _inject(run, fault)
            say(f"  [{mode} {n}/{len(schedule)}] {kind}: {fault.what}; {_outcome(fault)}")
        run.settle()
        feeder.finish()
        result.expected, result.bad_fed, result.fed = dict(feeder.expected), feeder.bad, feeder.queued
        active = daemons.active()
        try:
            wait_until(lambda: drained(direct, topics.orders, active.state), DRAIN_TIMEOUT_S,
                       f"{active.name} to count every order", every=1.0)
        except WaitTimedOut as exc:
            raise BrewError(f"{exc}; see {active.log}") from None
        daemons.stop_all()
        for inst in daemons.others(active):
            inst.wait_for(is_standby, "to be a standby", START_TIMEOUT_S)
        for inst in instances:
            if inst.stop() != 0:
                raise BrewError(f"{inst.name} did not stop cleanly on SIGTERM; see {inst.log}")
        result.counted = read_counts(active.state)
        result.dlq_records, result.dlq_unique = count_dlq(direct, topics.dlq)
        result.in_input = committed_records(direct, topics.orders)
        result.restored = restore_check(direct, topics.changelog, work / "restore-check")
        result.open_transactions, result.transaction_check = hanging_transactions(direct, topics, cfg.shuffled)
    finally:
        feeder.halt.set()
        daemons.stop_all()
        watch.stop()
        for inst in instances:
            inst.kill()
        result.exits = list(daemons.exits)
        with contextlib.suppress(Exception):
            cfg.control.heal()
        if not cfg.keep_topics:
            with contextlib.suppress(Exception):
                delete_topics(direct, topics)
    result.report(say)
    say(f"transactions: {result.transaction_check}")
    return result


def _inject(run: Pass, fault: FaultRun) -> None:
    _, tracebacks_before = run.watch.snapshot()
    fault.started = time.monotonic()
    try:
        fault.what = FAULTS[fault.kind](run)
    except BrewError as exc:
        fault.error = str(exc)
        fault.what = f"failed: {exc}"
        with contextlib.suppress(Exception):
            run.control.heal()
    fault.healed = time.monotonic()
    with contextlib.suppress(WaitTimedOut):
        wait_until(lambda: first_commit_after(run.watch.snapshot()[0], fault.healed), RECOVER_TIMEOUT_S,
                   "a committed batch after the fault healed", every=0.1)
    commits, tracebacks = run.watch.snapshot()
    fault.counting = first_commit_after(commits, fault.healed)
    fault.stall_s = stall_seconds(commits, fault.started, fault.counting or time.monotonic())
    fault.tracebacks = len(tracebacks) - len(tracebacks_before)


def _outcome(f: FaultRun) -> str:
    if f.counting is None:
        return f"NO batch within {RECOVER_TIMEOUT_S:.0f}s of the heal (stalled {f.stall_s:.1f}s so far)"
    parts = [f"longest stall {f.stall_s:.1f}s, counting {f.after_heal_s:.1f}s after the heal"]
    if f.exits:
        parts.append(f"{len(f.exits)} daemon exit(s)")
    if f.tracebacks:
        parts.append(f"{f.tracebacks} traceback(s)")
    return ", ".join(parts)


# ---------------------------------------------------------------- the drill


def run_broker_drill(cfg: BrokerDrillConfig, out: TextIO = sys.stdout) -> BrokerDrillResult:
    say = printer(out)
    result = BrokerDrillResult()
    skipped = [k for k in cfg.kinds if not cfg.feasible(k)]
    say(f"drill broker-faults on {cfg.control.description}; daemons bootstrap at {cfg.control.daemon.bootstrap}, "
        f"the feeder and the checks at {cfg.control.direct.bootstrap}; {cfg.rounds} round(s) of "
        f"{len(cfg.kinds) - len(skipped)} fault kinds per pass, seed {cfg.seed}")
    if skipped:
        say(f"skipped (not possible on this cluster): {', '.join(skipped)}")
    for mode in cfg.passes:
        result.passes.append(run_pass(cfg, mode, out))
    for line in table(result):
        say(line)
    say("verdict: " + ("passed: exact, every fault recovered, no daemon exit, no traceback, no open transaction"
                       if result.passed else "FAILED (see above)"))
    return result


def table(result: BrokerDrillResult) -> list[str]:
    """Per pass and fault kind: times injected, longest and median stall, the longest wait
    from the heal to counting again, daemon exits and tracebacks."""
    head = ("pass", "fault kind", "injected", "longest stall", "median stall", "max after heal", "exits",
            "tracebacks")
    rows = [head]
    for p in result.passes:
        for kind in KINDS:
            runs = [f for f in p.faults if f.kind == kind]
            if not runs:
                continue
            stalls = [f.stall_s for f in runs]
            after = [f.after_heal_s for f in runs]
            stuck = any(a is None for a in after)
            rows.append((p.mode, kind, str(len(runs)), f"{max(stalls):.1f}s", f"{statistics.median(stalls):.1f}s",
                         "never" if stuck else f"{max(a or 0.0 for a in after):.1f}s",
                         str(sum(len(f.exits) for f in runs)), str(sum(f.tracebacks for f in runs))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
            for r in rows]
