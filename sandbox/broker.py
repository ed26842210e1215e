"""A real single-node KRaft Apache Kafka broker on 127.0.0.1, run from Maven jars.

The broker runs as a detached JVM; everything about it lives in its data dir:
``server.properties``, ``log4j2.properties``, ``broker.pid``, ``broker.log`` and the
log segments under ``logs/``. Readiness is an admin call that succeeds, never a log line.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import socket
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.jars import broker_classpath
from sandbox.processes import alive, cmdline
from topics.clock import WaitTimedOut, wait_until
from topics.errors import BrewError
from topics.kafka import admin_client

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

# The broker's own chatter goes to broker.log at WARN, with the lines that say it
# started or stopped kept at INFO.
LOG4J2_PROPERTIES = """\
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log_file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = info
"""


@dataclass(frozen=True)
class Sandbox:
    port: int
    data_dir: Path
    # An extra SASL_PLAINTEXT listener with PLAIN users, to exercise secured clients.
    sasl_port: int | None = None
    sasl_users: dict[str, str] = field(default_factory=dict, repr=False)

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


def up(sandbox: Sandbox, ready_timeout: float = READY_TIMEOUT_S) -> str:
    """Start the broker unless it already serves; return a one-line summary."""
    pid = _running_pid(sandbox)
    if pid is not None:
        if serves(sandbox.bootstrap, timeout=5.0):
            return f"sandbox already running (pid {pid}) at {sandbox.bootstrap}"
        _wait_ready(sandbox, pid, ready_timeout)
        return f"sandbox running (pid {pid}) at {sandbox.bootstrap}"
    if _port_in_use(sandbox.port):
        raise BrewError(
            f"port {sandbox.port} is already in use by another process; "
            "stop it or pick another port with --port"
        )
    classpath = broker_classpath()
    sandbox.data_dir.mkdir(parents=True, exist_ok=True)
    props = _write_config(sandbox)
    if not (sandbox.log_dir / "meta.properties").exists():
        _format_storage(sandbox, classpath, props)
    pid = _launch(sandbox, classpath, props)
    _wait_ready(sandbox, pid, ready_timeout)
    return f"sandbox up (pid {pid}) at {sandbox.bootstrap}"


def down(sandbox: Sandbox, timeout: float = STOP_TIMEOUT_S) -> str:
    pid = _running_pid(sandbox)
    if pid is None:
        sandbox.pid_file.unlink(missing_ok=True)
        return "sandbox not running"
    os.kill(pid, signal.SIGTERM)
    with contextlib.suppress(WaitTimedOut):
        wait_until(lambda: not alive(pid), timeout, "the broker to stop")
    if alive(pid):
        # A controlled shutdown that hangs past the deadline is not worth waiting for
        # in a sandbox; the log directory survives a SIGKILL.
        os.kill(pid, signal.SIGKILL)
        _wait_gone(pid, 10.0)
    sandbox.pid_file.unlink(missing_ok=True)
    return f"sandbox stopped (pid {pid})"


def status(sandbox: Sandbox) -> tuple[bool, str]:
    pid = _running_pid(sandbox)
    if pid is None:
        return False, f"sandbox not running (data dir {sandbox.data_dir})"
    if serves(sandbox.bootstrap, timeout=5.0):
        return True, f"sandbox serving (pid {pid}) at {sandbox.bootstrap}"
    return False, f"sandbox process {pid} is up but {sandbox.bootstrap} does not answer yet"


def serves(bootstrap: str, timeout: float) -> bool:
    try:
        admin_client(bootstrap).list_topics(timeout=timeout)
    except Exception:
        return False
    return True


def _write_config(sandbox: Sandbox) -> Path:
    # The controller listener gets a fresh free port on every start: it only has to be
    # stable while the process lives, and a fixed one could collide with a second sandbox.
    props = sandbox.data_dir / "server.properties"
    text = SERVER_PROPERTIES.format(port=sandbox.port, controller_port=free_port(), log_dir=sandbox.log_dir.resolve())
    if sandbox.sasl_port is not None:
        text = _with_sasl(text, sandbox)
    props.write_text(text)
    (sandbox.data_dir / "log4j2.properties").write_text(
        LOG4J2_PROPERTIES.format(log_file=sandbox.log_file.resolve())
    )
    return props


def _with_sasl(text: str, sandbox: Sandbox) -> str:
    listener = f"SASL_PLAINTEXT://127.0.0.1:{sandbox.sasl_port}"
    users = " ".join(f'user_{u}="{pw}"' for u, pw in sandbox.sasl_users.items())
    lines = []
    for line in text.splitlines():
        if line.startswith(("listeners=", "advertised.listeners=")):
            line += "," + listener
        elif line.startswith("listener.security.protocol.map="):
            line += ",SASL_PLAINTEXT:SASL_PLAINTEXT"
        lines.append(line)
    lines += ["sasl.enabled.mechanisms=PLAIN",
              "listener.name.sasl_plaintext.plain.sasl.jaas.config="
              f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"]
    return "\n".join(lines) + "\n"


def _format_storage(sandbox: Sandbox, classpath: str, props: Path) -> None:
    cluster_id = _cluster_id()
    result = subprocess.run(
        ["java", "-cp", classpath, *_log_opts(sandbox), "kafka.tools.StorageTool",
         "format", "-t", cluster_id, "-c", str(props)],
        capture_output=True, text=True, timeout=120,
    )
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()[-1:]
        raise BrewError(f"formatting the sandbox storage failed: {' '.join(detail)}")


def _cluster_id() -> str:
    # Like Kafka's Uuid.randomUuid: an id starting with '-' would read as a flag.
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _launch(sandbox: Sandbox, classpath: str, props: Path) -> int:
    with open(sandbox.log_file, "ab") as log:
        proc = subprocess.Popen(
            ["java", "-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
             *_log_opts(sandbox), "-cp", classpath, "kafka.Kafka", str(props)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives the command that started it
        )
    sandbox.pid_file.write_text(str(proc.pid))
    return proc.pid


def _log_opts(sandbox: Sandbox) -> list[str]:
    return [f"-Dlog4j2.configurationFile={(sandbox.data_dir / 'log4j2.properties').resolve()}"]


def _wait_ready(sandbox: Sandbox, pid: int, timeout: float) -> None:
    def died() -> str | None:
        if alive(pid):
            return None
        sandbox.pid_file.unlink(missing_ok=True)
        return f"the sandbox broker exited during start-up (last log lines: {_log_tail(sandbox)})"

    try:
        wait_until(lambda: serves(sandbox.bootstrap, timeout=2.0), timeout,
                   f"the sandbox broker to answer on {sandbox.bootstrap}", every=0.3, give_up=died)
    except WaitTimedOut as exc:
        raise BrewError(f"{exc}; see {sandbox.log_file}") from None


def _log_tail(sandbox: Sandbox, lines: int = 3) -> str:
    try:
        text = sandbox.log_file.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"


def _running_pid(sandbox: Sandbox) -> int | None:
    try:
        pid = int(sandbox.pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    if not alive(pid) or not _is_broker(pid):
        return None
    return pid


def _is_broker(pid: int) -> bool:
    # A stale pid file may point at a recycled pid that is not our broker.
    return b"kafka.Kafka" in cmdline(pid)


def _wait_gone(pid: int, timeout: float) -> None:
    with contextlib.suppress(WaitTimedOut):
        wait_until(lambda: not alive(pid), timeout, "the broker to be gone", every=0.1)


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def free_port() -> int:
    """A port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
