"""A crowd at the daemon's HTTP port and at the board's, on real sockets to 127.0.0.1: 2,000
requests at once are all answered (never a reset or a timeout) with the counts exact, and
hundreds of slow clients (idle, or a byte a second) neither hold the port nor delay a probe
by a second; both processes still stop cleanly on SIGTERM with the slow clients connected."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from sandbox.broker import free_port
from service.ops.httpd import HEAD_TIMEOUT_S
from service.webboard.server import page_bytes
from tests.support.board import board
from tests.support.crowd import Outcome, Prober, SlowClients, crowd, hold_streams, latency, loop_in_thread, tally, until
from tests.support.drink_count import make_orders
from tests.support.helpers import Pipeline, oracle, order_bytes, produce
from tests.support.http import daemon_alive, get_json
from topics.clock import wait_until

T = TypeVar("T")

CROWD = 2000
SLOW_IDLE = SLOW_TRICKLE = 150
PROBE_BUDGET_S = 1.0
# Far beyond any answer: a request still unanswered then counts as timed out.
CLIENT_TIMEOUT_S = 60.0


def run(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T], timeout: float) -> T:
    return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)


def hold_slow_clients(loop: asyncio.AbstractEventLoop, port: int, probe_path: str) -> tuple[SlowClients, Prober]:
    """Slow clients connected and held until the server has let each go at least once (its
    head deadline), with a prober timing ``probe_path`` all along."""
    slow = SlowClients(port, SLOW_IDLE, SLOW_TRICKLE)
    loop.call_soon_threadsafe(slow.start)
    wait_until(lambda: slow.open >= SLOW_IDLE + SLOW_TRICKLE, 30, "the slow clients to connect")
    with Prober(port, probe_path) as prober:
        wait_until(lambda: len(slow.cut) >= SLOW_IDLE + SLOW_TRICKLE and len(prober.outcomes) >= 50,
                   HEAD_TIMEOUT_S + 60, "the server to let every slow client go")
    return slow, prober


def check_probes(prober: Prober, slow: SlowClients, what: str) -> None:
    print(f"{what}: probes {dict(tally(prober.outcomes))} {latency(prober.outcomes)}; slow clients let go after "
          f"{latency([Outcome('', 0, None, s) for s in slow.cut])}")
    assert {o.status for o in prober.outcomes} == {200}, tally(prober.outcomes)
    slowest = max(o.seconds for o in prober.outcomes)
    assert slowest < PROBE_BUDGET_S, f"a probe took {slowest:.2f}s while slow clients held connections"
    assert max(slow.cut) < HEAD_TIMEOUT_S + 10, "a slow client held its connection past the head deadline"


def report(what: str, outcomes: list[Outcome], paths: list[str]) -> None:
    print(f"{what}: {dict(tally(outcomes))}; " + "; ".join(
        f"{p} {latency([o for o in outcomes if o.path == p])}" for p in paths))


@pytest.mark.spark
def test_a_crowd_and_slow_clients_at_the_daemon_port(pipe: Pipeline, tmp_path: Path) -> None:
    orders = make_orders(300, seed=41)
    produce(pipe.conn, pipe.topics.orders, [order_bytes(o) for o in orders])
    port, log = free_port(), tmp_path / "daemon.log"
    daemon = pipe.spawn("run", "--state-dir", str(tmp_path / "s"), "--checkpoint-dir", str(tmp_path / "c"),
                        "--trigger", "200ms", "--http-port", str(port), log=log)
    try:
        wait_until(lambda: (doc := get_json(port, "/api/counts")) and doc["processed_orders"] == len(orders), 240,
                   "the API to show every order", give_up=daemon_alive(daemon, log))
        started = time.monotonic()
        with loop_in_thread() as loop:
            slow, alone = hold_slow_clients(loop, port, "/readyz")
            check_probes(alone, slow, "slow clients alone")

            paths = ["/readyz", "/metrics", "/api/counts"]
            with Prober(port, "/readyz") as during:
                outcomes = run(loop, crowd(port, paths, CROWD, CLIENT_TIMEOUT_S), CLIENT_TIMEOUT_S + 30)
            report("the crowd", outcomes, paths)
            print(f"probes during the crowd: {dict(tally(during.outcomes))} {latency(during.outcomes)}")
            assert tally(outcomes) == {"200": CROWD}, "every request answered, none reset or timed out"
            expected = oracle(orders)
            for o in outcomes:
                if o.path == "/readyz":
                    assert o.body == b"ready: active\n"
                elif o.path == "/api/counts":
                    doc = json.loads(o.body)
                    assert (doc["counts"], doc["processed_orders"]) == (expected, len(orders))
                else:
                    assert b'brewstream_role{pipeline="drink-count",role="active"} 1.0' in o.body
            assert {o.status for o in during.outcomes} == {200}

            # SIGTERM with the slow clients still connected: a clean stop all the same.
            assert slow.open > 0
            daemon.send_signal(signal.SIGTERM)
            assert daemon.wait(120) == 0, log.read_text()[-2000:]
            run(loop, slow.stop(), 30)
        print(f"from the daemon ready to its clean stop: {time.monotonic() - started:.1f}s")
    finally:
        if daemon.poll() is None:
            daemon.kill()


def test_a_crowd_and_slow_clients_at_the_board(pipe: Pipeline, tmp_path: Path) -> None:
    log = tmp_path / "board.log"
    with loop_in_thread() as loop:
        with board(pipe, tmp_path / "no-windows", log) as url:
            port = int(url.rstrip("/").rsplit(":", 1)[1])
            slow, alone = hold_slow_clients(loop, port, "/api/state")
            check_probes(alone, slow, "slow clients alone")

            # Pages that stay open through the crowd, each to see three versions (one a second).
            streams = asyncio.run_coroutine_threadsafe(hold_streams(port, 200, 3, CLIENT_TIMEOUT_S), loop)
            paths = ["/", "/api/state", "/events"]
            with Prober(port, "/api/state") as during:
                outcomes = run(loop, crowd(port, paths, CROWD, CLIENT_TIMEOUT_S), CLIENT_TIMEOUT_S + 30)
            report("the crowd", outcomes, paths)
            print(f"/api/state probes during the crowd: {dict(tally(during.outcomes))} {latency(during.outcomes)}")
            assert tally(outcomes) == {"200": CROWD}, "every request answered, none reset or timed out"
            page = page_bytes()
            for o in outcomes:
                if o.path == "/":
                    assert o.body == page
                elif o.path == "/api/state":
                    assert "snapshot" in json.loads(o.body)
                else:
                    assert o.headers["content-type"] == "text/event-stream"
                    assert "snapshot" in json.loads(o.body.partition(b"data: ")[2].partition(b"\n\n")[0])
            assert {o.status for o in during.outcomes} == {200}
            assert run(loop, until(streams.done, CLIENT_TIMEOUT_S, "the open pages' events"), CLIENT_TIMEOUT_S + 5) \
                is None and streams.result() == [3] * 200, "an open page missed the state's new versions"
            assert slow.open > 0  # `board` stops it with SIGTERM, and checks it exits 0, with them connected
        run(loop, slow.stop(), 30)
