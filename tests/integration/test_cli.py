"""The command line: help everywhere, one-line errors, fast failure on a dead broker."""

import os
import signal
import subprocess
import time
from importlib.metadata import version
from pathlib import Path

import click
import pytest
import yaml

from service.cli.main import cli
from tests.support.helpers import BREW, brew
from topics.clock import wait_until
from topics.kafka import KafkaConnection


def command_paths(group: click.Command = cli, prefix: tuple[str, ...] = ()) -> list[list[str]]:
    paths: list[list[str]] = [list(prefix)]
    for name, cmd in getattr(group, "commands", {}).items():
        paths += command_paths(cmd, (*prefix, name))
    return paths


@pytest.mark.parametrize("path", command_paths(), ids=lambda p: " ".join(p) or "brewstream")
def test_every_command_has_help_with_defaults(path: list[str]) -> None:
    proc = brew(KafkaConnection("127.0.0.1:1"), *path, "--help", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "Usage:" in proc.stdout
    if "--bootstrap" in proc.stdout:
        assert "localhost:19092" in proc.stdout and "KAFKA_BOOTSTRAP" in proc.stdout


@pytest.mark.parametrize("args", [
    ["topics", "create", "--bogus"],
    ["run", "--flush", "soon"],
    ["seed-orders", "--count", "-3"],
    ["nosuchcommand"],
    ["run", "--http-port", "9464", "--http-host", "0.0.0.0"],  # beyond loopback without a token
    ["dlq", "show", "--since", "yesterday"],
    ["dlq", "replay", "--batch", "0"],
    ["dlq", "replay", "--store", "revenue"],  # its orders would be counted twice by drink-count
    ["sandbox", "up", "--brokers", "0"],
    ["sandbox", "up", "--fault-proxy"],  # a proxy needs a cluster
    ["sandbox", "node", "kill", "x"],
    ["sandbox", "fault", "latency", "1", "soon"],
    ["windows", "--max-event-time-ahead", "100000h"],  # beyond ten years
])
def test_bad_flags_exit_non_zero_with_one_line(args: list[str]) -> None:
    proc = brew(KafkaConnection("127.0.0.1:1"), *args, timeout=60)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("brewstream: error:"), proc.stderr


@pytest.mark.parametrize("args", [
    ["topics", "describe"], ["topics", "create"], ["seed-orders", "--count", "1"], ["run"], ["restore"],
])
def test_unreachable_broker_is_one_line_within_seconds(args: list[str], tmp_path: Path) -> None:
    extra = ["--state-dir", str(tmp_path / "s")] if args[0] in ("run", "restore") else []
    started = time.monotonic()
    proc = brew(KafkaConnection("127.0.0.1:1"), *args, *extra, "--bootstrap", "127.0.0.1:1", timeout=60)
    assert time.monotonic() - started < 15
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach Kafka at 127.0.0.1:1" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("line", ["java.isolation.level=read_uncommitted", "transactional.id=ops", "acks=1"])
def test_a_kafka_config_that_breaks_exactly_once_is_one_line(line: str, tmp_path: Path) -> None:
    """Refused before any client exists, so no broker is needed to see it."""
    config = tmp_path / "client.properties"
    config.write_text(f"security.protocol=PLAINTEXT\n{line}\n")
    proc = brew(KafkaConnection("127.0.0.1:1"), "run", "--kafka-config", str(config), "--state-dir",
                str(tmp_path / "s"), timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1
    assert len(lines) == 1 and f"sets {line.split('=')[0]}, which brewstream sets itself" in lines[0], proc.stderr
    assert not (tmp_path / "s").exists()


def _catches(pid: int, sig: int) -> bool:
    """Whether the process has a handler of its own for ``sig`` (its SigCgt mask)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


def _waits_on_kafka(pid: int) -> bool:
    """Whether the process has started a Kafka client (librdkafka names its threads rdk:…)."""
    return any(t.joinpath("comm").read_text().startswith("rdk:") for t in Path(f"/proc/{pid}/task").iterdir())


def _state(pid: int) -> str:
    """The one-letter state of /proc/PID/status: T stopped, Z exited but not reaped."""
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("State:"))
    return line.split()[1]


@pytest.mark.parametrize("args", [["run"], ["restore"]])
def test_sigterm_before_the_daemon_listens_is_one_line(args: list[str], tmp_path: Path) -> None:
    """SIGTERM while a command starts (here: still waiting for a broker that never
    answers) unwinds it with one line and 128 + 15, where Python's default would end
    the process by the signal, skipping every clean-up.

    The wait for the broker gives up after seconds, so the process is frozen (SIGSTOP)
    while the SIGTERM is sent: a slow test cannot let it give up first."""
    proc = subprocess.Popen([BREW, *args, "--state-dir", str(tmp_path / "s"), "--bootstrap", "127.0.0.1:1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: _catches(proc.pid, signal.SIGTERM) and _waits_on_kafka(proc.pid), 30,
                   "brewstream waiting on Kafka with a SIGTERM handler",
                   give_up=lambda: f"exited {proc.returncode}" if proc.poll() is not None else None)
        proc.send_signal(signal.SIGSTOP)
        wait_until(lambda: _state(proc.pid) in "TZ", 10, "the process to stop")
        assert _state(proc.pid) == "T", "brewstream gave up on Kafka before it could be stopped"
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGCONT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert err.strip().splitlines() == ["brewstream: stopped by SIGTERM"], err


def test_docker_compose_is_valid_three_broker_kraft() -> None:
    doc = yaml.safe_load((Path(__file__).parents[2] / "docker-compose.yml").read_text())
    services = doc["services"]
    assert sorted(services) == ["kafka-1", "kafka-2", "kafka-3"]
    ports = sorted(s["ports"][0] for s in services.values())
    assert ports == ["19092:19092", "19093:19093", "19094:19094"]
    for s in services.values():
        assert s["image"].startswith("apache/kafka:")
        assert s["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"


def test_version() -> None:
    proc = brew(KafkaConnection("127.0.0.1:1"), "--version", timeout=60)
    assert proc.returncode == 0 and proc.stdout == f"brewstream {version('brewstream')}\n"


def test_a_kafka_config_with_bootstrap_servers_is_used_as_people_write_it(kafka: KafkaConnection,
                                                                         tmp_path: Path) -> None:
    """client.properties with bootstrap.servers: used when neither --bootstrap nor
    KAFKA_BOOTSTRAP is given; a given one that differs is refused in one line naming both."""
    config = tmp_path / "client.properties"
    config.write_text(f"# the cluster\nbootstrap.servers={kafka.bootstrap}\nclient.id=brew-test\n")
    bare = {k: v for k, v in os.environ.items() if k not in ("KAFKA_BOOTSTRAP", "BREWSTREAM_KAFKA_CONFIG")}

    def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([BREW, "topics", "describe", "--topic-prefix", "cfg.", *args], capture_output=True,
                              text=True, timeout=60, env={**bare, **env})

    from_file = run("--kafka-config", str(config))
    assert from_file.returncode == 0, from_file.stderr
    assert "cfg.brew.orders.v1  absent" in from_file.stdout
    assert run("--kafka-config", str(config), "--bootstrap", kafka.bootstrap).returncode == 0
    assert run(BREWSTREAM_KAFKA_CONFIG=str(config)).returncode == 0

    for differing in (run("--kafka-config", str(config), "--bootstrap", "127.0.0.1:1"),
                      run("--kafka-config", str(config), KAFKA_BOOTSTRAP="127.0.0.1:1")):
        assert differing.returncode == 1
        lines = differing.stderr.strip().splitlines()
        assert len(lines) == 1 and "127.0.0.1:1" in lines[0] and "bootstrap.servers of" in lines[0]
        assert kafka.bootstrap not in lines[0]  # no value of the file is ever shown
        assert str(config) in lines[0]
    assert "KAFKA_BOOTSTRAP 127.0.0.1:1" in run("--kafka-config", str(config), KAFKA_BOOTSTRAP="127.0.0.1:1").stderr
    # Without the file's line nothing changes: the default, or what is given.
    config.write_text("client.id=brew-test\n")
    assert run("--kafka-config", str(config), KAFKA_BOOTSTRAP=kafka.bootstrap).returncode == 0
