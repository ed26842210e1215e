"""How a broker drill reaches the brokers it faults: the sandbox cluster (``sandbox.nodes``
for node control, its fault proxy for the network), or a cluster a user brings, driven by
one shell command per action.

A user's commands are templates: ``{node}`` is replaced by the node id, ``{host}`` and
``{port}`` by the broker's address as the cluster's metadata named it when the drill
started (a dead broker is no longer in the metadata). ``start`` and ``resume`` return
once the command has exited *and* the cluster lists the node as a broker again.

Who leads what (a partition, the transaction coordinator, the KRaft controller) is asked
of the cluster itself (``sandbox.roles``), whatever drives the nodes.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from sandbox import cluster as sandbox_cluster
from sandbox import faults, nodes
from sandbox.cluster_layout import KafkaCluster
from topics.clock import WaitTimedOut, wait_until
from topics.errors import BrewError
from topics.kafka import KafkaConnection

ACTIONS = ("kill", "stop", "start", "pause", "resume")
COMMAND_TIMEOUT_S = 120.0
REJOIN_TIMEOUT_S = 120.0
PLACEHOLDERS = ("{node}", "{host}", "{port}")


def parse_node_commands(lines: Iterable[str], where: str = "--node-command") -> dict[str, str]:
    """``ACTION=TEMPLATE`` lines (blank lines and ``#`` comments skipped) as {action: template}
    (pure). Each action once, one of ``ACTIONS``, and each template names the node."""
    commands: dict[str, str] = {}
    for n, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        action, sep, template = line.partition("=")
        action, template = action.strip().lower(), template.strip()
        at = f"{where} (line {n})" if where != "--node-command" else where
        if not sep or not template:
            raise BrewError(f"{at}: {line[:80]!r} is not ACTION=COMMAND (like kill=ssh {{host}} pkill -9 java)")
        if action not in ACTIONS:
            raise BrewError(f"{at}: unknown action {action!r}; the actions are {', '.join(ACTIONS)}")
        if action in commands:
            raise BrewError(f"{at}: {action} is given twice")
        if not any(p in template for p in PLACEHOLDERS):
            raise BrewError(f"{at}: the {action} command names no node: use {{node}}, {{host}} or {{port}}")
        try:
            template.format(node=1, host="h", port=1)
        except (KeyError, IndexError, ValueError) as exc:
            raise BrewError(f"{at}: the {action} command is not a valid template ({exc}); only {{node}}, "
                            "{host} and {port} are replaced (write {{ and }} for braces)") from None
        commands[action] = template
    return commands


@dataclass
class ClusterControl:
    """What a drill may do to the cluster: act on a node, fault the network, heal it all."""

    direct: KafkaConnection  # the drill's own feeder, oracle and role lookups: never faulted
    daemon: KafkaConnection  # what the daemons under test are given
    description: str

    @property
    def network(self) -> bool:
        """Whether network faults between the daemons and a broker are possible."""
        return False

    def node_ids(self) -> list[int]:
        raise NotImplementedError

    def can(self, action: str) -> bool:
        raise NotImplementedError

    def act(self, action: str, node_id: int) -> str:
        """Do ``action`` to the node; one line saying what was done."""
        raise NotImplementedError

    def act_all(self, action: str, node_ids: list[int]) -> list[str]:
        """The same action on several nodes at once."""
        with ThreadPoolExecutor(max_workers=max(1, len(node_ids))) as pool:
            return list(pool.map(lambda n: self.act(action, n), node_ids))

    def latency(self, node_id: int, ms: int) -> None:
        raise BrewError("network faults need the sandbox cluster's fault proxy")

    def blackhole(self, node_id: int) -> None:
        raise BrewError("network faults need the sandbox cluster's fault proxy")

    def reset(self, node_id: int) -> int:
        raise BrewError("network faults need the sandbox cluster's fault proxy")

    def heal(self) -> None:
        """Every node up and serving, no network fault: whatever a drill interrupted."""
        raise NotImplementedError


@dataclass
class SandboxControl(ClusterControl):
    """The sandbox cluster in ``cluster.data_dir``; the daemons go through its fault proxy."""

    cluster: KafkaCluster = field(default_factory=lambda: KafkaCluster(Path(".sandbox/kafka")))

    @classmethod
    def start(cls, cluster: KafkaCluster, base_port: int, brokers: int = 3) -> SandboxControl:
        """Bring the sandbox cluster up with its fault proxy (idempotent)."""
        if cluster.exists():
            layout = cluster.layout()
            base_port, brokers = layout.base_port, len(layout.nodes)
        line = sandbox_cluster.up(cluster, base_port, brokers, fault_proxy=True)
        layout = cluster.layout()
        return cls(KafkaConnection(layout.bootstrap), KafkaConnection(layout.proxy_bootstrap), line, cluster)

    @property
    def network(self) -> bool:
        return True

    def node_ids(self) -> list[int]:
        return [n.node_id for n in self.cluster.layout().nodes]

    def can(self, action: str) -> bool:
        return action in ACTIONS

    def act(self, action: str, node_id: int) -> str:
        fn = {"kill": nodes.kill, "stop": nodes.stop, "start": nodes.start, "pause": nodes.pause,
              "resume": nodes.resume}[action]
        return str(fn(self.cluster, node_id))

    def latency(self, node_id: int, ms: int) -> None:
        faults.latency(self.cluster, node_id, ms)

    def blackhole(self, node_id: int) -> None:
        faults.blackhole(self.cluster, node_id)

    def reset(self, node_id: int) -> int:
        return faults.reset(self.cluster, node_id)

    def heal(self) -> None:
        layout = self.cluster.layout()
        sandbox_cluster.up(self.cluster, layout.base_port, len(layout.nodes), fault_proxy=True)
        faults.heal(self.cluster)


@dataclass
class CommandControl(ClusterControl):
    """A cluster the user brings: each action is the user's shell command for one node."""

    commands: dict[str, str] = field(default_factory=dict)
    brokers: dict[int, tuple[str, int]] = field(default_factory=dict)  # node id -> (host, port)
    _down: dict[int, str] = field(default_factory=dict)  # node id -> how it was taken down

    @classmethod
    def start(cls, direct: KafkaConnection, daemon: KafkaConnection, commands: dict[str, str]) -> CommandControl:
        for needed in ("kill", "start"):
            if needed not in commands:
                raise BrewError(f"a drill on your own cluster needs at least the kill and start commands "
                                f"(--node-command {needed}=...)")
        try:
            meta = direct.admin().list_topics(timeout=10)
        except Exception as exc:
            raise BrewError(f"cannot reach Kafka at {direct.bootstrap}: {exc}") from None
        brokers = {b.id: (str(b.host), int(b.port)) for b in meta.brokers.values()}
        if len(brokers) < 3:
            raise BrewError(f"the cluster at {direct.bootstrap} lists {len(brokers)} brokers; a broker drill needs "
                            "three or more (replication factor 3, min.insync.replicas=2)")
        where = ", ".join(f"node {i} at {h}:{p}" for i, (h, p) in sorted(brokers.items()))
        return cls(direct, daemon, f"your cluster at {direct.bootstrap} ({where})", commands, brokers)

    def node_ids(self) -> list[int]:
        return sorted(self.brokers)

    def can(self, action: str) -> bool:
        return action in self.commands

    def command(self, action: str, node_id: int) -> str:
        host, port = self.brokers.get(node_id, ("", 0))
        return self.commands[action].format(node=node_id, host=host, port=port)

    def act(self, action: str, node_id: int) -> str:
        if action not in self.commands:
            raise BrewError(f"no {action} command was given (--node-command {action}=...)")
        began = time.monotonic()
        line = self.command(action, node_id)
        try:
            proc = subprocess.run(line, shell=True, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise BrewError(f"{action} of node {node_id} did not finish within {COMMAND_TIMEOUT_S:.0f}s: "
                            f"{shlex.quote(line)}") from None
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
            raise BrewError(f"{action} of node {node_id} exited {proc.returncode}: {shlex.quote(line)} "
                            f"({tail[0][:200]})")
        if action in ("kill", "stop", "pause"):
            self._down[node_id] = action
        else:
            self._wait_rejoined(node_id)
            self._down.pop(node_id, None)
        return f"node {node_id}: {action} done in {time.monotonic() - began:.1f} s"

    def _wait_rejoined(self, node_id: int) -> None:
        try:
            wait_until(lambda: node_id in nodes.registered_brokers(self.direct.bootstrap), REJOIN_TIMEOUT_S,
                       f"node {node_id} to be listed as a broker again", every=0.5)
        except WaitTimedOut as exc:
            raise BrewError(str(exc)) from None

    def heal(self) -> None:
        for node_id, how in list(self._down.items()):
            self.act("resume" if how == "pause" else "start", node_id)
