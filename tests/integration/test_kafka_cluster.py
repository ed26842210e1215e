"""The three-node sandbox cluster, its node control and its fault proxy, on real brokers.

Every test shares the session's ``kafka_cluster`` and leaves it healthy
(``healthy_kafka_cluster``). Figures worth knowing (election after a SIGKILL, a node's
way back into the ISR) are printed; they are never asserted as timings.
"""

from __future__ import annotations

import json
import socket
import struct
import time

import pytest
from confluent_kafka import KafkaException, Producer

from sandbox import cluster, faults, nodes, roles
from sandbox.kafka_wire import answers
from sandbox.processes import alive
from tests.support.helpers import ClusterUnderTest, brew, create_topic, read_topic
from topics.clock import wait_until
from topics.kafka import KafkaConnection, topic_config

TXN_STATE = "__transaction_state"


def test_three_nodes_one_controller_and_topics_with_three_replicas(healthy_kafka_cluster: ClusterUnderTest) -> None:
    c = healthy_kafka_cluster
    st = cluster.status(c.cluster)
    assert [(n.node_id, n.state) for n in st.nodes] == [(1, "up"), (2, "up"), (3, "up")]
    assert st.controller in (1, 2, 3)
    # Checked against what each node wrote down when it last followed or won an election.
    wait_until(lambda: {_persisted_leader(c, n) for n in (1, 2, 3)} == {st.controller}, 10,
               "every node's quorum-state to name the same leader")

    proc = brew(c.conn, "sandbox", "status", "--data-dir", str(c.cluster.data_dir), check=True)
    node_lines = [line for line in proc.stdout.splitlines() if line.strip().startswith("node-")]
    assert [line.split()[:2] for line in node_lines] == [["node-1", "up"], ["node-2", "up"], ["node-3", "up"]]
    assert sum("(active controller)" in line for line in node_lines) == 1
    assert f"active controller node-{st.controller}" in proc.stdout

    created = brew(c.conn, "topics", "create", "--topic-prefix", "rf.", check=True)
    assert "replication factor 3 (the cluster has 3 brokers)" in created.stderr
    orders = "rf.brew.orders.v1"
    parts = roles.partitions(c.conn, [orders])
    assert len(parts) == 3 and all(len(p.replicas) == 3 for p in parts)
    assert topic_config(c.conn, orders)["min.insync.replicas"] == "2"


def test_a_killed_node_leaves_a_cluster_that_commits_transactions_then_rejoins(
        healthy_kafka_cluster: ClusterUnderTest) -> None:
    c = healthy_kafka_cluster
    topic, tid = "kill-txn", "brew-kill-drill"
    create_topic(c.conn, topic, partitions=3, replication_factor=3)
    _commit(c, tid, topic, [b"before-0", b"before-1"])
    coordinator = roles.transaction_coordinator(c.layout.bootstrap, tid)
    state = roles.partitions(c.conn, [TXN_STATE])
    # Kafka's own rule, worked out here apart from the lookup: the coordinator leads the
    # partition abs(Java hashCode of the id) mod the partition count.
    assert coordinator == state[_java_abs(_java_hash(tid)) % len(state)].leader
    assert all(len(p.replicas) == 3 for p in state)
    assert topic_config(c.conn, TXN_STATE)["min.insync.replicas"] == "2"

    # The hardest node to lose for this producer: its transaction coordinator.
    nodes.kill(c.cluster, coordinator)
    assert nodes.node_status(c.cluster, c.layout, coordinator).state == nodes.DOWN
    began = time.monotonic()
    _commit(c, tid, topic, [b"after-0", b"after-1", b"after-2"])
    print(f"\ntransaction committed {time.monotonic() - began:.1f} s after SIGKILL of coordinator node-{coordinator}")
    assert roles.transaction_coordinator(c.layout.bootstrap, tid) != coordinator

    # A partition's new leader serves up to its own high watermark, which can lag the
    # records just committed until its followers fetch again: read until all five show.
    def committed() -> list[bytes] | None:
        values = sorted(m.value() for m in read_topic(c.conn, topic))
        return values if len(values) >= 5 else None

    values = wait_until(committed, 30, f"the five committed records of {topic} to be readable")
    assert values == [b"after-0", b"after-1", b"after-2", b"before-0", b"before-1"]

    assert "back in the cluster" in nodes.start(c.cluster, coordinator)
    took = roles.wait_full_isr(c.conn, [topic, TXN_STATE], timeout=90)
    print(f"node-{coordinator} in every ISR {took:.1f} s after it rejoined")
    assert all(coordinator in p.isr for p in roles.partitions(c.conn, [topic, TXN_STATE]))


def test_stop_hands_leadership_over_and_start_brings_the_node_back(healthy_kafka_cluster: ClusterUnderTest) -> None:
    c = healthy_kafka_cluster
    topic = "stop-start"
    create_topic(c.conn, topic, partitions=3, replication_factor=3)
    roles.wait_full_isr(c.conn, [topic], timeout=30)
    leader = roles.partition_leader(c.conn, topic, 0)
    assert leader is not None
    assert "stopped" in nodes.stop(c.cluster, leader)
    assert nodes.node_status(c.cluster, c.layout, leader).state == nodes.DOWN
    # A controlled shutdown moves its leaderships before the process exits.
    new_leader = roles.partition_leader(c.conn, topic, 0)
    assert new_leader not in (None, leader)
    assert "back in the cluster" in nodes.start(c.cluster, leader)
    assert nodes.node_status(c.cluster, c.layout, leader).state == nodes.UP
    roles.wait_full_isr(c.conn, [topic], timeout=60)


def test_pause_and_resume_through_the_command_line(healthy_kafka_cluster: ClusterUnderTest) -> None:
    c = healthy_kafka_cluster
    where = ["--data-dir", str(c.cluster.data_dir)]
    node = c.layout.node(2)
    assert "paused" in brew(c.conn, "sandbox", "node", "pause", "2", *where, check=True).stdout
    st = nodes.node_status(c.cluster, c.layout, 2)
    assert st.state == nodes.PAUSED and st.pid is not None and alive(st.pid)
    assert not answers("127.0.0.1", node.port, timeout=1.0)
    status = brew(c.conn, "sandbox", "status", *where)
    assert status.returncode == 1
    assert any(line.split()[:2] == ["node-2", "paused"] for line in status.stdout.splitlines())
    resumed = brew(c.conn, "sandbox", "node", "resume", "2", *where, check=True)
    assert "back in the cluster" in resumed.stdout
    assert nodes.node_status(c.cluster, c.layout, 2).state == nodes.UP


def test_killing_the_active_controller_elects_another(healthy_kafka_cluster: ClusterUnderTest) -> None:
    c = healthy_kafka_cluster
    old = roles.active_controller(c.layout.bootstrap)
    assert old is not None
    assert "killed" in brew(c.conn, "sandbox", "node", "kill", str(old), "--data-dir", str(c.cluster.data_dir),
                            check=True).stdout
    began = time.monotonic()
    new = wait_until(lambda: (n := _controller(c)) not in (None, old) and n, 30, "another active controller")
    print(f"\nnode-{new} active controller {time.monotonic() - began:.1f} s after SIGKILL of node-{old}")
    proc = brew(c.conn, "sandbox", "node", "start", str(old), "--data-dir", str(c.cluster.data_dir), check=True)
    assert "back in the cluster" in proc.stdout


def test_fault_proxy_latency_blackhole_reset_and_heal(healthy_kafka_cluster: ClusterUnderTest) -> None:
    c = healthy_kafka_cluster
    node = c.layout.node(1)
    proxied_admin = c.proxied.admin()
    assert {b.port for b in proxied_admin.list_topics(timeout=10).brokers.values()} == \
        {n.proxy_port for n in c.layout.nodes}, "proxied clients are told the proxies' addresses"

    faults.latency(c.cluster, 1, 500)
    assert _round_trip(node.proxy_port) >= 0.5
    assert _round_trip(node.port) < 0.5, "the direct port passes no fault"
    faults.heal(c.cluster, 1)
    assert _round_trip(node.proxy_port) < 0.5

    held = _connect(node.proxy_port)
    faults.blackhole(c.cluster, 1)
    held.sendall(_api_versions_request(7))
    with pytest.raises(TimeoutError):
        held.recv(4)
    with pytest.raises(KafkaException):
        KafkaConnection(node.proxy_bootstrap).admin().list_topics(timeout=3)
    assert answers("127.0.0.1", node.port), "the direct port still serves"
    faults.heal(c.cluster, 1)
    held.settimeout(10)
    assert _read_response(held) == 7, "the request held in the blackhole is answered after the heal"
    KafkaConnection(node.proxy_bootstrap).admin().list_topics(timeout=10)

    create_topic(c.conn, "through-proxy", partitions=3, replication_factor=3)
    producer = Producer(c.proxied.config({"enable.idempotence": True}))
    producer.produce("through-proxy", value=b"one")
    assert producer.flush(30) == 0
    victim = _connect(node.proxy_port)
    assert sum(faults.reset(c.cluster, n.node_id) for n in c.layout.nodes) >= 2
    with pytest.raises(ConnectionResetError):
        victim.recv(4)
    producer.produce("through-proxy", value=b"two")
    assert producer.flush(30) == 0, "a client reconnects after its connections are reset"
    assert sorted(m.value() for m in read_topic(c.conn, "through-proxy")) == [b"one", b"two"]


def _commit(c: ClusterUnderTest, tid: str, topic: str, values: list[bytes]) -> None:
    producer = Producer(c.conn.config({"transactional.id": tid, "transaction.timeout.ms": 30_000}))
    producer.init_transactions(60)
    producer.begin_transaction()
    for v in values:
        producer.produce(topic, value=v)
    producer.commit_transaction(60)


def _java_hash(text: str) -> int:
    h = 0
    for unit in struct.unpack(f">{len(text.encode('utf-16-be')) // 2}H", text.encode("utf-16-be")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _java_abs(n: int) -> int:
    return 0 if n == -(1 << 31) else abs(n)  # Kafka's Utils.abs


def _controller(c: ClusterUnderTest) -> int | None:
    try:
        return roles.active_controller(c.layout.bootstrap)
    except Exception:
        return None


def _persisted_leader(c: ClusterUnderTest, node_id: int) -> int:
    path = c.cluster.log_dir(node_id) / "__cluster_metadata-0" / "quorum-state"
    return int(json.loads(path.read_text())["leaderId"])


# The tests' own Kafka framing, apart from the code under test: ApiVersions v0.
def _api_versions_request(correlation: int) -> bytes:
    body = struct.pack(">hhih", 18, 0, correlation, 4) + b"test"
    return struct.pack(">i", len(body)) + body


def _read_response(sock: socket.socket) -> int:
    size = struct.unpack(">i", _read(sock, 4))[0]
    return int(struct.unpack(">i", _read(sock, size)[:4])[0])


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=2.0)
    sock.sendall(_api_versions_request(1))
    assert _read_response(sock) == 1
    return sock


def _round_trip(port: int) -> float:
    sock = _connect(port)
    with sock:
        began = time.monotonic()
        sock.sendall(_api_versions_request(2))
        assert _read_response(sock) == 2
        return time.monotonic() - began
