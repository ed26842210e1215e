"""Network faults between clients and the sandbox cluster's brokers: start and stop the
fault proxy (``sandbox.fault_proxy``, one process for every node, its files
``fault-proxy.{json,pid,log}`` in the cluster's data dir) and set, per node, added latency,
a blackhole, a reset of every open connection, or heal.

Only clients that bootstrap at the proxies (``ClusterLayout.proxy_bootstrap``) see the
faults; the direct client ports, replication and the quorum never pass the proxy, so a
drill's own feeder and oracle can read and write through any fault.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox import kraft
from sandbox.cluster_layout import ClusterLayout, KafkaCluster
from sandbox.processes import alive, cmdline
from topics.clock import WaitTimedOut, wait_until
from topics.errors import BrewError

START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 10.0
MODULE = "sandbox.fault_proxy"


@dataclass(frozen=True)
class NodeFaults:
    node_id: int
    latency_ms: int
    blackhole: bool
    connections: int  # open through the proxy right now
    reset_total: int  # connections reset since the proxy started

    def describe(self) -> str:
        faults = ([f"latency {self.latency_ms} ms"] if self.latency_ms else []) + (["blackhole"] if self.blackhole
                                                                                    else [])
        return f"node-{self.node_id} {' + '.join(faults) or 'healthy'} ({self.connections} connections)"


@dataclass(frozen=True)
class ProxyStatus:
    pid: int
    api_port: int
    nodes: tuple[NodeFaults, ...]


def start(cluster: KafkaCluster, layout: ClusterLayout) -> str:
    """Start the proxy unless it runs; return once its API answers."""
    pid = _running_pid(cluster)
    if pid is None:
        for port in [layout.proxy_api_port, *(n.proxy_port for n in layout.nodes)]:
            if kraft.port_in_use(port):
                raise BrewError(f"the fault proxy's port {port} is already in use by another process")
        config = cluster.data_dir / "fault-proxy.json"
        config.write_text(json.dumps({"api_port": layout.proxy_api_port, "nodes": [
            {"node_id": n.node_id, "listen": n.proxy_port, "upstream": n.proxied_port} for n in layout.nodes]}))
        with open(_log_file(cluster), "ab") as log:
            child = subprocess.Popen([sys.executable, "-m", MODULE, str(config.resolve())],
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        _pid_file(cluster).write_text(str(child.pid))
        pid = child.pid

    def died() -> str | None:
        return None if alive(pid) else f"the fault proxy exited (log: {kraft.log_tail(_log_file(cluster))})"

    try:
        wait_until(lambda: _get(layout, "/state", 1.0) is not None, START_TIMEOUT_S, "the fault proxy's API",
                   every=0.1, give_up=died)
    except WaitTimedOut as exc:
        raise BrewError(str(exc)) from None
    return f"fault proxy (pid {pid}) at {layout.proxy_bootstrap}, API http://127.0.0.1:{layout.proxy_api_port}"


def stop(cluster: KafkaCluster) -> str | None:
    """Stop the proxy (every connection through it is reset); None when it was not running."""
    pid = _running_pid(cluster)
    _pid_file(cluster).unlink(missing_ok=True)
    if pid is None:
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    try:
        wait_until(lambda: not alive(pid), STOP_TIMEOUT_S, "the fault proxy to stop", every=0.1)
    except WaitTimedOut:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return f"fault proxy stopped (pid {pid})"


def status(cluster: KafkaCluster, layout: ClusterLayout) -> ProxyStatus | None:
    pid = _running_pid(cluster)
    if pid is None:
        return None
    state = _get(layout, "/state", 2.0)
    nodes = tuple(_node(n) for n in state["nodes"]) if state else ()
    return ProxyStatus(pid, layout.proxy_api_port, nodes)


def status_line(st: ProxyStatus) -> str:
    faults = "; ".join(n.describe() for n in st.nodes) or "API not answering"
    return f"fault proxy running (pid {st.pid}, API http://127.0.0.1:{st.api_port}): {faults}"


def latency(cluster: KafkaCluster, node_id: int, ms: int) -> NodeFaults:
    """Add ``ms`` to every request's round trip through node ``node_id``'s proxy (0: none)."""
    return _node(_act(cluster, node_id, "latency", {"ms": ms}))


def blackhole(cluster: KafkaCluster, node_id: int) -> NodeFaults:
    """Keep connections open but forward nothing either way, until healed."""
    return _node(_act(cluster, node_id, "blackhole"))


def reset(cluster: KafkaCluster, node_id: int) -> int:
    """Reset (RST) every connection open through node ``node_id``'s proxy; how many there were."""
    return int(_act(cluster, node_id, "reset")["reset"])


def heal(cluster: KafkaCluster, node_id: int | None = None) -> list[NodeFaults]:
    """No latency and no blackhole on one node, or on every node."""
    layout = cluster.layout()
    ids = [node_id] if node_id is not None else [n.node_id for n in layout.nodes]
    return [_node(_act(cluster, i, "heal")) for i in ids]


def _act(cluster: KafkaCluster, node_id: int, action: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    layout = cluster.layout()
    layout.node(node_id)
    if _running_pid(cluster) is None:
        raise BrewError(f"the fault proxy of {cluster.data_dir} is not running; start it with "
                        "`brewstream sandbox up --brokers 3 --fault-proxy`")
    url = f"http://127.0.0.1:{layout.proxy_api_port}/nodes/{node_id}/{action}"
    req = urllib.request.Request(url, data=json.dumps(body or {}).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10.0) as resp:
            answer: dict[str, Any] = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise BrewError(f"the fault proxy refused {action} on node {node_id}: {exc.read().decode(errors='replace')}"
                        ) from None
    except (OSError, ValueError) as exc:
        raise BrewError(f"the fault proxy does not answer at {url}: {exc}") from None
    return answer


def _get(layout: ClusterLayout, path: str, timeout: float) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{layout.proxy_api_port}{path}", timeout=timeout) as resp:
            answer: dict[str, Any] = json.loads(resp.read())
            return answer
    except (OSError, ValueError):
        return None


def _node(raw: dict[str, Any]) -> NodeFaults:
    return NodeFaults(int(raw["node_id"]), int(raw["latency_ms"]), bool(raw["blackhole"]), int(raw["connections"]),
                      int(raw["reset_total"]))


def _running_pid(cluster: KafkaCluster) -> int | None:
    try:
        pid = int(_pid_file(cluster).read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) and MODULE.encode() in cmdline(pid) else None


def _pid_file(cluster: KafkaCluster) -> Path:
    return cluster.data_dir / "fault-proxy.pid"


def _log_file(cluster: KafkaCluster) -> Path:
    return cluster.data_dir / "fault-proxy.log"
