"""A real single-node KRaft Apache Kafka broker on 127.0.0.1, run from Maven jars.

The broker runs as a detached JVM; everything about it lives in its data dir:
``server.properties``, ``log4j2.properties``, ``broker.pid``, ``broker.log`` and the
log segments under ``logs/``. Readiness is an admin call that succeeds, never a log line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sandbox import kraft
from sandbox.jars import broker_classpath
from sandbox.kraft import free_port, serves
from sandbox.processes import alive
from topics.clock import WaitTimedOut, wait_until
from topics.errors import BrewError

__all__ = ["Sandbox", "Tls", "down", "free_port", "serves", "status", "up"]

READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0

# Settings that make one small node behave: replication factor 1 for every internal
# topic, no rebalance delay, and a log cleaner that wakes up often enough for
# compaction to be seen within a test.
SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller_port}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs={log_dir}
num.partitions=3
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.cleaner.backoff.ms=500
num.network.threads=2
num.io.threads=4
"""

@dataclass(frozen=True)
class Tls:
    """The broker's side of TLS: a PKCS12 key store with its key and certificate."""

    keystore: Path
    password: str = field(repr=False)


@dataclass(frozen=True)
class Sandbox:
    port: int
    data_dir: Path
    # An extra SASL_PLAINTEXT listener with PLAIN users, to exercise secured clients.
    sasl_port: int | None = None
    sasl_users: dict[str, str] = field(default_factory=dict, repr=False)
    # An extra SASL_SSL listener (PLAIN with ``sasl_users``, and SCRAM-SHA-512 for the users
    # given SCRAM credentials through the admin API) that presents ``tls``'s certificate.
    sasl_ssl_port: int | None = None
    tls: Tls | None = None
    # More server.properties lines (an authorizer, say), after brewstream's own.
    extra_properties: tuple[str, ...] = ()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "broker.pid"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "broker.log"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def process(self) -> kraft.KafkaProcess:
        return kraft.KafkaProcess(self.data_dir / "server.properties", self.pid_file, self.log_file)


def up(sandbox: Sandbox, ready_timeout: float = READY_TIMEOUT_S) -> str:
    """Start the broker unless it already serves; return a one-line summary."""
    pid = kraft.running_pid(sandbox.pid_file)
    if pid is not None:
        if serves(sandbox.bootstrap, timeout=5.0):
            return f"sandbox already running (pid {pid}) at {sandbox.bootstrap}"
        _wait_ready(sandbox, pid, ready_timeout)
        return f"sandbox running (pid {pid}) at {sandbox.bootstrap}"
    if kraft.port_in_use(sandbox.port):
        raise BrewError(
            f"port {sandbox.port} is already in use by another process; "
            "stop it or pick another port with --port"
        )
    classpath = broker_classpath()
    sandbox.data_dir.mkdir(parents=True, exist_ok=True)
    _write_config(sandbox)
    if not (sandbox.log_dir / "meta.properties").exists():
        kraft.format_storage(sandbox.process, classpath, kraft.cluster_id())
    pid = kraft.launch(sandbox.process, classpath)
    _wait_ready(sandbox, pid, ready_timeout)
    return f"sandbox up (pid {pid}) at {sandbox.bootstrap}"


def down(sandbox: Sandbox, timeout: float = STOP_TIMEOUT_S) -> str:
    pid = kraft.running_pid(sandbox.pid_file)
    if pid is None:
        sandbox.pid_file.unlink(missing_ok=True)
        return "sandbox not running"
    kraft.stop(pid, timeout)
    sandbox.pid_file.unlink(missing_ok=True)
    return f"sandbox stopped (pid {pid})"


def status(sandbox: Sandbox) -> tuple[bool, str]:
    pid = kraft.running_pid(sandbox.pid_file)
    if pid is None:
        return False, f"sandbox not running (data dir {sandbox.data_dir})"
    if serves(sandbox.bootstrap, timeout=5.0):
        return True, f"sandbox serving (pid {pid}) at {sandbox.bootstrap}"
    return False, f"sandbox process {pid} is up but {sandbox.bootstrap} does not answer yet"


def _write_config(sandbox: Sandbox) -> Path:
    # The controller listener gets a fresh free port on every start: it only has to be
    # stable while the process lives, and a fixed one could collide with a second sandbox.
    props = sandbox.process.props
    text = SERVER_PROPERTIES.format(port=sandbox.port, controller_port=free_port(), log_dir=sandbox.log_dir.resolve())
    if sandbox.sasl_port is not None:
        text = _with_sasl(text, sandbox)
    if sandbox.sasl_ssl_port is not None:
        text = _with_sasl_ssl(text, sandbox)
    props.write_text(text + "".join(f"{line}\n" for line in sandbox.extra_properties))
    sandbox.process.write_log4j()
    return props


def _with_listener(text: str, protocol: str, port: int | None) -> list[str]:
    """The lines of ``text`` with one more listener, named after its protocol."""
    lines = []
    for line in text.splitlines():
        if line.startswith(("listeners=", "advertised.listeners=")):
            line += f",{protocol}://127.0.0.1:{port}"
        elif line.startswith("listener.security.protocol.map="):
            line += f",{protocol}:{protocol}"
        lines.append(line)
    return lines


def _plain_users(sandbox: Sandbox) -> str:
    users = " ".join(f'user_{u}="{pw}"' for u, pw in sandbox.sasl_users.items())
    return f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"


def _with_sasl(text: str, sandbox: Sandbox) -> str:
    lines = _with_listener(text, "SASL_PLAINTEXT", sandbox.sasl_port)
    lines += ["sasl.enabled.mechanisms=PLAIN",
              f"listener.name.sasl_plaintext.plain.sasl.jaas.config={_plain_users(sandbox)}"]
    return "\n".join(lines) + "\n"


def _with_sasl_ssl(text: str, sandbox: Sandbox) -> str:
    if sandbox.tls is None:
        raise BrewError("a SASL_SSL listener needs the broker's key store (tls)")
    name = "listener.name.sasl_ssl."
    lines = _with_listener(text, "SASL_SSL", sandbox.sasl_ssl_port)
    lines += [f"{name}sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512",
              f"{name}plain.sasl.jaas.config={_plain_users(sandbox)}",
              f"{name}scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
              "required;",
              f"{name}ssl.keystore.type=PKCS12",
              f"{name}ssl.keystore.location={sandbox.tls.keystore.resolve()}",
              f"{name}ssl.keystore.password={sandbox.tls.password}",
              f"{name}ssl.key.password={sandbox.tls.password}"]
    return "\n".join(lines) + "\n"


def _wait_ready(sandbox: Sandbox, pid: int, timeout: float) -> None:
    def died() -> str | None:
        if alive(pid):
            return None
        sandbox.pid_file.unlink(missing_ok=True)
        return f"the sandbox broker exited during start-up (last log lines: {kraft.log_tail(sandbox.log_file)})"

    try:
        wait_until(lambda: serves(sandbox.bootstrap, timeout=2.0), timeout,
                   f"the sandbox broker to answer on {sandbox.bootstrap}", every=0.3, give_up=died)
    except WaitTimedOut as exc:
        raise BrewError(f"{exc}; see {sandbox.log_file}") from None
