"""No secret of a --kafka-config file appears in any output: stdout, stderr, the log, Spark's
log, `status`, the HTTP API, the metrics, the topics. brewstream's own messages name keys,
never values, whatever key a value sits under (people paste secrets into the wrong key), so
a refused value is never quoted; and every secret (``topics.kafka_config.is_secret``) is
hidden wherever it stands as a whole word. A user name, a client id, a server or a path is
not a secret: shown (tests/integration/test_secured_kafka.py runs the docs' example)."""

from __future__ import annotations

import secrets
import signal
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from sandbox.broker import free_port
from tests.support.drink_count import make_orders
from tests.support.helpers import Pipeline, order_bytes, produce, read_topic
from topics.clock import wait_until
from topics.kafka_config import hide_values

# Keys whose values librdkafka or the Java client refuse, or that break the connection: the
# command stops at once, saying it is a configuration error and naming the key.
REFUSED = ["security.protocol", "sasl.mechanisms", "sasl.mechanism", "linger.ms", "no.such.setting",
           "socket.timeout.ms", "enable.ssl.certificate.verification"]
# Keys a plaintext cluster takes whatever their value: the daemon runs with all of them. The
# secrets among them must show nowhere; the rest (a user name, a client id, a path) were
# hidden too, wherever they stood inside other words, until only secrets were (the docs'
# `sasl.username=brew` blanked out every `brew`): they may show now.
TAKEN = ["sasl.username", "sasl.password", "client.id", "ssl.ca.location", "ssl.key.password",
         "java.client.id", "java.no.such.setting"]
SECRETS = ["sasl.password", "ssl.key.password", "java.client.id", "java.no.such.setting"]


def secret() -> str:
    return "S" + secrets.token_hex(10)


def get(port: int, path: str) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return str(response.read().decode())
    except urllib.error.HTTPError as exc:
        return str(exc.read().decode())
    except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
        return str(exc)


def test_a_refused_value_stops_every_command_as_a_configuration_error(pipe: Pipeline, tmp_path: Path) -> None:
    commands = [["run", "--available-now", "--state-dir", str(tmp_path / "s")], ["status"], ["topics", "describe"],
                ["dlq", "show"], ["seed-orders", "--count", "1"]]
    for i, key in enumerate(REFUSED):
        value = secret()
        config = tmp_path / f"{i}.properties"
        config.write_text(f"{key}={value}\n")
        # Every command on the first key; one command each on the rest (they share the check).
        for args in commands if i == 0 else [commands[i % len(commands)]]:
            proc = pipe.brew(*args, "--kafka-config", str(config), timeout=60)
            out = proc.stdout + proc.stderr
            assert proc.returncode != 0, out
            assert value not in out, out
            last = proc.stderr.strip().splitlines()[-1]
            assert "configuration error" in last and key in last, last
            assert "cannot reach" not in last and "sandbox up" not in last, last


def test_servers_that_cannot_be_reached_are_named(pipe: Pipeline, tmp_path: Path) -> None:
    # The file's bootstrap.servers were hidden like a secret, so the line said it could not
    # reach `<bootstrap.servers>`: servers are not a secret, and the user needs to see which
    # ones were tried.
    value = secret()
    config = tmp_path / "client.properties"
    config.write_text(f"bootstrap.servers={value}:9092\n")
    proc = pipe.brew("status", "--kafka-config", str(config), "--bootstrap", f"{value}:9092", timeout=60)
    assert proc.returncode != 0
    assert f"cannot reach Kafka at {value}:9092" in proc.stderr, proc.stderr


def test_a_running_daemon_shows_no_value_anywhere(pipe: Pipeline, tmp_path: Path) -> None:
    values = {key: secret() for key in TAKEN}
    config = tmp_path / "client.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    orders = make_orders(300, seed=91)
    produce(pipe.conn, pipe.topics.orders, [*(order_bytes(o) for o in orders), (b"bad", b"not json")])
    state, port, log = tmp_path / "state", free_port(), tmp_path / "daemon.log"
    daemon = pipe.spawn("run", "--kafka-config", str(config), "--state-dir", str(state),
                        "--checkpoint-dir", str(tmp_path / "ckpt"), "--http-port", str(port), "--flush", "1s", log=log)
    bodies: list[str] = []
    try:
        wait_until(lambda: "processed=300" in log.read_text(), 180, "the daemon to count every order")
        for path in ("/metrics", "/api/status", "/api/counts", "/api/top", "/readyz", "/healthz", "/nope"):
            bodies.append(get(port, path))
        for args in (["status", "--state-dir", str(state), "--json"], ["status", "--state-dir", str(state)],
                     ["dlq", "show"], ["topics", "describe"]):
            proc = pipe.brew(*args, "--kafka-config", str(config), check=True)
            bodies += [proc.stdout, proc.stderr]
        bodies.append(pipe.brew("counts", "--state-dir", str(state), check=True).stdout)
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(120) == 0, log.read_text()[-3000:]
    text = log.read_text(errors="replace")
    assert "Using incubator modules" not in text  # the JVM's start-up notice: nothing a user can act on
    bodies.append(text)
    bodies += [p.read_text(errors="replace") for p in state.glob("spark.log*")]
    for topic in (pipe.topics.changelog, pipe.topics.counts, pipe.topics.dlq, pipe.topics.instances):
        for msg in read_topic(pipe.conn, topic):
            headers: Any = msg.headers() or []
            bodies.append(repr((msg.key(), msg.value(), headers)))
    for key in SECRETS:
        value = values[key]
        leaks = [b[max(0, b.find(value) - 80):b.find(value) + 80] for b in bodies if value in b]
        assert not leaks, f"the value under {key} was shown: {leaks[:3]}"


def test_spark_log_hides_a_value_any_java_line_carries(spark: Any, tmp_path: Path) -> None:
    """What the Java client logs (a client id, a server, a refused setting) is written by the
    JVM itself: the session's log layout replaces each registered value there too."""
    from service.spark.jvm_output import SPARK_LOG_ENV
    from service.spark.session import _hide_config_values_in_the_jvm_log

    value = "J" + secrets.token_hex(8) + "{%$}"
    hide_values({"java.client.id": value})
    _hide_config_values_in_the_jvm_log(spark)
    jvm = spark.sparkContext._jvm
    path = Path(jvm.java.lang.System.getenv(SPARK_LOG_ENV) or
                Path(jvm.java.lang.System.getProperty("java.io.tmpdir")) / "brewstream-spark.log")
    marker = "M" + secrets.token_hex(6)
    logger = jvm.org.apache.logging.log4j.LogManager.getLogger("brewstream.test")
    logger.error(f"{marker} [Consumer clientId={value}] connection refused")
    logger.error(f"{marker} failed", jvm.java.lang.IllegalStateException(f"bad value {value}"))
    # Only as a whole word, as ``redact`` does: glued to a longer word, it is another word.
    logger.error(f"{marker} glued x{value}")
    wait_until(lambda: path.exists() and path.read_text(errors="replace").count(marker) >= 3, 30,
               "the JVM's lines in Spark's log")
    text = path.read_text(errors="replace")
    assert f"glued x{value}" in text
    assert value not in text.replace(f"glued x{value}", "")
    assert "<a --kafka-config value>" in text
