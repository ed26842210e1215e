"""One KRaft Kafka JVM as a detached process: its storage formatted, launched, found again
by its pid file, and stopped. The single-broker sandbox and every node of the sandbox
cluster are run through here; what a node's ``server.properties`` says is their business.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import os
import random
import signal
import socket
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from sandbox.processes import alive, cmdline
from topics.clock import WaitTimedOut, wait_until
from topics.errors import BrewError
from topics.kafka import admin_client

# The broker's own chatter goes to its log at WARN, with the lines that say it
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

DEFAULT_HEAP = ("-Xms256m", "-Xmx512m")


@dataclass(frozen=True)
class KafkaProcess:
    """Where one JVM keeps what it needs: its config, log4j settings, pid and log files."""

    props: Path
    pid_file: Path
    log_file: Path
    heap: tuple[str, ...] = DEFAULT_HEAP

    @property
    def log4j_file(self) -> Path:
        return self.props.parent / "log4j2.properties"

    def write_log4j(self) -> None:
        self.log4j_file.write_text(LOG4J2_PROPERTIES.format(log_file=self.log_file.resolve()))

    def log_opts(self) -> list[str]:
        return [f"-Dlog4j2.configurationFile={self.log4j_file.resolve()}"]


def cluster_id() -> str:
    # Like Kafka's Uuid.randomUuid: an id starting with '-' would read as a flag.
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def format_storage(proc: KafkaProcess, classpath: str, cid: str, what: str = "the sandbox storage") -> None:
    result = subprocess.run(
        ["java", "-cp", classpath, *proc.log_opts(), "kafka.tools.StorageTool",
         "format", "-t", cid, "-c", str(proc.props)],
        capture_output=True, text=True, timeout=120,
    )
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()[-1:]
        raise BrewError(f"formatting {what} failed: {' '.join(detail)}")


def launch(proc: KafkaProcess, classpath: str) -> int:
    with open(proc.log_file, "ab") as log:
        child = subprocess.Popen(
            ["java", *proc.heap, "-XX:+UseG1GC", "-Djava.awt.headless=true",
             *proc.log_opts(), "-cp", classpath, "kafka.Kafka", str(proc.props)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives the command that started it
        )
    proc.pid_file.write_text(str(child.pid))
    return child.pid


def running_pid(pid_file: Path) -> int | None:
    """The pid in ``pid_file`` if it is a live Kafka JVM (a stale file may name a recycled pid)."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    if not alive(pid) or b"kafka.Kafka" not in cmdline(pid):
        return None
    return pid


def stop(pid: int, timeout: float) -> bool:
    """SIGTERM (a controlled shutdown), then SIGKILL past ``timeout``; True when it took the
    SIGKILL. A SIGCONT follows the SIGTERM: a paused JVM would hold the signal forever."""
    os.kill(pid, signal.SIGTERM)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)
    with contextlib.suppress(WaitTimedOut):
        wait_until(lambda: not alive(pid), timeout, "the broker to stop")
    if not alive(pid):
        return False
    # A controlled shutdown that hangs past the deadline is not worth waiting for in a
    # sandbox; the log directory survives a SIGKILL.
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    wait_gone(pid, 10.0)
    return True


def wait_gone(pid: int, timeout: float) -> None:
    with contextlib.suppress(WaitTimedOut):
        wait_until(lambda: not alive(pid), timeout, "the broker to be gone", every=0.1)


def log_tail(log_file: Path, lines: int = 3) -> str:
    try:
        text = log_file.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"


def serves(bootstrap: str, timeout: float) -> bool:
    try:
        admin_client(bootstrap).list_topics(timeout=timeout)
    except Exception:
        return False
    return True


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def free_port() -> int:
    """A port for one of our listeners (see ``free_ports``)."""
    return free_ports(1)[0]


def free_ports(n: int, avoid: frozenset[int] = frozenset()) -> list[int]:
    """``n`` distinct ports nothing listens on, none of ``avoid``, for our own listeners.

    They come from outside the system's ephemeral range: a port from inside it can be given
    to any process's outgoing connection between our check and the listener's bind, and the
    listener then dies with "Address already in use" (a node of a test cluster did). Held
    all at once while picked, so none is counted twice, and never one this process handed
    out before. Only where the ephemeral range leaves too few outside it does the system
    pick the rest.
    """
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        for port in itertools.chain(_outside_ephemeral(avoid), itertools.repeat(0, 1000)):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            got = int(sock.getsockname()[1])
            if got in avoid or got in _handed_out or got in ports:
                continue
            ports.append(got)
            if len(ports) == n:
                _handed_out.update(ports)
                return ports
    raise BrewError(f"found only {len(ports)} of {n} free ports on 127.0.0.1")


def free_port_run(n: int) -> int:
    """The first of ``n`` consecutive free ports for our listeners (a cluster's client ports),
    all outside the ephemeral range as in ``free_ports``."""
    lo, hi = _ephemeral_range()
    for base in _outside_ephemeral(frozenset()):
        run = range(base, base + n)
        if run[-1] <= 65535 and all(p not in _handed_out and not lo <= p <= hi and _bindable(p) for p in run):
            _handed_out.update(run)
            return base
    raise BrewError(f"no {n} consecutive free ports on 127.0.0.1 outside the ephemeral range {lo}-{hi}")


# Ports below this are left alone: well-known and registered services live there.
_LISTEN_FLOOR = 10000
# Every port handed out by this process: two listeners asked for one after the other must
# not be given the same one before the first has bound it.
_handed_out: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default
    return lo, hi


def _outside_ephemeral(avoid: frozenset[int]) -> list[int]:
    """Every port from the floor up outside the ephemeral range, not yet handed out, in
    random order: two runs side by side rarely try the same ones."""
    lo, hi = _ephemeral_range()
    pool = [p for p in range(_LISTEN_FLOOR, 65536) if not lo <= p <= hi and p not in avoid and p not in _handed_out]
    random.shuffle(pool)
    return pool


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
