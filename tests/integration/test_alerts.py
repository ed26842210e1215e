"""A real Prometheus server scrapes a running daemon with the shipped alert rules, and the
bad-record rule fires once bad records flow (and not before)."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandbox.broker import free_port
from tests.support.drink_count import make_orders
from tests.support.helpers import Pipeline, order_bytes, produce
from tests.support.http import daemon_alive, get
from topics.clock import wait_until

pytestmark = pytest.mark.spark

RULES = Path(__file__).parents[2] / "deploy" / "prometheus" / "alerts.yml"
ALERT = "BrewstreamBadRecordRateHigh"


def prom_api(port: int, path: str, **params: str) -> Any:
    url = f"http://127.0.0.1:{port}/api/v1/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())["data"]
    except (OSError, ValueError):
        return None


def sample(port: int, query: str) -> float | None:
    data = prom_api(port, "query", query=query)
    result = data["result"] if data else []
    return float(result[0]["value"][1]) if result else None


def firing(port: int) -> list[dict[str, Any]]:
    data = prom_api(port, "alerts") or {"alerts": []}
    return [a for a in data["alerts"] if a["labels"]["alertname"] == ALERT and a["state"] == "firing"]


def last_evaluation(port: int) -> float:
    """When the rules were last evaluated (unix seconds; 0 before the first time)."""
    data = prom_api(port, "rules") or {"groups": []}
    return max((_unix(g["lastEvaluation"]) for g in data["groups"]), default=0.0)


def _unix(stamp: str) -> float:
    """An RFC 3339 time with nanoseconds (Go's), which datetime cannot read whole."""
    match = re.fullmatch(r"(.+T\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)", stamp)
    if match is None:
        return 0.0
    whole, frac, zone = match.groups()
    return datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone)).timestamp() + float(frac or 0)


def start_prometheus(tmp_path: Path, target_port: int) -> tuple[subprocess.Popen[bytes], int]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is missing: `make test` installs Debian's prometheus package")
    # The shipped rules with their `for:` durations cut to nothing, so a test minute is enough.
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            rule["for"] = "0s"
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(doc))
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(tmp_path / "rules.yml")],
        "scrape_configs": [{"job_name": "brewstream", "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}]}],
    }))
    port = free_port()
    log = open(tmp_path / "prometheus.log", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen([binary, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'prometheus-data'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                            stdout=log, stderr=subprocess.STDOUT)
    log.close()
    return proc, port


def test_prometheus_scraping_the_daemon_fires_the_bad_record_alert(pipe: Pipeline, tmp_path: Path) -> None:
    port, log = free_port(), tmp_path / "daemon.log"
    daemon = pipe.spawn("run", "--state-dir", str(tmp_path / "s"), "--checkpoint-dir", str(tmp_path / "c"),
                        "--trigger", "500ms", "--http-port", str(port), log=log)
    prometheus, prom_port = start_prometheus(tmp_path, port)
    prom_log = tmp_path / "prometheus.log"
    prom_alive = lambda: None if prometheus.poll() is None else "prometheus exited: " + prom_log.read_text()[-2000:]  # noqa: E731
    try:
        wait_until(lambda: get(port, "/readyz")[0] == 200, 240, "the daemon to be ready",
                   give_up=daemon_alive(daemon, log))
        wait_until(lambda: sample(prom_port, 'brewstream_role{role="active"}') == 1, 60,
                   "Prometheus to scrape the active daemon", give_up=prom_alive)

        # Good orders and one bad record: no bad-record rate yet, so nothing fires.
        produce(pipe.conn, pipe.topics.orders, [order_bytes(o) for o in make_orders(100, seed=60)])
        produce(pipe.conn, pipe.topics.orders, [(None, b"not json")])
        wait_until(lambda: sample(prom_port, 'brewstream_bad_records_total{reason="not JSON"}') == 1
                   and sample(prom_port, "brewstream_orders_processed_total") == 100, 120,
                   "Prometheus to see the first batch", give_up=prom_alive)
        seen = time.time()
        wait_until(lambda: last_evaluation(prom_port) > seen + 1, 30, "the rules to be evaluated again")
        assert firing(prom_port) == []

        # A burst of bad records: the DLQ share jumps far above 5%.
        produce(pipe.conn, pipe.topics.orders, [(None, b"not json %d" % i) for i in range(60)])
        alerts = wait_until(lambda: firing(prom_port), 120, f"{ALERT} to fire", give_up=prom_alive)
        assert alerts[0]["labels"]["pipeline"] == "drink-count"
        assert alerts[0]["labels"]["instance"] == f"127.0.0.1:{port}"
        assert "of drink-count's input goes to the DLQ" in alerts[0]["annotations"]["summary"]
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(120) == 0
    finally:
        prometheus.terminate()
        try:
            prometheus.wait(30)
        except subprocess.TimeoutExpired:
            prometheus.kill()
        if daemon.poll() is None:
            daemon.kill()
