"""One node of the sandbox cluster, for fault drills: start it (and wait until it serves
and is back in the cluster), stop it cleanly, SIGKILL it, pause and resume it.

"Up" means the process is alive and answers a Kafka request on its own client port;
"rejoined" means the cluster's metadata lists it as a broker again, which a KRaft
controller allows only once the node has caught up with the metadata log and is no
longer fenced. Every call returns a one-line account of what it did, with how long it
took, for a drill's log.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass

from sandbox import kraft
from sandbox.cluster_layout import ClusterLayout, KafkaCluster
from sandbox.jars import broker_classpath
from sandbox.kafka_wire import answers
from sandbox.processes import alive, paused
from topics.clock import WaitTimedOut, wait_until
from topics.errors import BrewError
from topics.kafka import admin_client

START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0
PORT_RELEASE_S = 10.0
UP, PAUSED, NOT_ANSWERING, DOWN = "up", "paused", "not answering", "down"


@dataclass(frozen=True)
class NodeStatus:
    node_id: int
    pid: int | None
    state: str  # UP, PAUSED, NOT_ANSWERING or DOWN

    @property
    def name(self) -> str:
        return f"node-{self.node_id}"


def node_status(cluster: KafkaCluster, layout: ClusterLayout, node_id: int) -> NodeStatus:
    pid = kraft.running_pid(cluster.process(node_id).pid_file)
    if pid is None:
        return NodeStatus(node_id, None, DOWN)
    if paused(pid):
        return NodeStatus(node_id, pid, PAUSED)
    state = UP if answers("127.0.0.1", layout.node(node_id).port) else NOT_ANSWERING
    return NodeStatus(node_id, pid, state)


def launch(cluster: KafkaCluster, layout: ClusterLayout, node_id: int, classpath: str | None = None) -> int:
    """Start the node's JVM (formatting its storage the first time); no waiting."""
    node = layout.node(node_id)
    for port, what in ((node.port, "client"), (node.controller_port, "controller"),
                       (node.proxied_port, "proxied listener")):
        # A JVM just killed can still hold its listeners for a moment: its main thread is
        # a zombie before the last of its threads has closed the files they share.
        if not _port_released(port):
            raise BrewError(f"node {node_id}'s {what} port {port} is already in use by another process; stop it "
                            f"(or remove {cluster.data_dir} for a cluster on other ports)")
    classpath = classpath or broker_classpath()
    proc = cluster.write_node_config(layout, node_id)
    if not (cluster.log_dir(node_id) / "meta.properties").exists():
        kraft.format_storage(proc, classpath, layout.cluster_id, f"node {node_id}'s storage")
    return kraft.launch(proc, classpath)


def start(cluster: KafkaCluster, node_id: int, timeout: float = START_TIMEOUT_S) -> str:
    """Start a node that is down and wait until it serves and has rejoined the cluster.

    Within broker.session.timeout.ms (9 s) of its last stop, clean or not, the controller
    refuses the new incarnation's registration (DUPLICATE_BROKER_REGISTRATION) until the old
    session expires: such a start takes about 10 s here, one later about 5 s."""
    layout = cluster.layout()
    began = time.monotonic()
    st = node_status(cluster, layout, node_id)
    if st.state == PAUSED:
        raise BrewError(f"node {node_id} is paused (pid {st.pid}); resume it instead")
    if st.state == UP and is_registered(layout, node_id):
        return f"node {node_id} already up (pid {st.pid})"
    pid = st.pid if st.pid is not None else launch(cluster, layout, node_id)
    wait_rejoined(cluster, layout, node_id, pid, timeout)
    return f"node {node_id} up (pid {pid}) and back in the cluster after {time.monotonic() - began:.1f} s"


def stop(cluster: KafkaCluster, node_id: int, timeout: float = STOP_TIMEOUT_S) -> str:
    """A clean stop: SIGTERM (the broker hands its leaderships over first) and wait for the
    exit; SIGKILL only past ``timeout``."""
    pid = _pid(cluster, node_id)
    if pid is None:
        return f"node {node_id} not running"
    began = time.monotonic()
    killed = kraft.stop(pid, timeout)
    cluster.process(node_id).pid_file.unlink(missing_ok=True)
    _wait_closed(cluster, node_id)
    took = time.monotonic() - began
    if killed:
        return f"node {node_id} did not stop within {timeout:.0f} s of SIGTERM: killed (pid {pid})"
    return f"node {node_id} stopped (pid {pid}) in {took:.1f} s"


def kill(cluster: KafkaCluster, node_id: int) -> str:
    """SIGKILL: no controlled shutdown, its leaderships move only when the controller fences it."""
    pid = _pid(cluster, node_id)
    if pid is None:
        return f"node {node_id} not running"
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    kraft.wait_gone(pid, 10.0)
    cluster.process(node_id).pid_file.unlink(missing_ok=True)
    _wait_closed(cluster, node_id)
    return f"node {node_id} killed (pid {pid})"


def pause(cluster: KafkaCluster, node_id: int) -> str:
    """SIGSTOP, like a long GC pause or a frozen VM: connections stay open, nothing answers."""
    pid = _pid(cluster, node_id)
    if pid is None:
        raise BrewError(f"node {node_id} is not running")
    os.kill(pid, signal.SIGSTOP)
    wait_until(lambda: paused(pid), 5.0, f"node {node_id} to be paused", every=0.02)
    return f"node {node_id} paused (pid {pid})"


def resume(cluster: KafkaCluster, node_id: int, timeout: float = START_TIMEOUT_S) -> str:
    """SIGCONT, then wait until the node serves and is back in the cluster (a pause longer
    than the broker session timeout got it fenced)."""
    layout = cluster.layout()
    pid = _pid(cluster, node_id)
    if pid is None:
        raise BrewError(f"node {node_id} is not running")
    began = time.monotonic()
    resume_signal(pid)
    wait_rejoined(cluster, layout, node_id, pid, timeout)
    return f"node {node_id} resumed (pid {pid}) and back in the cluster after {time.monotonic() - began:.1f} s"


def resume_signal(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


def is_registered(layout: ClusterLayout, node_id: int, timeout: float = 2.0) -> bool:
    """Whether the cluster's metadata lists the node as a live (unfenced) broker."""
    return node_id in registered_brokers(layout.node(node_id).bootstrap, timeout)


def registered_brokers(bootstrap: str, timeout: float = 2.0) -> set[int]:
    """The broker ids the cluster's metadata lists; empty when nothing answers."""
    try:
        meta = admin_client(bootstrap).list_topics(timeout=timeout)
    except Exception:
        return set()
    return set(meta.brokers)


def wait_rejoined(cluster: KafkaCluster, layout: ClusterLayout, node_id: int, pid: int, timeout: float) -> None:
    node = layout.node(node_id)

    def back() -> bool:
        # Asked of the node itself: it lists itself only once it is unfenced, and it
        # answers with what the controller told it, the same metadata every broker serves.
        return answers("127.0.0.1", node.port) and is_registered(layout, node_id)

    def died() -> str | None:
        if alive(pid):
            return None
        cluster.process(node_id).pid_file.unlink(missing_ok=True)
        log = cluster.process(node_id).log_file
        return f"node {node_id} exited (last log lines: {kraft.log_tail(log)})"

    try:
        wait_until(back, timeout, f"node {node_id} to serve on {node.bootstrap} and rejoin the cluster",
                   every=0.2, give_up=died)
    except WaitTimedOut as exc:
        raise BrewError(f"{exc}; see {cluster.process(node_id).log_file}") from None


def _wait_closed(cluster: KafkaCluster, node_id: int) -> None:
    """Until the node's client port refuses connections: a stopped node is one clients
    cannot reach any more (see ``launch`` on listeners outliving the main thread)."""
    _port_released(cluster.layout().node(node_id).port)


def _port_released(port: int) -> bool:
    try:
        wait_until(lambda: not kraft.port_in_use(port), PORT_RELEASE_S, f"port {port} to close", every=0.05)
    except WaitTimedOut:
        return False
    return True


def _pid(cluster: KafkaCluster, node_id: int) -> int | None:
    cluster.layout().node(node_id)  # a node the cluster has, else a clear error
    return kraft.running_pid(cluster.process(node_id).pid_file)
