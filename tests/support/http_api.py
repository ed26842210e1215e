"""The daemon's HTTP server in-process, on a real socket, as the unit tests of the port
ask it: ``start`` one with drink-count's paths, ``get`` an answer (with a token or none)."""

from __future__ import annotations

import urllib.error
import urllib.request

from service.drink_count.http import routes
from service.instance.health import Health
from service.ops.http_api import HttpApi
from service.ops.metrics import Metrics
from tests.support.http import ask

TOKEN = "t0ken-never-echoed"


def get(api: HttpApi, path: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{api.port}{path}")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def get_with_headers(api: HttpApi, path: str) -> tuple[int, str, dict[str, str]]:
    return ask(api.port, path)


def start(health: Health, token: str | None = None, pipeline: str = "drink-count") -> HttpApi:
    metrics = Metrics(pipeline)
    health.on_change(metrics.phase_changed)  # as the runner wires them
    return HttpApi("127.0.0.1", 0, pipeline, "orders", routes(), metrics, health, token)
