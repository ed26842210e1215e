"""A local standalone Spark cluster on 127.0.0.1: one master and N workers, run from the
installed pyspark's own ``bin/spark-class``, the way a real cluster's daemons run.

Everything about it lives in its data dir: ``master.pid``/``master.log``,
``worker-<i>.pid``/``worker-<i>.log``, the workers' work dirs (one folder per executor,
with its stdout and stderr) under ``work/`` and their scratch space under ``local/``.
Every daemon runs in a session of its own, so its executors and their Python workers
share its process group and stop with it. Readiness is the master's JSON status page
listing every worker ALIVE, never a log line.

The daemons get no PYSPARK_PYTHON, PYSPARK_DRIVER_PYTHON or PYTHONPATH from the shell
that starts them: which Python an executor runs is the application's choice
(``spark.pyspark.python``), as on a cluster shared by many applications.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.kraft import port_in_use
from sandbox.processes import alive, cmdline
from topics.clock import WaitTimedOut, wait_until
from topics.errors import BrewError

READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
# The daemons themselves are small: they only hand out cores and launch executors.
DAEMON_MEMORY = "256m"
MEMORY_PATTERN = re.compile(r"^[1-9]\d*[mMgG]$")
# Left out of every daemon's environment: see the module docstring.
CLEARED_ENV = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "SPARK_CONF_DIR")


@dataclass(frozen=True)
class SparkCluster:
    data_dir: Path
    port: int = 7077
    ui_port: int = 7080
    workers: int = 2
    cores: int = 1
    memory: str = "1g"  # per worker: what its executors may take in all

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.ui_port}"

    def pid_file(self, name: str) -> Path:
        return self.data_dir / f"{name}.pid"

    def log_file(self, name: str) -> Path:
        return self.data_dir / f"{name}.log"

    @property
    def worker_names(self) -> list[str]:
        return [f"worker-{i}" for i in range(1, self.workers + 1)]


def spark_home() -> Path:
    """The installed pyspark's folder: it holds ``bin/spark-class`` and Spark's jars."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise BrewError("pyspark is not installed in this Python; run `make install` first")
    return Path(spec.origin).parent


def up(cluster: SparkCluster, ready_timeout: float = READY_TIMEOUT_S) -> str:
    """Bring the cluster to what is asked: start whatever part is not running, stop
    workers beyond ``workers``, and wait until exactly that many are ALIVE at the master;
    return a one-line summary with the master URL."""
    if not MEMORY_PATTERN.match(cluster.memory):
        raise BrewError(f"worker memory {cluster.memory!r} is not like 512m or 2g")
    cluster.data_dir.mkdir(parents=True, exist_ok=True)
    started: list[str] = []
    master = running_pid(cluster, "master")
    if master is not None:
        _check_ports(cluster, master)
    else:
        for port, flag in ((cluster.port, "--port"), (cluster.ui_port, "--ui-port")):
            if port_in_use(port):
                raise BrewError(f"port {port} is already in use by another process; stop it or pick another "
                                f"port with {flag}")
        master = _launch(cluster, "master", [MASTER_CLASS, "--host", "127.0.0.1", "--port", str(cluster.port),
                                             "--webui-port", str(cluster.ui_port)])
        started.append("master")
    _wait(cluster, ["master"], lambda: master_state(cluster) is not None, ready_timeout,
          "the master's status page")
    for name in _worker_pid_names(cluster):
        if name not in cluster.worker_names:  # a smaller cluster than last time: stop the extra workers
            pid = running_pid(cluster, name)
            if pid is not None:
                stop_group(pid)
                started.append(f"stopped {name}")
            cluster.pid_file(name).unlink(missing_ok=True)
    for name in cluster.worker_names:
        if running_pid(cluster, name) is None:
            _launch(cluster, name, _worker_args(cluster, name))
            started.append(name)
    want = len(cluster.worker_names)
    _wait(cluster, ["master", *cluster.worker_names], lambda: alive_workers(cluster) == want, ready_timeout,
          f"{want} workers ALIVE at the master")
    verb = "up" if started else "already running"
    return (f"spark cluster {verb} (master pid {master}) at {cluster.url}: {want} worker{'s' * (want != 1)} of "
            f"{cluster.cores} core(s) and {cluster.memory}; web UI {cluster.ui_url}")


def down(cluster: SparkCluster, timeout: float = STOP_TIMEOUT_S) -> str:
    """Stop the workers (and their executors), then the master."""
    stopped = []
    for name in [*_worker_pid_names(cluster), "master"]:
        pid = running_pid(cluster, name)
        if pid is not None:
            stop_group(pid, timeout)
            stopped.append(name)
        cluster.pid_file(name).unlink(missing_ok=True)
    if not stopped:
        return "spark cluster not running"
    return f"spark cluster stopped ({', '.join(stopped)})"


def status(cluster: SparkCluster) -> tuple[bool, str]:
    master = running_pid(cluster, "master")
    if master is None:
        return False, f"spark cluster not running (data dir {cluster.data_dir})"
    state = master_state(cluster)
    if state is None:
        return False, f"spark master process {master} is up but {cluster.ui_url}/json does not answer"
    alive = alive_workers(cluster)
    want = len(cluster.worker_names)
    apps = ", ".join(a.get("name", "?") for a in state.get("activeapps", [])) or "none"
    text = (f"spark cluster serving (master pid {master}) at {cluster.url}: {alive} of {want} workers ALIVE; "
            f"running applications: {apps}; web UI {cluster.ui_url}")
    return alive >= want, text


def master_state(cluster: SparkCluster) -> dict[str, Any] | None:
    """The master's JSON status page (workers, applications), or None when it does not answer."""
    try:
        with urllib.request.urlopen(f"{cluster.ui_url}/json/", timeout=2.0) as resp:
            state = json.loads(resp.read())
    except (OSError, urllib.error.URLError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def alive_workers(cluster: SparkCluster) -> int:
    state = master_state(cluster) or {}
    return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")


def running_pid(cluster: SparkCluster, name: str) -> int | None:
    """The pid of a daemon of this cluster that is running, from its pid file."""
    try:
        pid = int(cluster.pid_file(name).read_text().strip())
    except (OSError, ValueError):
        return None
    if not alive(pid):
        return None
    # A stale pid file may name a recycled pid; an empty command line is a process in the
    # middle of an exec (spark-class execs env, bash, then java), still ours.
    line = cmdline(pid)
    main_class = MASTER_CLASS if name == "master" else WORKER_CLASS
    return pid if not line or main_class.encode() in line else None


def stop_group(pid: int, timeout: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM a daemon (a worker kills its executors on the way out), then SIGKILL
    whatever is left of its process group."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    with contextlib.suppress(WaitTimedOut):
        wait_until(lambda: not alive(pid), timeout, f"process {pid} to stop", every=0.2)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(WaitTimedOut):
        wait_until(lambda: not alive(pid), 10.0, f"process {pid} to be gone", every=0.1)


def _check_ports(cluster: SparkCluster, pid: int) -> None:
    """A master already running from this data dir must be the one asked for."""
    args = cmdline(pid).split(b"\0")
    ports = {flag: args[i + 1].decode() for i, flag in enumerate(args[:-1]) if flag in (b"--port", b"--webui-port")}
    want = {b"--port": str(cluster.port), b"--webui-port": str(cluster.ui_port)}
    if ports and ports != want:
        raise BrewError(f"a spark master from {cluster.data_dir} already runs (pid {pid}) on port "
                        f"{ports.get(b'--port')} with its web UI on {ports.get(b'--webui-port')}; pass those "
                        "ports, or stop it first with `brewstream spark-cluster down`")


def _worker_pid_names(cluster: SparkCluster) -> list[str]:
    # Every worker with a pid file, also those beyond --workers from an earlier `up`.
    found = {p.stem for p in cluster.data_dir.glob("worker-*.pid")}
    return sorted(found | set(cluster.worker_names))


def _worker_args(cluster: SparkCluster, name: str) -> list[str]:
    work = cluster.data_dir / "work" / name
    work.mkdir(parents=True, exist_ok=True)
    # Port 0: the worker's own RPC and UI ports are picked free at start.
    return [WORKER_CLASS, "--host", "127.0.0.1", "--port", "0", "--webui-port", "0", "--cores", str(cluster.cores),
            "--memory", cluster.memory, "--work-dir", str(work.resolve()), cluster.url]


def _launch(cluster: SparkCluster, name: str, args: list[str]) -> int:
    home = spark_home()
    env = {k: v for k, v in os.environ.items() if k not in CLEARED_ENV}
    local = cluster.data_dir / "local"
    local.mkdir(parents=True, exist_ok=True)
    env.update({
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        "SPARK_LOCAL_DIRS": str(local.resolve()),
        # A conf dir of the cluster's own: the daemons do not pick up a spark-defaults.conf
        # meant for applications.
        "SPARK_CONF_DIR": str(_conf_dir(cluster)),
    })
    with open(cluster.log_file(name), "ab") as log:
        proc = subprocess.Popen(
            [str(home / "bin" / "spark-class"), *args], cwd=cluster.data_dir, env=env,
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives the command that started it; its executors join its group
        )
    cluster.pid_file(name).write_text(str(proc.pid))
    return proc.pid


def _conf_dir(cluster: SparkCluster) -> Path:
    conf = cluster.data_dir / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    # The master's REST submission server would take a fixed port (6066) nobody here uses.
    (conf / "spark-defaults.conf").write_text("spark.master.rest.enabled false\n")
    return conf.resolve()


def _wait(cluster: SparkCluster, names: list[str], cond: Callable[[], bool], timeout: float, what: str) -> None:
    def died() -> str | None:
        for name in names:
            if running_pid(cluster, name) is None:
                return f"the spark {name} exited (log: {cluster.log_file(name)}: {_log_tail(cluster.log_file(name))})"
        return None

    try:
        wait_until(cond, timeout, what, every=0.3, give_up=died)
    except WaitTimedOut as exc:
        raise BrewError(f"{exc}; see the logs in {cluster.data_dir}") from None


def _log_tail(path: Path, lines: int = 2) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"
