"""The broker drill, short: every fault kind once on the three-node cluster, an active and
a hot standby counting through all of it, exact at the end.

One pass (with the standby: it covers the daemon alone's faults and the takeover) and
short faults, so that it costs a few minutes: the paused broker stays paused just past
the client timeouts, a killed one down one to three seconds, two brokers ten. Stalls are
printed, never asserted: this machine's load decides them. What is asserted is what the
drill's verdict says: the counts, the DLQ and a fresh restore equal the oracle, every
fault was followed by a committed batch, no daemon exited or printed a traceback, and no
transaction was left open.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message

from restorer.changelog import transactional_id
from restorer.store import StateDir, Store
from sandbox import nodes, roles
from sandbox.kraft import free_port
from service.drills.broker_faults import (
    BrokerDrillConfig,
    LogWatch,
    first_commit_after,
    run_broker_drill,
    stall_seconds,
    table,
)
from service.drills.cluster_control import CommandControl, SandboxControl, parse_node_commands
from service.drills.kinds import KINDS
from service.drink_count.board import board_transactional_id
from service.engine.outage import BACKLOG_ASK_S, STALL_S, WATCH_EVERY_S
from tests.support.daemon import Instance
from tests.support.drink_count import make_orders
from tests.support.helpers import BREW, ClusterUnderTest, Pipeline, counts_json, oracle, order_bytes, read_topic
from topics.admin import create_topics
from topics.catalog import Topics
from topics.clock import utc_iso, wait_until
from topics.errors import BrewError
from topics.kafka import REQUEST_TIMEOUT_S, KafkaConnection, end_offsets, partitions_of


@pytest.mark.spark
@pytest.mark.timeout(1200)
@pytest.mark.usefixtures("jvm_archive_built")
def test_every_broker_fault_once_with_a_standby_is_exact(healthy_kafka_cluster: ClusterUnderTest,
                                                         tmp_path: Path) -> None:
    c = healthy_kafka_cluster
    control = SandboxControl(c.conn, c.proxied, "the test cluster", c.cluster)
    cfg = BrokerDrillConfig(control, rounds=1, seed=7, rate=20, passes=("standby",),
                            pause_s=REQUEST_TIMEOUT_S + 2, down_s=(1.0, 3.0), outage_s=10.0,
                            latency_ms=500, latency_s=5.0, blackhole_s=REQUEST_TIMEOUT_S + 2, resets=2,
                            max_gap_s=1.5, work_dir=tmp_path)
    out = io.StringIO()
    try:
        result = run_broker_drill(cfg, out)
    finally:
        print(out.getvalue())  # the drill's own account, on a failure too
    (run,) = result.passes
    assert sorted(f.kind for f in run.faults) == sorted(KINDS)
    assert run.exact, out.getvalue()[-3000:]
    assert not run.exits, run.exits
    assert not run.open_transactions, run.open_transactions
    for fault in run.faults:
        assert fault.ok, (fault.kind, fault.what, fault.exits, fault.tracebacks, fault.error)
    assert result.passed
    assert "DescribeTransactions" in run.transaction_check
    assert table(result)[0].split()[:4] == ["pass", "fault", "kind", "injected"]


def test_your_own_cluster_is_driven_by_your_commands(healthy_kafka_cluster: ClusterUnderTest, tmp_path: Path) -> None:
    """A cluster the user brings: the drill runs the user's command for each action, with the
    node filled in, and waits for a started node to be a broker again. Here the commands
    are the sandbox's own node control, as a user would script it."""
    c = healthy_kafka_cluster
    calls = tmp_path / "calls"
    where = f"--data-dir {c.cluster.data_dir}"
    commands = parse_node_commands([
        f"kill = echo kill {{node}} {{port}} >> {calls} && {BREW} sandbox node kill {{node}} {where}",
        f"start = echo start {{node}} >> {calls} && {BREW} sandbox node start {{node}} {where}",
    ])
    control = CommandControl.start(c.conn, c.proxied, commands)
    assert control.node_ids() == [1, 2, 3] and not control.network
    assert control.can("kill") and not control.can("pause")
    node = c.layout.nodes[1]
    control.act("kill", node.node_id)
    assert nodes.node_status(c.cluster, c.layout, node.node_id).state == nodes.DOWN
    control.heal()  # starts what it took down
    assert node.node_id in nodes.registered_brokers(c.layout.bootstrap)
    assert calls.read_text().split("\n")[:2] == [f"kill {node.node_id} {node.port}", f"start {node.node_id}"]
    with pytest.raises(BrewError, match="exited 3"):
        CommandControl(c.conn, c.conn, "x", {"kill": "exit 3 # {node}"}, {1: ("h", 1)}).act("kill", 1)


# ---------------------------------------------------------------- a paused transaction coordinator


def _txn_partition(transactional_id: str, partitions: int) -> int:
    """The __transaction_state partition Kafka keeps ``transactional_id`` in: the absolute
    value of Java's String.hashCode (Kafka's Utils.abs: 0 for Integer.MIN_VALUE), modulo
    the partition count."""
    h = 0
    for unit in transactional_id.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if signed == -(1 << 31) else abs(signed)) % partitions


class OrderFeed(threading.Thread):
    """Orders at a steady pace, a plain idempotent producer for each input partition (no
    transaction of the feed's own to stall, and one producer's wait for a paused leader
    holds up no other partition): input keeps arriving on the partitions the paused broker
    does not lead, so it waits for the daemon throughout the pause. The oracle sums what
    was delivered."""

    def __init__(self, conn: KafkaConnection, topic: str, per_second: int) -> None:
        super().__init__(name="test-order-feed", daemon=True)
        self.conn, self.topic, self.per_second = conn, topic, per_second
        self.delivered: list[dict[str, Any]] = []
        self.failed: list[str] = []
        self.halt = threading.Event()

    def run(self) -> None:
        producers = {p: self.conn.producer({"enable.idempotence": True, "acks": "all", "linger.ms": 5})
                     for p in partitions_of(self.conn, self.topic)}
        orders = enumerate(make_orders(100_000, seed=48))

        def report(order: dict[str, Any]) -> Callable[[KafkaError | None, Message], None]:
            def done(err: KafkaError | None, _msg: Message) -> None:
                (self.failed.append(err.str()) if err is not None else self.delivered.append(order))
            return done

        while not self.halt.wait(1 / self.per_second):
            i, order = next(orders)
            partition = i % len(producers)
            key, value = order_bytes(order)
            producers[partition].produce(self.topic, key=key, value=value, partition=partition,
                                         on_delivery=report(order))
            for producer in producers.values():
                producer.poll(0)
        for producer in producers.values():
            producer.flush(120)


class Readyz(threading.Thread):
    """/readyz asked every 100 ms: (sent at, status, body, answered at), monotonic."""

    def __init__(self, port: int) -> None:
        super().__init__(name="test-readyz", daemon=True)
        self.port = port
        self.answers: list[tuple[float, int, str, float]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.1):
            sent = time.monotonic()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=5) as resp:
                    self.answers.append((sent, resp.status, resp.read().decode(), time.monotonic()))
            except urllib.error.HTTPError as exc:
                self.answers.append((sent, exc.code, exc.read().decode(), time.monotonic()))
            except (urllib.error.URLError, OSError):
                continue  # not listening yet


PAUSE_S = 15.0  # past the broker session timeout (9 s) and the board's transaction timeout (10 s)


@pytest.mark.spark
@pytest.mark.timeout(900)
@pytest.mark.usefixtures("jvm_archive_built")
def test_a_paused_coordinator_is_not_ready_meanwhile_and_counting_and_the_board_resume(
        healthy_kafka_cluster: ClusterUnderTest, tmp_path: Path) -> None:
    """The broker coordinating the changelog's and the board's transactional ids, and leading
    input partitions, SIGSTOPped under a counting daemon: /readyz said ready 3 s into the
    stall, on the word of metadata that still named the frozen node, while the query hung
    on it; the board could be silenced for good by the coordinator's epoch bump. Now: 503
    while no batch commits, counting again within seconds of the resume, snapshots after
    it, and the counts exact."""
    c = healthy_kafka_cluster
    # A prefix whose changelog and board transactional ids share a __transaction_state
    # partition: one node coordinates both.
    layout = next(Topics(f"t{os.getpid()}-pause{i}.") for i in itertools.count()
                  if _txn_partition(transactional_id(Topics(f"t{os.getpid()}-pause{i}.").changelog), 3)
                  == _txn_partition(board_transactional_id(Topics(f"t{os.getpid()}-pause{i}.").changelog), 3))
    create_topics(c.conn, 3, 3, layout)
    pipe = Pipeline(c.conn, layout)
    port = free_port()
    feed, probe = OrderFeed(c.conn, layout.orders, 20), Readyz(port)
    daemon = Instance(pipe, tmp_path, "a", "--http-port", str(port))
    watch = LogWatch([daemon.log])
    node = roles.transaction_coordinator(c.conn.bootstrap, transactional_id(layout.changelog))
    assert roles.transaction_coordinator(c.conn.bootstrap, board_transactional_id(layout.changelog)) == node
    led = [p.partition for p in roles.partitions(c.conn, [layout.orders]) if p.leader == node]
    assert 0 < len(led) < 3, f"node {node} leads input partitions {led}: some, not all, for input to keep arriving"
    watch.start()
    feed.start()
    daemon.start()
    probe.start()
    try:
        wait_until(lambda: len(watch.snapshot()[0]) >= 5 and any(s == 200 for _, s, _, _ in probe.answers), 240,
                   "the daemon to count and be ready")
        wait_until(lambda: len(snapshot_docs(c.conn, layout.counts)) >= 2, 60, "a few snapshots")
        paused_at = time.monotonic()
        nodes.pause(c.cluster, node)
        time.sleep(PAUSE_S)  # the pause, on purpose
        resumed_at, resumed_wall = time.monotonic(), time.time()
        nodes.resume(c.cluster, node)
        wait_until(lambda: first_commit_after(watch.snapshot()[0], resumed_at), 120, "a commit after the resume")
        wait_until(lambda: any(d.get("ts", "") > utc_iso(resumed_wall) for d in snapshot_docs(c.conn, layout.counts)),
                   60, "a snapshot committed after the resume")
        settled = time.monotonic()
        wait_until(lambda: any(t > settled and s == 200 for t, s, _, _ in probe.answers), 60, "ready again")
        feed.halt.set()
        feed.join(180)
        wait_until(lambda: drained_store(c.conn, layout.orders, daemon.state), 240, "every order counted", every=1.0)
        assert daemon.stop() == 0, daemon.text()[-3000:]
    finally:
        feed.halt.set()
        probe.halt.set()
        watch.stop()
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.kill()
    commits, _ = watch.snapshot()
    back = first_commit_after(commits, resumed_at)
    assert back is not None
    stall = stall_seconds(commits, paused_at, back)
    after_resume = back - resumed_at
    changes = [(round(t - paused_at, 1), st, b[:50]) for (t, st, b, _), (_, before, _, _) in
               zip(probe.answers, [(0.0, 0, "", 0.0), *probe.answers], strict=False) if st != before]
    print(f"paused {PAUSE_S:.0f}s: longest stall {stall:.1f}s, first commit {after_resume:.1f}s after the resume; "
          f"commits at {[round(x - paused_at, 1) for x in commits if paused_at - 2 < x < back + 2]} s after the "
          f"pause; /readyz {changes}")
    assert after_resume < RESUMED_WITHIN_S, daemon.text()[-3000:]
    # Not ready while no batch committed: a 503 during the stall, and never a 200 past the bound.
    stalled = [(t, s, b) for t, s, b, _ in probe.answers if paused_at < t < back]
    assert any(s == 503 and "no batch committed" in b for _, s, b in stalled), stalled[-20:]
    bound = STALL_S + WATCH_EVERY_S + BACKLOG_ASK_S + 1.0  # the rule (engine.outage), and the probe's own time
    # A probe's answer holds from the moment it was sent to the moment it came back: one sent
    # just before the first commit after the resume may be answered just after it by a daemon
    # busy with that batch. And a commit is seen here only once its batch line is read: the
    # daemon counts it committed (and may say ready) a moment before it logs the line, which
    # this test reads every LogWatch interval. So a ready answer breaks the rule only when it
    # came back before that commit could have been made, asked past the bound after the last
    # commit before it.
    committed_by = back - SEEN_LATE_S
    for t, s, _, answered in probe.answers:
        last = max((x for x in commits if x < t), default=None)
        assert not (s == 200 and last is not None and paused_at < t and answered < committed_by
                    and t - last > bound), \
            (t - last, [(round(x - paused_at, 1), y) for x, y, _ in stalled])
    assert not feed.failed and counts_json(c.conn, daemon.state)["counts"] == oracle(feed.delivered)
    lines = daemon.text()
    assert "Traceback" not in lines and "sends no more snapshots" not in lines


def snapshot_docs(conn: KafkaConnection, topic: str) -> list[dict[str, Any]]:
    return [json.loads(m.value() or b"{}") for m in read_topic(conn, topic, committed_only=True)]


def drained_store(conn: KafkaConnection, topic: str, state: Path) -> bool:
    with Store(StateDir(state).store_path, read_only=True) as store:
        stored = store.next_offsets(topic)
    consumer = conn.consumer({"isolation.level": "read_committed"})
    try:
        ends = end_offsets(consumer, topic, partitions_of(conn, topic))
    finally:
        consumer.close()
    return all(stored.get(p, 0) >= high for p, (_, high) in ends.items())


# How much later than its commit a batch can be seen here: the log watch's interval, and the
# moment between the sink counting the batch committed and its line written (a ready answer
# came back 50 ms before its batch's line was seen in a fresh-clone run).
SEEN_LATE_S = 0.5

# Counting again after the paused node wakes: the cluster's own session and client timeouts
# have run by then (docs/production/kafka-cluster.md, "What each broker fault costs").
RESUMED_WITHIN_S = 10.0
