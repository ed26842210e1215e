"""The daemon's HTTP port on a real daemon: the store's JSON API against `brewstream counts`
and an oracle at every answer's offsets, and the probes through a forced restore."""

from __future__ import annotations

import json
import shutil
import signal
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from restorer.store import Store
from sandbox.broker import free_port
from tests.support.corpus import BAD_ORDERS
from tests.support.drink_count import make_orders, run_available_now
from tests.support.helpers import Pipeline, counts_json, oracle, order_bytes, produce
from tests.support.http import ask, daemon_alive, get, get_json
from topics.clock import wait_until
from topics.partitioner import murmur2_partition

pytestmark = pytest.mark.spark






class Poller:
    """Asks ``path`` over and over on a thread of its own and keeps every answer (and the
    Retry-After of every 503)."""

    def __init__(self, port: int, paths: list[str]) -> None:
        self.port, self.paths = port, paths
        self.answers: list[tuple[str, int, str]] = []
        self.retry_after: list[tuple[str, str | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for path in self.paths:
                status, body, headers = ask(self.port, path)
                self.answers.append((path, status, body))
                if status == 503:
                    self.retry_after.append((path, headers.get("Retry-After")))
            self._stop.wait(0.02)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)




def test_the_api_answers_whole_batches_equal_to_counts(pipe: Pipeline, tmp_path: Path) -> None:
    port, log, state = free_port(), tmp_path / "daemon.log", tmp_path / "s"
    daemon = pipe.spawn("run", "--state-dir", str(state), "--checkpoint-dir", str(tmp_path / "c"), "--flush", "1s",
                        "--trigger", "200ms", "--http-port", str(port), log=log)
    try:
        wait_until(lambda: get(port, "/readyz")[0] == 200, 240, "/readyz to say ready",
                   give_up=daemon_alive(daemon, log))
        poller = Poller(port, ["/api/counts"])
        # Four feeds, each counted by one or more batches while the poller reads: every answer
        # must be exactly the oracle of the orders below the offsets it names.
        orders = make_orders(1200, seed=40)
        where: dict[tuple[int, int], dict[str, Any]] = {}
        for chunk in range(4):
            part = orders[chunk * 300:(chunk + 1) * 300]
            positions = produce(pipe.conn, pipe.topics.orders, [order_bytes(o) for o in part])
            where.update(zip(positions, part, strict=True))
            produce(pipe.conn, pipe.topics.orders, [(b"bad", BAD_ORDERS[chunk][1])])
            wait_until(lambda n=chunk + 1: (doc := get_json(port, "/api/counts"))
                       and (doc["processed_orders"], doc["bad_orders"]) == (n * 300, n), 180,
                       f"the API to show {(chunk + 1) * 300} orders", give_up=daemon_alive(daemon, log))
        poller.stop()

        answers = [json.loads(body) for _, status, body in poller.answers if status == 200]
        assert len({a["seq"] for a in answers}) >= 4, "the poller saw too few batches to prove anything"
        for answer in answers:
            offsets = {int(p): o for p, o in answer["offsets"].get(pipe.topics.orders, {}).items()}
            below = [o for (p, off), o in where.items() if off < offsets.get(p, 0)]
            assert answer["counts"] == oracle(below), f"answer at seq {answer['seq']} is not a whole batch"
            assert answer["processed_orders"] == len(below)
        assert [a["seq"] for a in answers] == sorted(a["seq"] for a in answers)

        # Idle now: the API and `brewstream counts --json` read the same batch.
        api = get_json(port, "/api/counts")
        assert api is not None
        printed = counts_json(pipe.conn, state)
        assert (printed["counts"], printed["offsets"]) == (api["counts"], api["offsets"])
        assert {t: {k: v for k, v in task.items() if k != "counts"} for t, task in printed["tasks"].items()} == \
            {t: {k: v for k, v in task.items() if k not in ("owner", "generation", "state")}
             for t, task in api["tasks"].items()}
        # Every task runs here, and `status` names this instance its owner, from its announcements.
        assert {task["state"] for task in api["tasks"].values()} == {"running"}
        running = json.loads(pipe.brew("status", "--state-dir", str(state), "--json", check=True).stdout)
        assert {(t["owner"], t["generation"], t["role"]) for t in running["tasks"]} == \
            {(api["instance"], api["generation"], "running")}
        assert api["counts"] == oracle(orders) and api["bad_orders"] == 4
        assert (api["pipeline"], api["role"]) == ("drink-count", "active")
        top = get_json(port, "/api/top?n=3")
        assert top is not None and top["seq"] == api["seq"] and top["offsets"] == api["offsets"]
        ranked = sorted(oracle(orders).items(), key=lambda kv: (-kv[1], kv[0]))[:3]
        assert [(r["drink"], r["count"]) for r in top["top"]] == ranked
        assert top["tasks"] == api["tasks"]  # the tasks it was merged from, labelled alike
        status = wait_until(lambda: (doc := get_json(port, "/api/status")) and doc["lag"] == 0 and doc, 30,
                            "/api/status to show no lag")
        assert status["seq"] == api["seq"] and status["input_lag"] == {"0": 0, "1": 0, "2": 0}

        assert get(port, "/healthz") == (200, "alive: active\n")
        assert get(port, "/api/top?n=many") == (400, '{"error":"n must be a whole number from 1 to 10000, '
                                                      'not \'many\'"}\n')
        assert get(port, "/api/windows")[0] == 404
        assert "brewstream_role{pipeline=\"drink-count\",role=\"active\"} 1.0" in get(port, "/metrics")[1]
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(120) == 0
        # Stopped: its tasks closed, and nobody owns them (a stopped instance commits nothing).
        stopped = json.loads(pipe.brew("status", "--state-dir", str(state), "--json", check=True).stdout)
        assert {(t["owner"], t["role"]) for t in stopped["tasks"]} == {(None, "closed")}
    finally:
        if daemon.poll() is None:
            daemon.kill()


def test_readyz_is_false_during_a_forced_restore_and_true_after(pipe: Pipeline, spark: Any,
                                                                 dirs: dict[str, Path], tmp_path: Path) -> None:
    """Nothing is served as the truth before the store is whole: `counts` refuses an empty
    store whose changelog holds state, and from the moment the port answers every 200 of
    /api/counts and /api/top is the committed state, every 503 says when to come back."""
    # 100,000 drinks: a changelog whose restore takes long enough to be seen from outside.
    orders = [{"order_id": f"o-{o}", "shop_id": "shop-01",
               "items": [{"drink": f"d{o:03d}-{i:03d}", "quantity": 1 + i % 3} for i in range(500)]}
              for o in range(200)]
    produce(pipe.conn, pipe.topics.orders, [order_bytes(o) for o in orders])
    assert run_available_now(pipe, spark, dirs) == 0
    shutil.rmtree(dirs["state"])  # the disk is lost: the next start restores the whole store
    shutil.rmtree(dirs["ckpt"])

    # What a daemon leaves the moment it opens the store on the new disk, and throughout its
    # restore (a restore writes the store in one batch at its end): an empty store.
    dirs["state"].mkdir(parents=True)
    Store(dirs["state"] / "store").close()
    empty = pipe.brew("counts", "--state-dir", str(dirs["state"]), "--json")
    assert empty.returncode == 1 and empty.stdout == "", empty.stdout
    assert empty.stderr.startswith("brewstream: error: the store in ") and empty.stderr.count("\n") == 1
    assert f"is empty but changelog {pipe.topics.changelog} holds records it has not applied" in empty.stderr
    assert "brewstream restore --state-dir" in empty.stderr
    blind = pipe.brew("counts", "--state-dir", str(dirs["state"]), "--bootstrap", f"127.0.0.1:{free_port()}")
    assert blind.returncode == 1 and blind.stdout == "" and "cannot be told" in blind.stderr, blind.stderr

    ranked = sorted(oracle(orders).items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    port, log = free_port(), tmp_path / "daemon.log"
    daemon = pipe.spawn("run", "--state-dir", str(dirs["state"]), "--checkpoint-dir", str(dirs["ckpt"]),
                        "--http-port", str(port), log=log)
    poller = Poller(port, ["/readyz", "/api/status", "/api/counts", "/api/top?n=5",
                           "/metrics?name[]=brewstream_input_lag_records"])
    try:
        ready = (200, "ready: active\n")
        # Waits on the poller's own answers: a probe of the test's own could see the
        # change before the poller asks again.
        wait_until(lambda: any((path, status, body) == ("/readyz", *ready) for path, status, body in
                               list(poller.answers)), 240, "/readyz to say ready", give_up=daemon_alive(daemon, log))
        poller.stop()
        readyz = [(status, body) for path, status, body in poller.answers if path == "/readyz" and status]
        first = readyz.index(ready)
        assert (503, "not ready: restoring (catching up with the changelog)\n") in readyz[:first]
        assert all(status == 503 for status, _ in readyz[:first])
        assert all(answer == ready for answer in readyz[first:])  # and it stays ready
        during = [json.loads(body) for path, status, body in poller.answers
                  if path == "/api/status" and status == 200 and json.loads(body)["role"] == "restoring"]
        assert during, "/api/status never answered during the restore"
        restored = get_json(port, "/api/counts")
        assert restored is not None and restored["counts"] == oracle(orders)

        # Every answer of the data paths, from the port's first: the whole committed state, or a 503.
        data = [(path, status, body) for path, status, body in poller.answers if path.startswith("/api/") and
                path != "/api/status" and status]
        assert {status for _, status, _ in data} <= {200, 503}
        assert any(path == "/api/counts" and status == 503 for path, status, _ in data), "no refusal seen"
        for path, status, body in data:
            if status == 200:
                doc = json.loads(body)
                assert (doc["role"], doc["seq"], doc["offsets"]) == ("active", restored["seq"], restored["offsets"])
                if path == "/api/counts":
                    assert doc["counts"] == restored["counts"]
                else:
                    assert [(r["drink"], r["count"]) for r in doc["top"]] == ranked
            else:
                assert json.loads(body)["error"].startswith("not serving the store: ")
        assert poller.retry_after and all(after == "1" for _, after in poller.retry_after), poller.retry_after
        lags = [float(line.split()[-1]) for path, status, body in poller.answers if path.startswith("/metrics")
                for line in body.splitlines() if line.startswith("brewstream_input_lag_records{")]
        assert all(lag == 0 for lag in lags), "an input lag measured against a store not yet restored"
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(120) == 0
    finally:
        poller.stop()
        if daemon.poll() is None:
            daemon.kill()


def test_the_windows_api_answers_the_open_windows_of_the_running_daemon(pipe: Pipeline, tmp_path: Path) -> None:
    from service.windows.state import decode_windows_state
    from tests.support.windows import at, iso, send

    port, log, state = free_port(), tmp_path / "daemon.log", tmp_path / "s"
    daemon = pipe.spawn("windows", "--state-dir", str(state), "--checkpoint-dir", str(tmp_path / "c"),
                        "--from", "earliest", "--session-gap", "30s", "--watermark-delay", "0",
                        "--http-port", str(port), log=log)
    s = 10**9
    try:
        wait_until(lambda: get(port, "/readyz")[0] == 200, 240, "/readyz to say ready",
                   give_up=daemon_alive(daemon, log))
        # Three sessions, all open: the watermark (the latest event time, delay 0) is before their ends.
        base = at("10:00")
        send(pipe, [("a", base), ("b", base + 5 * s), ("a", base + 20 * s), ("c", base + 25 * s)])
        every = wait_until(lambda: (doc := get_json(port, "/api/windows")) and len(doc["windows"]) == 3 and doc,
                           120, "three open sessions", give_up=daemon_alive(daemon, log))
        assert every["watermark"] == iso(base + 25 * s)
        assert every["offsets"] == {pipe.topics.events: {"0": 4, "1": 0, "2": 0}}
        assert [(w["key"], w["start"], w["end"], w["count"]) for w in every["windows"]] == [
            ("a", iso(base), iso(base + 50 * s), 2), ("b", iso(base + 5 * s), iso(base + 35 * s), 1),
            ("c", iso(base + 25 * s), iso(base + 55 * s), 1)]
        # Each task labelled with its owner and its open windows: a shop's sessions in its own.
        tasks = every["tasks"]
        assert {(t["owner"], t["state"]) for t in tasks.values()} == {(every["instance"], "running")}
        assert {int(t): task["keys"] for t, task in tasks.items() if task["keys"]} == \
            dict(Counter(murmur2_partition(shop, 3) for shop in (b"a", b"b", b"c")))
        one = get_json(port, f"/api/windows?key=a&from={iso(base)}")
        assert one is not None and [w["key"] for w in one["windows"]] == ["a"] and one["seq"] == every["seq"]
        later = get_json(port, f"/api/windows?from={(base + 51 * s) // s}")  # unix seconds work too
        assert later is not None and [w["key"] for w in later["windows"]] == ["c"]
        assert get(port, "/api/windows?from=2026-11-22T10:00:00")[0] == 400  # a time without its zone
        assert get(port, "/api/counts")[0] == 404  # the windows store has no drink counts
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(120) == 0
        from restorer.store import Store

        with Store(state / "store", read_only=True) as store:
            stored = decode_windows_state(store.items())
        assert sorted((w.key, w.count) for w in stored.windows.values()) == [("a", 2), ("b", 1), ("c", 1)]
    finally:
        if daemon.poll() is None:
            daemon.kill()
