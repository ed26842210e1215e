"""The alert rules that ship in deploy/prometheus: valid, unit-tested with promtool, and about
metrics the daemon really exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from service.ops.metrics import Metrics

RULES_DIR = Path(__file__).parents[3] / "deploy" / "prometheus"
RULES = RULES_DIR / "alerts.yml"
TESTS = RULES_DIR / "alerts.test.yml"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is missing: `make test` installs Debian's prometheus package, or "
                    "`apt-get install prometheus`")
    return found


def test_the_rules_are_valid() -> None:
    proc = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_rules_pass_their_unit_tests() -> None:
    proc = subprocess.run([promtool(), "test", "rules", TESTS.name], capture_output=True, text=True, timeout=120,
                          cwd=RULES_DIR)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_alert_has_a_test_and_every_metric_exists() -> None:
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    tested = {case["alertname"] for t in yaml.safe_load(TESTS.read_text())["tests"] for case in t["alert_rule_test"]}
    assert {r["alert"] for r in rules} <= tested
    # Every family, samples or not (counters are named without their _total in the registry).
    exported = {f.name + suffix for f in Metrics("drink-count").registry.collect() for suffix in ("", "_total")}
    used = {name for r in rules for name in re.findall(r"\bbrewstream_\w+", r["expr"])}
    assert used - exported == set()
