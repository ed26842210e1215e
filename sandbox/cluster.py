"""A replicated KRaft Kafka cluster on 127.0.0.1 from the same Maven jars as the single
sandbox broker: three (or more) combined broker+controller nodes in one quorum, each a
detached JVM with its own folder ``<data dir>/node-N`` (config, log4j settings, pid, log,
log segments), laid out once in ``<data dir>/cluster.json`` (``sandbox.cluster_layout``).

``up`` starts only the nodes that are down (and resumes paused ones) and returns once an
admin call succeeds and sees every broker, and the quorum has a leader; never on a log
line. ``down`` SIGTERMs every node at once and SIGKILLs what is left past a deadline.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sandbox import faults, kraft, nodes
from sandbox.cluster_layout import ClusterLayout, KafkaCluster
from sandbox.jars import broker_classpath
from sandbox.kafka_wire import WireError
from sandbox.processes import alive
from sandbox.roles import active_controller
from topics.clock import WaitTimedOut, wait_until
from topics.errors import BrewError

READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ClusterStatus:
    nodes: tuple[nodes.NodeStatus, ...]
    controller: int | None  # the active KRaft controller's node id; None when nobody can say
    proxy: faults.ProxyStatus | None

    @property
    def serving(self) -> bool:
        return all(n.state == nodes.UP for n in self.nodes) and self.controller is not None


def up(cluster: KafkaCluster, base_port: int, brokers: int, fault_proxy: bool = False,
       ready_timeout: float = READY_TIMEOUT_S) -> str:
    """Bring every node up (idempotent) and wait until the cluster serves; with
    ``fault_proxy``, start the fault-injecting proxy in front of every node too."""
    layout = cluster.create_layout(base_port, brokers)
    began = time.monotonic()
    classpath = broker_classpath()
    acted: list[str] = []
    pids: dict[int, int] = {}
    for node in layout.nodes:
        st = nodes.node_status(cluster, layout, node.node_id)
        if st.state == nodes.PAUSED and st.pid is not None:
            nodes.resume_signal(st.pid)
            acted.append(f"resumed node-{node.node_id}")
        if st.pid is None:
            pids[node.node_id] = nodes.launch(cluster, layout, node.node_id, classpath)
            acted.append(f"started node-{node.node_id}")
        else:
            pids[node.node_id] = st.pid
    _wait_serving(cluster, layout, pids, ready_timeout)
    took = time.monotonic() - began
    proxy_note = ""
    if fault_proxy:
        proxy_note = "; " + faults.start(cluster, layout)
    controller = _controller_or_none(layout)
    what = f"{', '.join(acted)} in {took:.1f} s" if acted else "already running"
    return (f"sandbox cluster up ({what}): {len(layout.nodes)} nodes at {layout.bootstrap}; active controller "
            f"{_name(controller)}{proxy_note}")


def down(cluster: KafkaCluster, timeout: float = STOP_TIMEOUT_S) -> str:
    """Stop every node: SIGTERM to all at once, SIGKILL to any still there past ``timeout``;
    then the fault proxy."""
    layout = cluster.layout()
    running = {n.node_id: pid for n in layout.nodes
               if (pid := kraft.running_pid(cluster.process(n.node_id).pid_file)) is not None}
    # All at once: stopped one by one, the last nodes would wait out their controlled
    # shutdown against a quorum that is already gone.
    with ThreadPoolExecutor(max_workers=max(len(running), 1)) as pool:
        killed = dict(zip(running, pool.map(lambda pid: kraft.stop(pid, timeout), running.values()), strict=True))
    for n in layout.nodes:
        cluster.process(n.node_id).pid_file.unlink(missing_ok=True)
    proxy = faults.stop(cluster)
    if not running:
        return "sandbox cluster not running" + (f"; {proxy}" if proxy else "")
    parts = [f"node-{i} (pid {pid}{', killed after the deadline' if killed[i] else ''})" for i, pid in running.items()]
    return "sandbox cluster stopped: " + ", ".join(parts) + (f"; {proxy}" if proxy else "")


def status(cluster: KafkaCluster) -> ClusterStatus:
    layout = cluster.layout()
    states = tuple(nodes.node_status(cluster, layout, n.node_id) for n in layout.nodes)
    controller = _controller_or_none(layout) if any(s.state == nodes.UP for s in states) else None
    return ClusterStatus(states, controller, faults.status(cluster, layout))


def status_text(cluster: KafkaCluster, st: ClusterStatus) -> str:
    layout = cluster.layout()
    up_count = sum(s.state == nodes.UP for s in st.nodes)
    controller = _name(st.controller) if up_count else "none (no node is up)"
    lines = [f"sandbox cluster in {cluster.data_dir}: {up_count} of {len(st.nodes)} nodes up; "
             f"active controller {controller}"]
    for s in st.nodes:
        node = layout.node(s.node_id)
        pid = f"pid {s.pid}" if s.pid is not None else "-"
        mark = "  (active controller)" if s.node_id == st.controller else ""
        lines.append(f"  {s.name}  {s.state:13}  {pid:10}  client {node.bootstrap}  "
                     f"proxied {node.proxy_bootstrap}  controller port {node.controller_port}{mark}")
    lines.append(f"  bootstrap {layout.bootstrap}")
    if st.proxy is None:
        lines.append("  fault proxy not running (start it with `sandbox up --fault-proxy`)")
    else:
        lines.append(f"  {faults.status_line(st.proxy)}; proxied bootstrap {layout.proxy_bootstrap}")
    return "\n".join(lines)


def _wait_serving(cluster: KafkaCluster, layout: ClusterLayout, pids: dict[int, int], timeout: float) -> None:
    want = {n.node_id for n in layout.nodes}

    def serving() -> bool:
        if not all(nodes.node_status(cluster, layout, i).state == nodes.UP for i in want):
            return False
        # Every node must list every other: a node that lists only itself may not have
        # caught up with the brokers' registrations yet.
        return all(nodes.registered_brokers(layout.node(i).bootstrap) >= want for i in want) and \
            _controller_or_none(layout) is not None

    def died() -> str | None:
        # Whether the process is gone, not what its command line says: while the java
        # launcher execs the JVM, /proc shows no command line for a moment (a loaded machine
        # made that moment long enough to be taken for an exit).
        for node_id, pid in pids.items():
            if not alive(pid):
                log = cluster.process(node_id).log_file
                return f"node {node_id} exited during start-up (last log lines: {kraft.log_tail(log)})"
        return None

    try:
        wait_until(serving, timeout, f"all {len(want)} nodes to serve at {layout.bootstrap}", every=0.3,
                   give_up=died)
    except WaitTimedOut as exc:
        raise BrewError(f"{exc}; see the node logs under {cluster.data_dir}") from None


def _controller_or_none(layout: ClusterLayout) -> int | None:
    try:
        return active_controller(layout.bootstrap)
    except WireError:
        return None


def _name(node_id: int | None) -> str:
    return f"node-{node_id}" if node_id is not None else "unknown (no quorum leader)"
