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
from pathlib import Path

import pytest

from sandbox import nodes
from service.drills.broker_faults import BrokerDrillConfig, run_broker_drill, table
from service.drills.cluster_control import CommandControl, SandboxControl, parse_node_commands
from service.drills.kinds import KINDS
from tests.support.helpers import BREW, ClusterUnderTest
from topics.errors import BrewError
from topics.kafka import REQUEST_TIMEOUT_S


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
