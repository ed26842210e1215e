"""``brewstream sandbox``: the local Kafka sandbox, one broker (``sandbox.broker``) or a
replicated cluster (``sandbox.cluster``), with the node and network faults of a drill."""

from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource

from sandbox.cluster_layout import LAYOUT_FILE, MAX_NODES, KafkaCluster
from service.cli.common import CONTEXT, DURATION, F
from topics.errors import BrewError

DEFAULT_PORT = 19092
DEFAULT_DATA_DIR = Path(".sandbox/kafka")


@click.group(context_settings=CONTEXT)
def sandbox() -> None:
    """A local KRaft Kafka on 127.0.0.1 (jars from Maven): one broker, or with --brokers 3 a
    replicated cluster with node and network faults for drills."""


def data_dir_option(fn: F) -> F:
    return click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_DATA_DIR,
                        show_default=True, help="Where the broker (or each node-N of a cluster) keeps its config, "
                                                "logs and pid.")(fn)


def sandbox_options(fn: F) -> F:
    fn = data_dir_option(fn)
    return click.option("--port", type=click.IntRange(1, 65535), default=DEFAULT_PORT, show_default=True,
                        help="Client port on 127.0.0.1; a cluster's node N listens on PORT+N-1 (once created, "
                             "a cluster keeps its ports).")(fn)


def _is_cluster(data_dir: Path) -> bool:
    return (data_dir / LAYOUT_FILE).exists()


def _port_given() -> bool:
    return click.get_current_context().get_parameter_source("port") == ParameterSource.COMMANDLINE


@sandbox.command("up", context_settings=CONTEXT)
@sandbox_options
@click.option("--brokers", type=click.IntRange(1, MAX_NODES), default=None,
              help="1: a single broker; 3 or more: a cluster of combined broker+controller nodes with replication "
                   "factor 3 and min.insync.replicas=2.  [default: 1, or the size of the cluster already in "
                   "--data-dir]")
@click.option("--fault-proxy", is_flag=True,
              help="Also start the fault-injecting proxy in front of every node of a cluster (`sandbox fault`).")
def sandbox_up(port: int, data_dir: Path, brokers: int | None, fault_proxy: bool) -> None:
    """Start the broker (or every node of the cluster that is down) in the background and wait
    until it serves (idempotent)."""
    from sandbox import cluster

    if brokers is None:
        brokers = len(KafkaCluster(data_dir).layout().nodes) if _is_cluster(data_dir) else 1
    if brokers == 1:
        if _is_cluster(data_dir):
            raise BrewError(f"{data_dir} holds a sandbox cluster; start it with --brokers "
                            f"{len(KafkaCluster(data_dir).layout().nodes)}, or pick another --data-dir")
        if fault_proxy:
            raise click.BadParameter("the fault proxy needs a cluster (--brokers 3)", param_hint="'--fault-proxy'")
        from sandbox.broker import Sandbox, up

        click.echo(up(Sandbox(port, data_dir)))
        return
    if (data_dir / "logs" / "meta.properties").exists() or (data_dir / "broker.pid").exists():
        raise BrewError(f"{data_dir} holds a single-broker sandbox; stop it with `brewstream sandbox down` and pick "
                        "another --data-dir for a cluster")
    kc = KafkaCluster(data_dir)
    if kc.exists() and not _port_given():
        port = kc.layout().base_port
    click.echo(cluster.up(kc, port, brokers, fault_proxy=fault_proxy))


@sandbox.command("down", context_settings=CONTEXT)
@sandbox_options
def sandbox_down(port: int, data_dir: Path) -> None:
    """Stop the broker, or every node of the cluster and its fault proxy, cleanly (SIGTERM, then
    SIGKILL past 30 s)."""
    if _is_cluster(data_dir):
        from sandbox import cluster

        click.echo(cluster.down(KafkaCluster(data_dir)))
        return
    from sandbox.broker import Sandbox, down

    click.echo(down(Sandbox(port, data_dir)))


@sandbox.command("status", context_settings=CONTEXT)
@sandbox_options
def sandbox_status(port: int, data_dir: Path) -> int:
    """Say whether the broker serves; for a cluster, each node's state, the active KRaft
    controller and the fault proxy. Exit 1 unless everything serves."""
    if _is_cluster(data_dir):
        from sandbox import cluster

        kc = KafkaCluster(data_dir)
        st = cluster.status(kc)
        click.echo(cluster.status_text(kc, st))
        return 0 if st.serving else 1
    from sandbox.broker import Sandbox, status

    serving, text = status(Sandbox(port, data_dir))
    click.echo(text)
    return 0 if serving else 1


# ---------------------------------------------------------------- node faults

@sandbox.group("node", context_settings=CONTEXT)
def node() -> None:
    """Kill, stop, start, pause or resume one node of the sandbox cluster."""


NODE_ID = click.argument("node_id", metavar="N", type=click.IntRange(1, MAX_NODES))
WAIT_TIMEOUT = click.option("--timeout", "timeout_s", type=DURATION, default="90s", show_default=True,
                            help="How long to wait for the node to serve and rejoin the cluster.")


def _cluster(data_dir: Path) -> KafkaCluster:
    kc = KafkaCluster(data_dir)
    kc.layout()  # a clear error when there is no cluster there
    return kc


@node.command("kill", context_settings=CONTEXT)
@NODE_ID
@data_dir_option
def node_kill(node_id: int, data_dir: Path) -> None:
    """SIGKILL node N: no controlled shutdown; its leaderships move once the controller fences it."""
    from sandbox import nodes

    click.echo(nodes.kill(_cluster(data_dir), node_id))


@node.command("stop", context_settings=CONTEXT)
@NODE_ID
@data_dir_option
@click.option("--timeout", "timeout_s", type=DURATION, default="30s", show_default=True,
              help="How long to wait for the exit after SIGTERM before a SIGKILL.")
def node_stop(node_id: int, data_dir: Path, timeout_s: float) -> None:
    """Stop node N cleanly: SIGTERM (it hands its leaderships over) and wait until it exits."""
    from sandbox import nodes

    click.echo(nodes.stop(_cluster(data_dir), node_id, timeout_s))


@node.command("start", context_settings=CONTEXT)
@NODE_ID
@data_dir_option
@WAIT_TIMEOUT
def node_start(node_id: int, data_dir: Path, timeout_s: float) -> None:
    """Start node N again and wait until it serves and the cluster lists it as a broker."""
    from sandbox import nodes

    click.echo(nodes.start(_cluster(data_dir), node_id, timeout_s))


@node.command("pause", context_settings=CONTEXT)
@NODE_ID
@data_dir_option
def node_pause(node_id: int, data_dir: Path) -> None:
    """SIGSTOP node N, like a long GC pause or a frozen VM."""
    from sandbox import nodes

    click.echo(nodes.pause(_cluster(data_dir), node_id))


@node.command("resume", context_settings=CONTEXT)
@NODE_ID
@data_dir_option
@WAIT_TIMEOUT
def node_resume(node_id: int, data_dir: Path, timeout_s: float) -> None:
    """SIGCONT node N and wait until it serves and the cluster lists it as a broker again."""
    from sandbox import nodes

    click.echo(nodes.resume(_cluster(data_dir), node_id, timeout_s))


@sandbox.command("roles", context_settings=CONTEXT)
@data_dir_option
@click.option("--topic", "topic_names", multiple=True,
              help="Show the leader, replicas and ISR of each partition of this topic (repeatable).")
@click.option("--transactional-id", "transactional_ids", multiple=True,
              help="Show the node coordinating this transactional.id (repeatable).")
@click.option("--wait-full-isr", "wait_isr_s", type=DURATION, default=None,
              help="First wait up to this long until every partition of the --topic topics has its full ISR.  "
                   "[default: no wait]")
def sandbox_roles(data_dir: Path, topic_names: tuple[str, ...], transactional_ids: tuple[str, ...],
                  wait_isr_s: float | None) -> None:
    """Which node is the active KRaft controller, leads each partition, coordinates each
    transactional.id."""
    from sandbox import roles
    from topics.kafka import KafkaConnection

    layout = _cluster(data_dir).layout()
    conn = KafkaConnection(layout.bootstrap)
    if wait_isr_s is not None:
        if not topic_names:
            raise click.BadParameter("needs at least one --topic", param_hint="'--wait-full-isr'")
        took = roles.wait_full_isr(conn, topic_names, wait_isr_s)
        click.echo(f"full ISR on every partition of {', '.join(topic_names)} after {took:.1f} s")
    controller = roles.active_controller(layout.bootstrap)
    click.echo(f"active controller: {f'node-{controller}' if controller is not None else 'none (election)'}")
    for p in roles.partitions(conn, topic_names):
        leader = f"node-{p.leader}" if p.leader is not None else "none"
        click.echo(f"{p.topic}-{p.partition}: leader {leader}  replicas {list(p.replicas)}  isr {list(p.isr)}")
    for tid in transactional_ids:
        click.echo(f"transactional.id {tid}: coordinator node-{roles.transaction_coordinator(layout.bootstrap, tid)}")


# ---------------------------------------------------------------- network faults

@sandbox.group("fault", context_settings=CONTEXT)
def fault() -> None:
    """Network faults between proxied clients and one node (needs `sandbox up --fault-proxy`):
    clients that bootstrap at the proxied addresses (`sandbox status`) see them; direct
    clients, replication and the quorum do not."""


@fault.command("latency", context_settings=CONTEXT)
@NODE_ID
@click.argument("delay_s", metavar="DELAY", type=DURATION)
@data_dir_option
def fault_latency(node_id: int, delay_s: float, data_dir: Path) -> None:
    """Add DELAY (like 200ms) to every request's round trip to node N; 0 removes it."""
    from sandbox import faults

    click.echo(faults.latency(_cluster(data_dir), node_id, round(delay_s * 1000)).describe())


@fault.command("blackhole", context_settings=CONTEXT)
@NODE_ID
@data_dir_option
def fault_blackhole(node_id: int, data_dir: Path) -> None:
    """Keep connections to node N open but forward nothing, until healed."""
    from sandbox import faults

    click.echo(faults.blackhole(_cluster(data_dir), node_id).describe())


@fault.command("reset", context_settings=CONTEXT)
@NODE_ID
@data_dir_option
def fault_reset(node_id: int, data_dir: Path) -> None:
    """Reset (TCP RST) every connection open to node N right now."""
    from sandbox import faults

    click.echo(f"node-{node_id}: {faults.reset(_cluster(data_dir), node_id)} connections reset")


@fault.command("heal", context_settings=CONTEXT)
@click.argument("node_id", metavar="[N]", type=click.IntRange(1, MAX_NODES), required=False)
@data_dir_option
def fault_heal(node_id: int | None, data_dir: Path) -> None:
    """Remove latency and blackhole from node N, or from every node."""
    from sandbox import faults

    for state in faults.heal(_cluster(data_dir), node_id):
        click.echo(state.describe())
