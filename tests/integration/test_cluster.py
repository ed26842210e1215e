"""Both pipelines on a real standalone Spark cluster: a master and two one-core workers
started from pyspark's own ``spark-class`` (``sandbox.spark_cluster``), whose executors
run a Python environment that has what the batch code imports and nothing of brewstream.
The driver ships its own code; a worker SIGKILLed in the middle of a batch costs a task
retry, never a count.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from sandbox.broker import free_port
from sandbox.spark_cluster import SparkCluster, down, master_state, running_pid, status, up
from service.spark.session import METASPACE_OPTION, PARALLEL_GC_OPTIONS
from tests.support.corpus import BAD_ORDERS
from tests.support.executor_env import executor_python
from tests.support.helpers import Pipeline, counts_json, oracle, order_bytes, produce, read_topic
from topics.clock import utc_iso, wait_until
from topics.event_time import encode_event_time

pytestmark = pytest.mark.spark

RUN_TIMEOUT_S = 420
DRINKS = ["latte", "mocha", "tea", "flat white", "cortado", "caf\u00e9 cr\u00e8me"]


@dataclass(frozen=True)
class Cluster:
    spec: SparkCluster
    python: Path  # a wrapper around the executor environment's interpreter that logs each start
    python_log: Path

    @property
    def url(self) -> str:
        return self.spec.url

    def run_args(self) -> list[str]:
        """What every brewstream run on this cluster gets: the executors' Python and a
        small executor, so both fit in a worker of 1g beside everything else."""
        return ["--master", self.url, "--conf", f"spark.pyspark.python={self.python}",
                "--conf", "spark.executor.memory=512m"]

    def python_starts(self) -> list[str]:
        return self.python_log.read_text().splitlines() if self.python_log.exists() else []

    def cli_args(self) -> list[str]:
        s = self.spec
        return ["--port", str(s.port), "--ui-port", str(s.ui_port), "--workers", str(s.workers),
                "--cores", str(s.cores), "--memory", s.memory, "--data-dir", str(s.data_dir)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One cluster for the whole module, stopped at the end whatever happened."""
    base = tmp_path_factory.mktemp("spark-cluster")
    real = executor_python()  # built once, cached under .cache/
    log = base / "executor-python.log"
    wrapper = base / "executor-python"
    wrapper.write_text(f'#!/bin/sh\necho "$$ $*" >> {log}\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    spec = SparkCluster(base / "spark", free_port(), free_port(), workers=2, cores=1, memory="1g")
    try:
        up(spec)
        yield Cluster(spec, wrapper, log)
    finally:
        down(spec)
    assert all(running_pid(spec, name) is None for name in ["master", *spec.worker_names])


@pytest.fixture(autouse=True)
def _no_inherited_python(monkeypatch: pytest.MonkeyPatch) -> None:
    # The executors' Python must come from --conf here, not from this shell.
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)


def make_orders(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"order_id": f"o-{seed}-{i}", "shop_id": f"shop-{rng.randint(1, 80):02d}",
             "items": [{"drink": rng.choice(DRINKS), "quantity": rng.randint(1, 4)}
                       for _ in range(rng.randint(1, 3))]} for i in range(n)]


def with_bad_orders(good: list[dict[str, Any]], seed: int) -> tuple[list[tuple[bytes | None, bytes | None]],
                                                                     list[int]]:
    """The good orders with every kind of bad one mixed in; the positions of the bad ones."""
    records: list[tuple[bytes | None, bytes | None]] = [order_bytes(o) for o in good]
    at = sorted(random.Random(seed).sample(range(len(records) + len(BAD_ORDERS)), len(BAD_ORDERS)))
    for pos, (name, raw, _) in zip(at, BAD_ORDERS, strict=True):
        records.insert(pos, (name.encode(), raw))
    return records, at


def assert_dlq_holds_each_once(pipe: Pipeline, where: list[tuple[int, int]], bad_at: list[int],
                               values: list[bytes | None]) -> None:
    by_source: dict[tuple[int, int], bytes | None] = {}
    dlq = read_topic(pipe.conn, pipe.topics.dlq)
    for msg in dlq:
        h = {k: v.decode() for k, v in msg.headers()}
        by_source[(int(h["source-partition"]), int(h["source-offset"]))] = msg.value()
    assert len(dlq) == len(by_source) == len(bad_at), "a bad record is missing from the DLQ or is there twice"
    for pos, value in zip(bad_at, values, strict=True):
        assert by_source[where[pos]] == value


def test_drink_count_on_a_cluster_whose_workers_lack_brewstream(
        pipe: Pipeline, cluster: Cluster, tmp_path: Path) -> None:
    good = make_orders(4000, seed=11)
    records, bad_at = with_bad_orders(good, seed=12)
    where = produce(pipe.conn, pipe.topics.orders, records)
    starts = len(cluster.python_starts())

    # More tasks than the topic's 3 partitions, several batches.
    proc = pipe.brew("run", *cluster.run_args(), "--state-dir", str(tmp_path / "state"),
                     "--checkpoint-dir", str(tmp_path / "ckpt"), "--available-now",
                     "--max-offsets-per-trigger", "1500", "--min-partitions", "5", timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]

    got = counts_json(pipe.conn, tmp_path / "state")
    assert got["counts"] == oracle(good)
    assert_dlq_holds_each_once(pipe, where, bad_at, [raw for _, raw, _ in BAD_ORDERS])
    # The executors ran the other environment's Python, which cannot import brewstream:
    # everything they ran came from the driver.
    assert any("pyspark.daemon" in line for line in cluster.python_starts()[starts:]), cluster.python_starts()


MIN = 60 * 10**9


def test_windows_on_the_cluster(pipe: Pipeline, cluster: Cluster, tmp_path: Path) -> None:
    base = 1_795_000_020 * 10**9  # a whole minute, in the past
    rng = random.Random(21)
    events: list[tuple[int, bytes, bytes | None, int]] = []  # partition, key, value, event ns
    for p in range(3):
        t = base
        for i in range(400):
            t += rng.randint(1, 4) * 10**9  # increasing per partition: nothing is late
            shop = f"shop-{p}-{i % 7}"
            events.append((p, shop.encode(), json.dumps({"shop_id": shop, "drink": "latte", "amount": 2.5}).encode(),
                           t))
    bad = [b"not json", b'{"shop_id": 5, "drink": "latte", "amount": 1}', b'{"shop_id": "s", "drink": "tea"}',
           b"", b'{"shop_id": "s", "drink": "tea", "amount": true}']
    producer = Producer({"bootstrap.servers": pipe.conn.bootstrap, "enable.idempotence": True})
    bad_where: dict[tuple[int, int], bytes] = {}

    def note(value: bytes) -> Any:
        def delivered(err: Any, msg: Any) -> None:
            assert err is None, err
            bad_where[(msg.partition(), msg.offset())] = value
        return delivered

    for i, (p, key, value, t) in enumerate(events):
        producer.produce(pipe.topics.events, key=key, value=value, partition=p,
                         headers=[("event-time", encode_event_time(t))])
        if i % 97 == 0 and bad:
            raw = bad.pop()
            producer.produce(pipe.topics.events, key=b"bad", value=raw, partition=p,
                             headers=[("event-time", encode_event_time(t))], on_delivery=note(raw))
    last = max(t for *_, t in events)
    for p in range(3):  # an hour later on every partition: closes every window before it
        producer.produce(pipe.topics.events, key=b"closer", value=json.dumps(
            {"shop_id": "closer", "drink": "latte", "amount": 1}).encode(), partition=p,
            headers=[("event-time", encode_event_time(last + 60 * MIN))])
    assert producer.flush(30) == 0
    assert not bad

    proc = pipe.brew("windows", *cluster.run_args(), "--state-dir", str(tmp_path / "state"),
                     "--checkpoint-dir", str(tmp_path / "ckpt"), "--available-now", "--from", "earliest",
                     "--window", "1m", "--watermark-delay", "0", "--idle-timeout", "10m",
                     "--max-offsets-per-trigger", "300", "--min-partitions", "4", timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]

    expected: dict[str, int] = {}
    for *_, t in events:
        start = utc_iso((t - t % MIN) / 1e9, millis=True)
        expected[start] = expected.get(start, 0) + 1
    finals = [json.loads(m.value()) for m in read_topic(pipe.conn, pipe.topics.windows)]
    starts = [r["start"] for r in finals]
    assert len(starts) == len(set(starts)), "a window was emitted twice"
    assert {r["start"]: r["count"] for r in finals} == expected
    assert read_topic(pipe.conn, pipe.topics.late_events) == []
    dlq = {(int(h["source-partition"]), int(h["source-offset"])): m.value()
           for m in read_topic(pipe.conn, pipe.topics.dlq)
           for h in [{k: v.decode() for k, v in m.headers()}]}
    assert dlq == bad_where


def test_conf_reaches_the_running_app_over_spark_defaults(
        pipe: Pipeline, cluster: Cluster, tmp_path: Path) -> None:
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        "# what an operator set for every application\n"
        "spark.executor.memory      700m\n"
        "spark.sql.shuffle.partitions=7\n")
    ui = free_port()
    log = tmp_path / "run.log"
    proc = pipe.spawn("run", *cluster.run_args(), "--conf", "spark.executor.memory=600m",
                      "--conf", "spark.ui.enabled=true", "--conf", f"spark.ui.port={ui}",
                      "--state-dir", str(tmp_path / "state"), "--checkpoint-dir", str(tmp_path / "ckpt"),
                      env={"SPARK_CONF_DIR": str(conf_dir)}, log=log)
    try:
        def exited() -> str | None:
            return None if proc.poll() is None else f"brewstream exited: {log.read_text()[-2000:]}"

        app = wait_until(lambda: next((a for a in (master_state(cluster.spec) or {}).get("activeapps", [])
                                       if a.get("name") == "brewstream-drink-count"), None),
                         120, "the application at the master", give_up=exited)
        assert app["memoryperslave"] == 600  # --conf over spark-defaults.conf
        props = wait_until(lambda: spark_properties(ui), 60, "the driver's environment page", give_up=exited)
        assert props["spark.executor.memory"] == "600m"
        assert props["spark.sql.shuffle.partitions"] == "7"  # spark-defaults.conf over brewstream's 4
        assert props["spark.python.worker.reuse"] == "true"  # brewstream's, where nobody set anything
        assert props["spark.executor.defaultJavaOptions"] == f"{PARALLEL_GC_OPTIONS} {METASPACE_OPTION}"
        # A clean stop once the query runs (SIGTERM during start-up is not what this tests).
        wait_until(lambda: "role: active" in log.read_text(), 120, "the query to start", give_up=exited)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(120)
    assert code == 0, log.read_text()[-3000:]


def test_executors_without_pyarrow_are_one_line(pipe: Pipeline, cluster: Cluster, tmp_path: Path) -> None:
    bare = getattr(sys, "_base_executable", sys.executable)  # the interpreter the venvs were made from
    assert subprocess.run([bare, "-c", "import pyarrow"], capture_output=True, cwd="/").returncode != 0
    proc = pipe.brew("run", "--master", cluster.url, "--conf", f"spark.pyspark.python={bare}",
                     "--conf", "spark.executor.memory=512m", "--state-dir", str(tmp_path / "state"),
                     "--checkpoint-dir", str(tmp_path / "ckpt"), "--available-now", timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("brewstream: error: the executors cannot run the batch code"), proc.stderr[-2000:]
    assert "pyarrow" in lines[-1] and "spark.pyspark.python" in lines[-1]
    assert "Traceback" not in proc.stderr


def test_spark_cluster_command_reports_and_is_idempotent(cluster: Cluster, pipe: Pipeline) -> None:
    shown = pipe.brew("spark-cluster", "status", *cluster.cli_args())
    assert shown.returncode == 0, shown.stderr
    assert cluster.url in shown.stdout and "2 of 2 workers ALIVE" in shown.stdout
    again = pipe.brew("spark-cluster", "up", *cluster.cli_args())
    assert again.returncode == 0 and "already running" in again.stdout and cluster.url in again.stdout
    other = [*cluster.cli_args()[:2], "--ui-port", str(free_port()), *cluster.cli_args()[4:]]
    clash = pipe.brew("spark-cluster", "up", *other)
    assert clash.returncode == 1
    lines = clash.stderr.strip().splitlines()
    assert len(lines) == 1 and "already runs" in lines[0], clash.stderr


def test_a_worker_killed_mid_batch_costs_a_retry_not_a_count(
        pipe: Pipeline, cluster: Cluster, tmp_path: Path) -> None:
    """SIGKILL a whole worker (its JVM, its executor, their Python workers) while a batch's
    tasks run on it: Spark runs those tasks again on the other worker, and the driver only
    ever sees the rows of each task's successful attempt. Last in the module: the cluster
    gets its worker back at the end."""
    good = make_orders(40_000, seed=31)
    records, bad_at = with_bad_orders(good, seed=32)
    where = produce(pipe.conn, pipe.topics.orders, records)
    ui = free_port()
    state = tmp_path / "state"
    log = tmp_path / "run.log"
    proc = pipe.spawn("run", *cluster.run_args(), "--conf", "spark.ui.enabled=true", "--conf", f"spark.ui.port={ui}",
                      "--state-dir", str(state), "--checkpoint-dir", str(tmp_path / "ckpt"), "--available-now",
                      "--max-offsets-per-trigger", "6000", "--min-partitions", "4", log=log)
    try:
        def exited() -> str | None:
            return None if proc.poll() is None else f"brewstream exited first: {log.read_text()[-2000:]}"

        task = wait_until(lambda: running_batch_task(ui), 240, "a task of a batch running on an executor",
                          every=0.05, give_up=exited)
        worker = os.getpgid(executor_pid(task.app, task.executor))
        assert worker in {running_pid(cluster.spec, n) for n in cluster.spec.worker_names}
        os.killpg(worker, signal.SIGKILL)
        # Spark says the task failed with its executor (and runs it again elsewhere).
        lost = wait_until(lambda: failed_tasks(ui, task), 120, "Spark to mark the task lost", give_up=exited)
        assert any("ExecutorLostFailure" in (t.get("errorMessage") or "") for t in lost), lost
        code = proc.wait(RUN_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    assert code == 0, log.read_text()[-3000:]

    got = counts_json(pipe.conn, state)
    assert got["counts"] == oracle(good)
    assert_dlq_holds_each_once(pipe, where, bad_at, [raw for _, raw, _ in BAD_ORDERS])

    # `up` starts what is missing: the cluster has both workers again.
    back = pipe.brew("spark-cluster", "up", *cluster.cli_args(), timeout=180)
    assert back.returncode == 0 and " up " in back.stdout, back.stdout + back.stderr
    assert status(cluster.spec)[0]


def rest(ui: int, path: str) -> Any:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui}/api/v1/{path}", timeout=2.0) as resp:
            return json.loads(resp.read())
    except (OSError, urllib.error.URLError, ValueError):
        return None


def spark_properties(ui: int) -> dict[str, str] | None:
    apps = rest(ui, "applications")
    if not apps:
        return None
    env = rest(ui, f"applications/{apps[0]['id']}/environment")
    return dict(env["sparkProperties"]) if env else None


@dataclass(frozen=True)
class Task:
    app: str
    stage: int
    attempt: int
    executor: str


def running_batch_task(ui: int) -> Task | None:
    """A task of a micro-batch's job (its description names the batch) running right now."""
    apps = rest(ui, "applications")
    if not apps:
        return None
    app = apps[0]["id"]
    for stage in rest(ui, f"applications/{app}/stages?status=active") or []:
        if "batch = " not in (stage.get("description") or ""):
            continue
        path = f"applications/{app}/stages/{stage['stageId']}/{stage['attemptId']}/taskList?status=RUNNING"
        for task in rest(ui, path) or []:
            if task.get("executorId") not in (None, "driver"):
                return Task(app, stage["stageId"], stage["attemptId"], task["executorId"])
    return None


def failed_tasks(ui: int, task: Task) -> list[dict[str, Any]]:
    path = f"applications/{task.app}/stages/{task.stage}/{task.attempt}/taskList?status=FAILED"
    return [t for t in rest(ui, path) or [] if t.get("executorId") == task.executor]


def executor_pid(app_id: str, executor_id: str) -> int:
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in args and \
                _arg(args, b"--app-id") == app_id.encode() and _arg(args, b"--executor-id") == executor_id.encode():
            return int(proc.name)
    raise AssertionError(f"no process for executor {executor_id} of {app_id}")


def _arg(args: list[bytes], flag: bytes) -> bytes | None:
    return args[args.index(flag) + 1] if flag in args[:-1] else None
