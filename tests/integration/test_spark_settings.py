"""--conf on the command line: a bad one is one line and a non-zero exit before anything
starts; --help names brewstream's defaults. (That a good one reaches the running
application: ``test_cluster.py``.)"""

from __future__ import annotations

import pytest

from service.spark.conf import DEFAULTS
from tests.support.helpers import brew
from topics.kafka import KafkaConnection

NOWHERE = KafkaConnection("127.0.0.1:1")


@pytest.mark.parametrize("command", [["run"], ["windows"], ["drill", "kill9"]])
@pytest.mark.parametrize(("conf", "says"), [
    ("spark.executor.memory", "is not KEY=VALUE"),
    ("=2g", "has an empty key"),
    ("executor.memory=2g", "is not a Spark setting"),
])
def test_a_bad_conf_is_one_line_and_a_non_zero_exit(command: list[str], conf: str, says: str) -> None:
    proc = brew(NOWHERE, *command, "--conf", "spark.ui.enabled=true", "--conf", conf, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("brewstream: error:") and says in lines[0], proc.stderr
    assert "--conf" in lines[0]


@pytest.mark.parametrize("command", [["run"], ["windows"], ["drill", "disk-loss"]])
def test_help_names_the_defaults_that_apply_only_where_nothing_is_set(command: list[str]) -> None:
    proc = brew(NOWHERE, *command, "--help", timeout=60)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    for key in ("--conf KEY=VALUE", "--min-partitions", "spark-defaults.conf", "SPARK_CONF_DIR",
                "spark.pyspark.python"):
        assert key in text
    # Every default is named (help wraps long keys, so compare without whitespace).
    squeezed = "".join(proc.stdout.split())
    assert all(f"{k}={v}" in squeezed for k, v in DEFAULTS.items())
