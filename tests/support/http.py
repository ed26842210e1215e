"""Asking a daemon's HTTP port from a test: ``get``, ``get_json``, and whether the daemon
process is still up."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any


def get(port: int, path: str) -> tuple[int, str]:
    """(status, body); (0, why) when nothing answers yet."""
    status, body, _ = ask(port, path)
    return status, body


def ask(port: int, path: str) -> tuple[int, str, dict[str, str]]:
    """(status, body, headers); (0, why, {}) when nothing answers yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), dict(exc.headers)
    except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
        return 0, str(exc), {}


def get_json(port: int, path: str) -> dict[str, Any] | None:
    status, body = get(port, path)
    return json.loads(body) if status == 200 else None


def daemon_alive(proc: subprocess.Popen[bytes], log: Path) -> Callable[[], str | None]:
    return lambda: None if proc.poll() is None else f"the daemon exited {proc.returncode}: " + \
        log.read_text()[-2000:]


def metric(port: int, name: str, **labels: str) -> float | None:
    """One sample of the daemon's /metrics (its ``pipeline`` label aside), or None."""
    from prometheus_client.parser import text_string_to_metric_families

    status, body = get(port, "/metrics")
    if status != 200:
        return None
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None
