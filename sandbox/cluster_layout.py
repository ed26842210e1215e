"""The shape of a sandbox Kafka cluster, fixed when it is first created: its cluster id and,
per node, every port it listens on. Kept in ``<data dir>/cluster.json``.

Node N's client port is the base port + N - 1. The other ports (controller, the
broker's listener behind the fault proxy, the proxy's own) are picked free once and
then kept: the quorum's voters name the controller ports, a restarted node must come
back on the same ones, and clients that were given the proxies' addresses keep using
them. Each node's ``server.properties`` is written from here on every start.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from sandbox import kraft
from topics.errors import BrewError

LAYOUT_FILE = "cluster.json"
# Fewer than three nodes cannot hold replication factor 3 with min.insync.replicas=2.
MIN_NODES = 3
MAX_NODES = 9

# A production-shaped cluster: replication factor 3 everywhere, two in-sync replicas for
# every acknowledged write, no unclean elections; the sandbox's small-node settings
# otherwise (no rebalance delay, a cleaner that wakes often enough to see compaction).
# Listeners: PLAINTEXT for direct clients and replication, PROXIED for clients that go
# through the fault proxy (advertised at the proxy's port), CONTROLLER for the quorum.
NODE_PROPERTIES = """\
process.roles=broker,controller
node.id={node_id}
controller.quorum.voters={voters}
listeners=PLAINTEXT://127.0.0.1:{port},PROXIED://127.0.0.1:{proxied_port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{port},PROXIED://127.0.0.1:{proxy_port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,PROXIED:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs={log_dir}
num.partitions=3
default.replication.factor=3
min.insync.replicas=2
unclean.leader.election.enable=false
auto.create.topics.enable=false
offsets.topic.replication.factor=3
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
group.initial.rebalance.delay.ms=0
log.cleaner.backoff.ms=500
num.network.threads=2
num.io.threads=4
"""

# Three JVMs share the machine with the service under test: a smaller heap than the
# single broker's is plenty for a sandbox's traffic.
NODE_HEAP = ("-Xms192m", "-Xmx384m")


@dataclass(frozen=True)
class NodeLayout:
    node_id: int
    port: int  # direct clients and replication
    controller_port: int
    proxied_port: int  # the broker's listener that only the fault proxy connects to
    proxy_port: int  # the fault proxy's listener: what proxied clients are given

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def proxy_bootstrap(self) -> str:
        return f"127.0.0.1:{self.proxy_port}"


@dataclass(frozen=True)
class ClusterLayout:
    cluster_id: str
    nodes: tuple[NodeLayout, ...]
    proxy_api_port: int  # the fault proxy's control API

    @property
    def base_port(self) -> int:
        return self.nodes[0].port

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    @property
    def proxy_bootstrap(self) -> str:
        return ",".join(n.proxy_bootstrap for n in self.nodes)

    def node(self, node_id: int) -> NodeLayout:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise BrewError(f"the cluster has no node {node_id} (nodes 1..{len(self.nodes)})")

    @property
    def voters(self) -> str:
        return ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)


@dataclass(frozen=True)
class KafkaCluster:
    """Where a sandbox cluster lives; its layout is read from (or first written to) there."""

    data_dir: Path

    @property
    def layout_file(self) -> Path:
        return self.data_dir / LAYOUT_FILE

    def node_dir(self, node_id: int) -> Path:
        return self.data_dir / f"node-{node_id}"

    def process(self, node_id: int) -> kraft.KafkaProcess:
        d = self.node_dir(node_id)
        return kraft.KafkaProcess(d / "server.properties", d / "node.pid", d / "node.log", NODE_HEAP)

    def exists(self) -> bool:
        return self.layout_file.exists()

    def layout(self) -> ClusterLayout:
        try:
            raw = json.loads(self.layout_file.read_text())
            nodes = tuple(NodeLayout(**n) for n in raw["nodes"])
            return ClusterLayout(raw["cluster_id"], nodes, int(raw["proxy_api_port"]))
        except FileNotFoundError:
            raise BrewError(f"no sandbox cluster in {self.data_dir}; start one with "
                            "`brewstream sandbox up --brokers 3`") from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise BrewError(f"{self.layout_file} is unreadable ({exc}); `brewstream sandbox down` and remove "
                            f"{self.data_dir} to start afresh") from None

    def create_layout(self, base_port: int, brokers: int) -> ClusterLayout:
        """A new cluster's layout, written once; an existing one must match what is asked."""
        if self.exists():
            layout = self.layout()
            if layout.base_port != base_port or len(layout.nodes) != brokers:
                raise BrewError(
                    f"{self.data_dir} holds a {len(layout.nodes)}-node cluster on ports "
                    f"{layout.base_port}..{layout.nodes[-1].port}; ask for that (--brokers {len(layout.nodes)} "
                    f"--port {layout.base_port}) or pick another --data-dir")
            return layout
        if not MIN_NODES <= brokers <= MAX_NODES:
            raise BrewError(f"a sandbox cluster has {MIN_NODES} to {MAX_NODES} nodes, not {brokers}")
        if base_port + brokers - 1 > 65535:
            raise BrewError(f"--port {base_port} leaves no room for {brokers} client ports")
        for port in range(base_port, base_port + brokers):
            if kraft.port_in_use(port):
                raise BrewError(f"port {port} is already in use by another process; stop it or pick another "
                                "base port with --port")
        extra = iter(kraft.free_ports(3 * brokers + 1, avoid=frozenset(range(base_port, base_port + brokers))))
        nodes = tuple(NodeLayout(i, base_port + i - 1, next(extra), next(extra), next(extra))
                      for i in range(1, brokers + 1))
        layout = ClusterLayout(kraft.cluster_id(), nodes, next(extra))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.layout_file.write_text(json.dumps({"cluster_id": layout.cluster_id,
                                                "nodes": [asdict(n) for n in nodes],
                                                "proxy_api_port": layout.proxy_api_port}, indent=2) + "\n")
        return layout

    def write_node_config(self, layout: ClusterLayout, node_id: int) -> kraft.KafkaProcess:
        node = layout.node(node_id)
        proc = self.process(node_id)
        self.node_dir(node_id).mkdir(parents=True, exist_ok=True)
        proc.props.write_text(NODE_PROPERTIES.format(
            node_id=node_id, voters=layout.voters, port=node.port, proxied_port=node.proxied_port,
            controller_port=node.controller_port, proxy_port=node.proxy_port,
            log_dir=self.log_dir(node_id).resolve()))
        proc.write_log4j()
        return proc

    def log_dir(self, node_id: int) -> Path:
        return self.node_dir(node_id) / "logs"
