"""Running it in production: metrics, health checks, JSON logs, secured clusters."""

from __future__ import annotations

import json
import os
import signal
import urllib.error
import urllib.request
from itertools import islice
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sandbox.broker import Sandbox, down, free_port, up
from service.cli.main import cli
from service.drink_count.pipeline import BoardConfig, run
from service.engine.contract import RunConfig
from tests.support.corpus import BAD_ORDERS
from tests.support.drink_count import make_orders
from tests.support.helpers import Pipeline, brew, counts_json, oracle, order_bytes, produce
from topics.clock import wait_until
from topics.orders_gen import OrderGenerator

pytestmark = pytest.mark.spark


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except (urllib.error.URLError, ConnectionError):
        return {}
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset({"pipeline": "drink-count", **labels}.items())))


def test_metrics_while_the_daemon_runs(pipe: Pipeline, tmp_path: Path) -> None:
    good = make_orders(400, seed=20)
    records: list[tuple[bytes | None, bytes | None]] = [order_bytes(o) for o in good]
    records += [(b"bad", raw) for _, raw, _ in BAD_ORDERS[:3]]
    produce(pipe.conn, pipe.topics.orders, records)
    port = free_port()
    log = tmp_path / "daemon.log"
    daemon = pipe.spawn("run", "--state-dir", str(tmp_path / "s"), "--checkpoint-dir", str(tmp_path / "c"),
                        "--flush", "1s", "--metrics-port", str(port), log=log)
    try:
        samples = wait_until(lambda: (s := scrape(port)) and value(s, "brewstream_orders_processed_total") == 400
                           and all(value(s, "brewstream_input_lag_records", partition=str(p)) == 0
                                   for p in range(3)) and s, 180, "metrics to show the orders counted and no lag")
        assert value(samples, "brewstream_input_records_total") == 403
        assert value(samples, "brewstream_bad_records_total", reason="null value") == 1
        assert value(samples, "brewstream_bad_records_total", reason="empty value") == 1
        assert value(samples, "brewstream_bad_records_total", reason="not JSON") == 1
        assert (value(samples, "brewstream_batches_total") or 0) >= 1
        assert (value(samples, "brewstream_changelog_records_total") or 0) > 0
        for phase in ("aggregate", "changelog", "store"):
            assert (value(samples, "brewstream_batch_duration_seconds_count", phase=phase) or 0) >= 1
        assert (value(samples, "brewstream_topn_flush_seconds_count") or 0) >= 1
        assert (value(samples, "brewstream_store_keys") or 0) > 0
        assert (value(samples, "brewstream_store_size_bytes") or 0) > 0
        assert 0 <= (value(samples, "brewstream_last_batch_age_seconds") or -1) < 120
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(120) == 0
        with pytest.raises(ProcessLookupError):  # nothing of it outlives it: Spark's JVM ended before it
            os.killpg(daemon.pid, 0)
    finally:
        if daemon.poll() is None:
            daemon.kill()


def test_a_sigterm_to_the_process_group_stops_without_a_traceback(pipe: Pipeline, tmp_path: Path) -> None:
    """systemd's default stop (and `kill -- -PGID`) signals every process of the service at
    once, so Spark's JVM goes away while the daemon stops: the stop is still clean, in
    the daemon's own lines, with no traceback from py4j or pyspark's accumulator server."""
    produce(pipe.conn, pipe.topics.orders, [order_bytes(o) for o in make_orders(200, seed=21)])
    log = tmp_path / "daemon.log"
    daemon = pipe.spawn("run", "--state-dir", str(tmp_path / "s"), "--checkpoint-dir", str(tmp_path / "c"), log=log)
    try:
        wait_until(lambda: "orders=" in log.read_text(errors="replace"), 180, "the daemon's first batch")
        os.killpg(daemon.pid, signal.SIGTERM)  # spawned in a session of its own: its pid is the group's
        code = daemon.wait(120)
    finally:
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGKILL)
    text = log.read_text(errors="replace")
    assert code == 0, text[-3000:]
    assert "role: stopped" in text, text[-3000:]
    assert "Traceback" not in text and "Exception" not in text, text[-3000:]


def test_a_jvm_thread_ended_by_the_stop_is_told_apart(spark: Any) -> None:
    """What the test above can meet (the query's thread ends on "RpcEnv already stopped"
    when the JVM's shutdown hook stopped Spark under it), made to happen: that end is the
    stop, logged to Spark's file only; any other end of a thread is a one-line warning."""
    jvm = spark.sparkContext._jvm
    uncaught = jvm.brewstream.JvmUncaught
    handler = jvm.java.lang.Thread.getDefaultUncaughtExceptionHandler()
    assert handler is not None and "JvmUncaught" in handler.getClass().getName()
    rpc_stopped = jvm.org.apache.spark.rpc.RpcEnvStoppedException()
    assert uncaught.endedByAStop(jvm.org.apache.spark.SparkException("Exception thrown in awaitResult: ", rpc_stopped))
    assert uncaught.endedByAStop(rpc_stopped)
    assert not uncaught.endedByAStop(jvm.java.lang.IllegalStateException("RpcEnv already stopped."))
    assert not uncaught.endedByAStop(jvm.org.apache.spark.SparkException("a task failed"))
    # Two exceptions that name each other as their cause: an answer, not a loop.
    first, second = jvm.java.lang.RuntimeException("first"), jvm.java.lang.RuntimeException("second")
    first.initCause(second)
    second.initCause(first)
    assert not uncaught.endedByAStop(first)


def test_status_is_a_health_check(pipe: Pipeline, spark: Any, tmp_path: Path) -> None:
    state = tmp_path / "s"
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in make_orders(300, seed=21)))
    cfg = RunConfig(pipe.conn, state, tmp_path / "c", available_now=True, topics=pipe.topics)
    assert run(cfg, BoardConfig(60), spark=spark) == 0

    healthy = pipe.brew("status", "--state-dir", str(state), "--max-lag", "0", "--max-batch-age", "10m")
    assert healthy.returncode == 0, healthy.stderr
    assert "total lag on" in healthy.stdout and "batches committed" in healthy.stdout

    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in make_orders(10, seed=22)))
    behind = pipe.brew("status", "--state-dir", str(state), "--max-lag", "5", "--json")
    assert behind.returncode == 3
    assert json.loads(behind.stdout)["lag"] == 10
    assert behind.stderr.strip() == "unhealthy: lag 10 is above --max-lag 5"


def test_json_logs_carry_the_batch_figures(pipe: Pipeline, tmp_path: Path) -> None:
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in make_orders(250, seed=23)))
    proc = pipe.brew("--log-format", "json", "run", "--state-dir", str(tmp_path / "s"), "--checkpoint-dir",
                     str(tmp_path / "c"), "--available-now", check=True)
    records = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    assert records and all({"time", "level", "logger", "message"} <= r.keys() for r in records)
    batches = [r for r in records if r["message"].startswith("batch ")]
    assert sum(r["orders"] for r in batches) == 250
    assert all({"batch_id", "seq", "bad", "aggregate_s", "changelog_s", "store_s"} <= r.keys() for r in batches)


def test_a_password_in_the_kafka_config_is_never_printed(pipe: Pipeline, tmp_path: Path) -> None:
    secret = "hunter2-never-print-me"
    config = tmp_path / "client.properties"
    config.write_text(f"client.id=brewstream-test\nsasl.username=brew\nsasl.password={secret}\n")
    outputs = []
    for path in [[], *[[name] for name in cli.commands]]:
        outputs.append(brew(pipe.conn, *path, "--help", env={"BREWSTREAM_KAFKA_CONFIG": str(config)}))
    outputs.append(brew(pipe.conn, "topics", "describe", "--bootstrap", "127.0.0.1:1", "--kafka-config", str(config)))
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in make_orders(50, seed=24)))
    outputs.append(pipe.brew("--log-level", "debug", "run", "--kafka-config", str(config), "--state-dir",
                             str(tmp_path / "s"), "--checkpoint-dir", str(tmp_path / "c"), "--available-now",
                             check=True))
    for proc in outputs:
        assert secret not in proc.stdout + proc.stderr


def test_a_sasl_cluster_through_kafka_config(tmp_path: Path) -> None:
    """Every client, Spark's source included, authenticates with settings from the file."""
    secret = "brew-sasl-secret"
    box = Sandbox(free_port(), tmp_path / "kafka", sasl_port=free_port(), sasl_users={"brew": secret})
    up(box)
    try:
        config = tmp_path / "sasl.properties"
        config.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanisms=PLAIN\nsasl.username=brew\n"
                          f"sasl.password={secret}\n")
        sasl = ["--bootstrap", f"127.0.0.1:{box.sasl_port}", "--kafka-config", str(config),
                "--topic-prefix", "sasl."]
        from topics.kafka import KafkaConnection

        conn = KafkaConnection(box.bootstrap)
        outputs = [brew(conn, "topics", "create", *sasl, check=True),
                   brew(conn, "seed-orders", "--count", "500", "--rate", "0", "--seed", "9", *sasl, check=True),
                   brew(conn, "run", *sasl, "--state-dir", str(tmp_path / "s"), "--checkpoint-dir",
                        str(tmp_path / "c"), "--available-now", check=True)]
        assert counts_json(conn, tmp_path / "s")["counts"] == oracle(islice(OrderGenerator(9), 500))
        config.write_text(config.read_text().replace(secret, "wrong-password"))
        refused = brew(conn, "topics", "describe", *sasl, timeout=60)
        assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        for proc in [*outputs, refused]:
            assert secret not in proc.stdout + proc.stderr
            assert "wrong-password" not in proc.stdout + proc.stderr
    finally:
        down(box)
