"""The command line: help everywhere, one-line errors, fast failure on a dead broker."""

import time
from pathlib import Path

import pytest
import yaml

from service.cli import cli
from tests.helpers import brew
from topics.kafka import KafkaConnection


def command_paths() -> list[list[str]]:
    paths: list[list[str]] = [[]]
    for name, cmd in cli.commands.items():
        paths.append([name])
        for sub in getattr(cmd, "commands", {}):
            paths.append([name, sub])
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


def test_docker_compose_is_valid_three_broker_kraft() -> None:
    doc = yaml.safe_load((Path(__file__).parents[2] / "docker-compose.yml").read_text())
    services = doc["services"]
    assert sorted(services) == ["kafka-1", "kafka-2", "kafka-3"]
    ports = sorted(s["ports"][0] for s in services.values())
    assert ports == ["19092:19092", "19093:19093", "19094:19094"]
    for s in services.values():
        assert s["image"].startswith("apache/kafka:")
        assert s["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
