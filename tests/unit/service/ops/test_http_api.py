"""The daemon's HTTP server on a real socket and a real RocksDB store (no Kafka, no Spark):
probes by phase, the API's answers and refusals, the token, the bind rule."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from restorer.codec import CHANGELOG_PARTITIONS, commit_key, encode_u64, local_key, meta_key, offset_key, position_key
from restorer.store import Store
from service.drink_count.counts import PROCESSED_ORDERS, drink_key
from service.drink_count.http import routes
from service.instance.health import ACTIVE, FENCED, RESTORING, STANDBY, STARTING, STOPPED, Health
from service.ops.http_api import HttpApi, bind_problem, serve_http, serving
from service.ops.metrics import Metrics
from service.ops.queries import Owner
from tests.support.http_api import TOKEN, get, get_with_headers, start
from topics.errors import BrewError


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "store") as s:
        s.commit([(drink_key("latte"), encode_u64(4)), (drink_key("mocha"), encode_u64(2)),
                  (offset_key("orders", 0), encode_u64(6)), (meta_key(PROCESSED_ORDERS), encode_u64(5)),
                  (commit_key(0), encode_u64(3)), (position_key(0), encode_u64(9)),
                  (local_key(CHANGELOG_PARTITIONS), b"2")])
        yield s


def test_probes_follow_the_phase_and_the_query() -> None:
    health = Health()
    api = start(health)
    try:
        assert get(api, "/healthz") == (200, "alive: starting\n")
        assert get(api, "/readyz") == (503, "not ready: starting\n")
        health.set(RESTORING, "catching up with the changelog")
        assert get(api, "/readyz") == (503, "not ready: restoring (catching up with the changelog)\n")
        assert get(api, "/healthz")[0] == 200  # a long restore is no reason to restart
        health.set(STARTING, "starting the query")
        running = [True]
        health.set(ACTIVE, query_alive=lambda: running[0])
        assert get(api, "/readyz") == (200, "ready: active\n")
        running[0] = False
        assert get(api, "/readyz") == (503, "not ready: active, but its streaming query is not running\n")
        assert get(api, "/healthz")[0] == 503

        def broken() -> bool:
            raise RuntimeError("gateway gone")
        health.set(ACTIVE, query_alive=broken)
        assert get(api, "/healthz")[0] == 503
        health.set(FENCED, "another instance took over the changelog")
        assert get(api, "/healthz") == (503, "not alive: fenced (another instance took over the changelog)\n")
        health.set(RESTORING, "catching up with the changelog as a standby")
        health.set(STANDBY, "following the changelog")
        assert get(api, "/readyz") == (200, "ready: standby (following the changelog)\n")
    finally:
        api.stop()


def test_the_api_answers_from_the_attached_store_only(store: Store) -> None:
    health = Health()
    api = start(health)
    try:
        code, body = get(api, "/api/counts")
        assert code == 503 and json.loads(body) == {"error": "not serving the store: the store is not open yet"}
        with serving(api, store):
            health.set(ACTIVE)
            # Open, but not yet brought up to date with its changelog: an empty store before
            # its restore looks just like this one.
            code, body, headers = get_with_headers(api, "/api/counts")
            assert code == 503 and headers["Retry-After"] == "1"
            assert json.loads(body)["error"] == ("not serving the store: active, but the store is not up to date "
                                                 "with its changelog yet")
            assert get(api, "/api/status")[0] == 200  # in every phase, naming it
            api.whole(store)
            code, body = get(api, "/api/counts")
            assert code == 200 and body.endswith("\n") and body.count("\n") == 1
            doc = json.loads(body)
            assert doc == {"pipeline": "drink-count", "role": "active", "seq": 3, "offsets": {"orders": {"0": 6}},
                           "last_batch": None, "processed_orders": 5, "bad_orders": 0,
                           "counts": {"latte": 4, "mocha": 2},
                           # latte and mocha both hash to task 0 of 2 (murmur2, as Kafka's partitioner)
                           "tasks": {"0": {"keys": 2, "seq": 3, "changelog_position": 9, "offsets": {}},
                                     "1": {"keys": 0, "seq": 0, "changelog_position": None, "offsets": {}}}}
            # Once the daemon holds a lease, every answer and every task names who answers.
            api.owner = lambda: Owner("brew-1", 4, ("running", "running"))
            labelled = json.loads(get(api, "/api/counts")[1])
            assert (labelled["instance"], labelled["generation"]) == ("brew-1", 4)
            assert {t: (v["owner"], v["generation"], v["state"]) for t, v in labelled["tasks"].items()} == \
                {"0": ("brew-1", 4, "running"), "1": ("brew-1", 4, "running")}
            assert json.loads(get(api, "/api/top?n=1")[1])["top"] == [{"rank": 1, "drink": "latte", "count": 4}]
            status = json.loads(get(api, "/api/status")[1])
            assert (status["role"], status["seq"], status["input_topic"]) == ("active", 3, "orders")

            for path, reason in [("/api/top?n=0", "n must be a whole number from 1 to 10000, not '0'"),
                                 ("/api/top?n=2&top=3", "unknown parameter 'top'; this path takes: n"),
                                 ("/api/counts?n=2", "unknown parameter 'n'; this path takes: none")]:
                assert get(api, path) == (400, json.dumps({"error": reason}, separators=(",", ":")) + "\n")
            assert get(api, "/api/windows")[0] == 404  # drink-count has no windows
            assert get(api, "/nope")[0] == 404
            health.set(RESTORING, "catching up with the changelog")
            code, body, headers = get_with_headers(api, "/api/top")
            assert (code, headers["Retry-After"]) == (503, "1")
            assert json.loads(body)["error"] == "not serving the store: restoring (catching up with the changelog)"
            assert json.loads(get(api, "/api/status")[1])["role"] == "restoring"  # with its progress
            assert get(api, "/api/top?n=0")[0] == 400  # a bad query is refused first, whatever the phase
            for phase in (STARTING, FENCED):  # not serving: its store may stand still
                health.set(phase)
                assert get(api, "/api/counts")[0] == 503
            health.set(RESTORING, "catching up with the changelog as a standby")
            health.set(STANDBY, "following the changelog")
            api.metrics.restore_progress(0, 0, 9, 12)  # as its last follow of the changelog saw it
            api.owner = lambda: Owner("brew-1", 4, ("standby", "standby"))
            copy = json.loads(get(api, "/api/counts")[1])
            assert (copy["role"], copy["stale"], copy["standby_lag"]) == ("standby", True, 3)
            assert copy["tasks"]["0"] | {"keys": 2} == {"keys": 2, "seq": 3, "changelog_position": 9, "offsets": {},
                                                        "owner": None, "stale": True, "lag": 3, "state": "standby"}
            health.set(STARTING, "starting the query")
            health.set(ACTIVE, query_alive=lambda: False)
            assert get(api, "/api/counts")[0] == 503  # a dead query: /readyz says not ready too
        health.set(ACTIVE)
        assert get(api, "/api/counts")[0] == 503  # detached: the store may be closed now
        with serving(api, store):  # attached again (a store opened again): not whole until told
            assert get(api, "/api/counts")[0] == 503
            health.set(STOPPED)
            assert get(api, "/api/counts")[0] == 503
    finally:
        api.stop()


def test_metrics_are_served_as_before() -> None:
    health = Health()
    api = start(health)
    try:
        code, text = get(api, "/metrics")
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for family in text_string_to_metric_families(text) for s in family.samples}
        assert code == 200
        assert samples[("brewstream_role", (("pipeline", "drink-count"), ("role", "starting")))] == 1
        assert samples[("brewstream_batches_total", (("pipeline", "drink-count"),))] == 0
        code, only = get(api, "/metrics?name[]=brewstream_role")
        assert code == 200 and {f.name for f in text_string_to_metric_families(only)} == {"brewstream_role"}
    finally:
        api.stop()


def test_a_token_guards_metrics_and_the_api_but_not_the_probes(store: Store) -> None:
    health = Health()
    health.set(ACTIVE)
    api = start(health, TOKEN)
    try:
        with serving(api, store):
            api.whole(store)
            for path in ("/metrics", "/api/counts", "/api/status"):
                assert get(api, path)[0] == 401
                assert get(api, path, "wrong")[0] == 401
                assert get(api, path, TOKEN)[0] == 200
            assert get(api, "/healthz")[0] == 200 and get(api, "/readyz")[0] == 200
            for path in ("/metrics", "/api/counts", "/api/status", "/healthz", "/nope", "/api/top?n=x"):
                assert TOKEN not in get(api, path, TOKEN)[1]
    finally:
        api.stop()


def test_beyond_loopback_needs_a_token_or_insecure(tmp_path: Path) -> None:
    for host in ("127.0.0.1", "::1", "localhost", "[::1]"):
        assert bind_problem(host, False, False) is None
    for host in ("0.0.0.0", "::", "", "10.1.2.3", "brew.example.com"):
        problem = bind_problem(host, False, False)
        assert problem is not None and "--http-token-file" in problem and "--http-insecure" in problem
        assert bind_problem(host, True, False) is None and bind_problem(host, False, True) is None
    with pytest.raises(BrewError, match="without a token"):
        serve_http("0.0.0.0", 0, "drink-count", "orders", routes(), Metrics("drink-count"), Health())
    empty = tmp_path / "token"
    empty.write_text("\n")
    with pytest.raises(BrewError, match="must hold one token"):
        serve_http("0.0.0.0", 0, "drink-count", "orders", routes(), Metrics("drink-count"), Health(), empty)
    assert serve_http("127.0.0.1", None, "drink-count", "orders", routes(), Metrics("drink-count"), Health()) is None


def test_a_used_port_is_one_line() -> None:
    api = start(Health())
    try:
        with pytest.raises(BrewError, match=f"cannot serve HTTP on 127.0.0.1:{api.port} .*--http-port"):
            HttpApi("127.0.0.1", api.port, "drink-count", "orders", routes(), Metrics("drink-count"), Health())
    finally:
        api.stop()
