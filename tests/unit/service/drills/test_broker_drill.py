"""The broker drill's pure parts: the stall measure, the schedule of faults, the node
commands a user gives, and the transaction state a coordinator describes."""

from __future__ import annotations

import random
import struct
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandbox import kafka_wire
from service.drills.broker_faults import (
    BrokerDrillConfig,
    BrokerDrillResult,
    FaultRun,
    PassResult,
    first_commit_after,
    stall_seconds,
    table,
)
from service.drills.cluster_control import ClusterControl, parse_node_commands
from service.drills.kinds import KINDS, NETWORK_KINDS
from topics.errors import BrewError
from topics.kafka import KafkaConnection


def test_the_stall_is_the_longest_time_without_a_commit_from_the_fault_to_counting_again() -> None:
    commits = [1.0, 2.0, 10.5, 11.0, 30.0, 31.0]
    # Injected at 3.0, counting again (first commit after the heal) at 30.0.
    assert stall_seconds(commits, 3.0, 30.0) == pytest.approx(19.0)
    assert stall_seconds(commits, 3.0, 10.5) == pytest.approx(7.5)
    assert stall_seconds([], 3.0, 8.0) == pytest.approx(5.0)
    assert first_commit_after(commits, 11.0) == 30.0
    assert first_commit_after(commits, 31.0) is None


@given(st.lists(st.floats(0, 100), max_size=30), st.floats(0, 50), st.floats(0, 50))
def test_the_stall_covers_the_whole_window_and_no_more(commits: list[float], start: float, length: float) -> None:
    end = start + length
    stall = stall_seconds(commits, start, end)
    assert 0 <= stall <= length + 1e-9
    inside = sorted(c for c in commits if start < c < end)
    if not inside:
        assert stall == pytest.approx(length)


@dataclass
class FakeControl(ClusterControl):
    actions: tuple[str, ...] = ("kill", "start")
    proxy: bool = False

    @property
    def network(self) -> bool:
        return self.proxy

    def can(self, action: str) -> bool:
        return action in self.actions


def control(actions: tuple[str, ...] = ("kill", "stop", "start", "pause", "resume"), proxy: bool = True) -> FakeControl:
    conn = KafkaConnection("127.0.0.1:1")
    return FakeControl(conn, conn, "fake", actions, proxy)


def test_every_kind_is_injected_rounds_times_in_a_seeded_order() -> None:
    cfg = BrokerDrillConfig(control(), rounds=3)
    first, again = cfg.schedule(random.Random(5)), cfg.schedule(random.Random(5))
    assert first == again
    assert Counter(first) == {kind: 3 for kind in KINDS}
    # Round by round: every kind once before any kind a second time.
    for r in range(3):
        assert sorted(first[r * len(KINDS):(r + 1) * len(KINDS)]) == sorted(KINDS)
    assert first != cfg.schedule(random.Random(6))


def test_kinds_the_cluster_cannot_do_are_left_out() -> None:
    cfg = BrokerDrillConfig(control(actions=("kill", "start"), proxy=False), rounds=1)
    assert set(cfg.schedule(random.Random(1))) == set(KINDS) - set(NETWORK_KINDS) - {"input-leader-pause",
                                                                                       "rolling-restart"}
    only = BrokerDrillConfig(control(), rounds=2, kinds=("net-reset", "controller-kill"))
    assert Counter(only.schedule(random.Random(1))) == {"net-reset": 2, "controller-kill": 2}


def test_node_commands_are_templates_per_action() -> None:
    commands = parse_node_commands(["kill=ssh {host} pkill -9 -f kafka.Kafka", "# the clean way:",
                                    "", "START = ssh {host} systemctl start kafka-{node}"])
    assert commands == {"kill": "ssh {host} pkill -9 -f kafka.Kafka",
                        "start": "ssh {host} systemctl start kafka-{node}"}
    assert commands["start"].format(node=2, host="k2", port=9092) == "ssh k2 systemctl start kafka-2"


@pytest.mark.parametrize(("line", "fragment"), [
    ("kill", "not ACTION=COMMAND"),
    ("explode=rm {node}", "unknown action 'explode'"),
    ("kill=pkill -9 java", "names no node"),
    ("kill=ssh {host} {oops}", "not a valid template"),
])
def test_bad_node_commands_say_why(line: str, fragment: str) -> None:
    with pytest.raises(BrewError, match=fragment):
        parse_node_commands([line])


def test_an_action_given_twice_is_refused() -> None:
    with pytest.raises(BrewError, match="kill is given twice"):
        parse_node_commands(["kill=a {node}", "kill=b {node}"])


def test_the_table_has_a_row_per_pass_and_kind_with_its_stalls_and_exits() -> None:
    def fault(kind: str, stall: float, counting: float | None = 1.0, exits: int = 0) -> FaultRun:
        return FaultRun(1, kind, started=0.0, healed=0.5, counting=counting, stall_s=stall,
                        exits=["x exited"] * exits)

    alone = PassResult(mode="alone", faults=[fault("controller-kill", 3.0), fault("controller-kill", 9.0),
                                             fault("controller-kill", 4.0)])
    standby = PassResult(mode="standby", faults=[fault("two-brokers-kill", 22.0, exits=1),
                                                 fault("two-brokers-kill", 30.0, counting=None)])
    lines = table(BrokerDrillResult([alone, standby]))
    assert lines[0].split()[:4] == ["pass", "fault", "kind", "injected"]
    assert lines[1].split() == ["alone", "controller-kill", "3", "9.0s", "4.0s", "0.5s", "0", "0"]
    assert lines[2].split() == ["standby", "two-brokers-kill", "2", "30.0s", "26.0s", "never", "1", "0"]
    assert not BrokerDrillResult([standby]).passed


def _response(states: list[tuple[int, str, str, list[tuple[str, list[int]]]]]) -> bytes:
    """A DescribeTransactions v0 answer, framed by hand from Kafka's schema."""
    def compact(s: str) -> bytes:
        return bytes([len(s) + 1]) + s.encode()

    out = struct.pack(">i", 0) + bytes([len(states) + 1])
    for code, tid, state, topics in states:
        out += struct.pack(">h", code) + compact(tid) + compact(state) + struct.pack(">iqqh", 60000, 1, 4000, 7)
        out += bytes([len(topics) + 1])
        for topic, parts in topics:
            out += compact(topic) + bytes([len(parts) + 1]) + b"".join(struct.pack(">i", p) for p in parts) + b"\0"
        out += b"\0"
    return out + b"\0"


def test_a_described_transaction_reads_back(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[Any] = []

    def call(host: str, port: int, api: int, version: int, body: bytes, timeout: float) -> bytes:
        sent.append((api, version, body))
        return _response([(0, "brewstream:c", "Ongoing", [("c", [0, 2]), ("dlq", [1])])])

    monkeypatch.setattr(kafka_wire, "_call", call)
    state = kafka_wire.describe_transaction("h", 1, "brewstream:c")
    assert sent == [(kafka_wire.DESCRIBE_TRANSACTIONS, 0, b"\x02\x0dbrewstream:c\x00")]
    assert state.state == "Ongoing" and state.open
    assert state.producer_id == 4000 and state.producer_epoch == 7
    assert state.partitions == (("c", 0), ("c", 2), ("dlq", 1))

    monkeypatch.setattr(kafka_wire, "_call", lambda *a: _response([(0, "brewstream:c", "CompleteCommit", [])]))
    assert not kafka_wire.describe_transaction("h", 1, "brewstream:c").open
    monkeypatch.setattr(kafka_wire, "_call", lambda *a: _response([(16, "brewstream:c", "", [])]))
    with pytest.raises(kafka_wire.WireError) as raised:
        kafka_wire.describe_transaction("h", 1, "brewstream:c")
    assert raised.value.code == kafka_wire.NOT_COORDINATOR
