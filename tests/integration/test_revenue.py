"""The revenue join on a real broker and Spark: exact against an independent oracle through
a crash mid-transaction, a crash between the changelog and the store, a kill -9 and a lost
disk, with late and out-of-order price changes, a withdrawn drink, drinks never on the
menu, orders too late for the history, and menu records that must be refused.

The menu and the orders are built so that the result does not depend on how the daemon
batches them (``tests.support.revenue``); the oracle prices every order with the whole menu
history. Each refused order must reach the DLQ exactly once, with its cause.
"""

from __future__ import annotations

import json
import shutil
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote

from restorer.store import StateDir, Store
from sandbox.broker import free_port
from service.drills.process import ChildProcess
from service.revenue.state import decode_revenue_state
from tests.support.helpers import BREW, Pipeline, counts_json, create_topic, read_topic
from tests.support.http import get, get_json
from tests.support.revenue import (
    CLOCK,
    UNLISTED,
    Expected,
    MenuRow,
    OrderRow,
    S,
    Scenario,
    Sender,
    build,
    oracle,
    order_id,
    too_late_orders,
)
from topics.catalog import MENU_VERSIONS
from topics.clock import wait_until
from topics.kafka import end_offsets, topic_exists
from topics.menu_gen import menu_record

GRACE_S = 10
SPECIAL, BURST = "seasonal special", 60
RETENTION_S = 3 * 3600


class Revenue:
    def __init__(self, pipe: Pipeline, root: Path) -> None:
        self.pipe, self.root = pipe, root
        self.state, self.ckpt = root / "state" / "revenue", root / "ckpt"
        self.child: ChildProcess | None = None
        self.starts = 0

    def start(self, *more: str, **env: str) -> ChildProcess:
        self.starts += 1
        args = [BREW, "revenue", "--state-dir", str(self.state), "--checkpoint-dir", str(self.ckpt),
                "--trigger", "200ms", "--max-offsets-per-trigger", "400", "--grace", f"{GRACE_S}s",
                "--retention", f"{RETENTION_S}s", "--print", "0", "--menu-interval", "300ms", *more]
        self.child = ChildProcess(f"revenue-{self.starts}", args, self.root / f"revenue-{self.starts}.log",
                                  env={"KAFKA_BOOTSTRAP": self.pipe.conn.bootstrap, **self.pipe.env, **env},
                                  error=AssertionError)
        return self.child

    def applied(self) -> tuple[int, int]:
        """Orders applied (the store's next offsets, summed) and orders still waiting."""
        if not (StateDir(self.state).store_path / "CURRENT").exists():
            return 0, 0
        with Store(StateDir(self.state).store_path, read_only=True) as store:
            state = decode_revenue_state(store.items())
        return sum(state.reserved.next_offsets(self.pipe.topics.orders).values()), len(state.join.pending)


def orders_end(pipe: Pipeline) -> int:
    consumer = pipe.conn.consumer()
    try:
        return sum(high for _, high in end_offsets(consumer, pipe.topics.orders, [0, 1, 2]).values())
    finally:
        consumer.close()


def check_http(port: int, scenario: Scenario, expected: Expected) -> None:
    """``/api/revenue`` answers the oracle's sums; ``/api/menu/<drink>?at=`` the version that held."""
    answer = get_json(port, "/api/revenue?n=3")
    assert answer is not None and answer["revenue"] == expected.revenue and answer["by_shop"] == expected.by_shop
    ranked = sorted(expected.revenue, key=lambda d: (-expected.revenue[d], d))
    assert [d["name"] for d in answer["top_drinks"]] == ranked[:3]
    assert answer["orders"]["waiting"] == 0 and answer["orders"]["no_price"] == len(expected.no_price)
    for row in scenario.menu[::7]:
        at = row.t + S // 2  # between this version and the next, unless another came within the half second
        before = [m for m in scenario.menu if m.drink == row.drink and m.t <= at]
        held = [m for m in before if m.t == max(b.t for b in before)][-1]  # of two at one time, the later
        doc = get_json(port, f"/api/menu/{quote(row.drink)}?at={at / S:.9f}")
        assert doc is not None and doc["price_cents"] == held.price and doc["withdrawn"] == (held.price is None), doc
    assert (get_json(port, f"/api/menu/{quote(UNLISTED)}") or {}).get("reason") == "unknown drink"
    special = get_json(port, f"/api/menu/{quote(SPECIAL)}") or {}
    assert (special.get("versions_kept"), special.get("price_cents")) == (BURST, 400 + BURST - 1)  # the whole burst
    assert get(port, "/api/menu/latte?at=yesterday")[0] == 400


def test_revenue_is_exact_through_crashes_and_a_lost_disk(pipe: Pipeline, tmp_path: Path) -> None:
    start_ns = time.time_ns() - 3 * 3600 * S
    scenario = build(seed=5, n_orders=4000, start_ns=start_ns, grace_ns=GRACE_S * S)
    rows = scenario.sequence
    quarter = len(rows) // 4
    chunks = [rows[:quarter], rows[quarter:2 * quarter], rows[2 * quarter:3 * quarter], rows[3 * quarter:]]
    sender = Sender(pipe.conn, pipe.topics.orders, pipe.topics.menu)
    daemon = Revenue(pipe, tmp_path)

    def all_applied(timeout: float = 240) -> None:
        end = orders_end(pipe)
        wait_until(lambda: daemon.applied()[0] >= end, timeout, f"the store to apply all {end} orders",
                   give_up=lambda: daemon.child.exit_reason() if daemon.child else None)

    # 1. A crash mid-transaction, then one between the changelog's commit and the store's.
    for fault in ("mid-transaction@3", "after-changelog-commit@2"):
        child = daemon.start(BREWSTREAM_FAULT=fault)
        sender.send(chunks.pop(0))
        assert child.wait(240) == -signal.SIGKILL, child.text()[-2000:]
    # 2. A kill -9 once everything sent is applied, and the disk lost with it.
    child = daemon.start()
    sender.send(chunks.pop(0))
    all_applied()
    child.kill()
    shutil.rmtree(daemon.state)
    # 3. Restored, then killed in the middle of a burst of menu records' transaction (a drink
    # no order names: the burst changes no price of the oracle's).
    fault = tmp_path / "fault"
    fault.write_text("")
    child = daemon.start(BREWSTREAM_FAULT_FILE=str(fault))
    all_applied()
    fault.write_text("mid-transaction@1")
    for i in range(BURST):
        sender.menu(*menu_record(SPECIAL, 400 + i, start_ns + i * S)[:2], start_ns + i * S)
    assert child.wait(120) == -signal.SIGKILL, child.text()[-2000:]
    assert "the store is empty: restoring it from" in child.text()
    # 4. The rest, the refused menu records and the closing bell that releases every order.
    port = free_port()
    child = daemon.start("--http-port", str(port))
    sender.send(chunks.pop(0))
    for key, value, t in scenario.bad_menu:
        sender.menu(key, value, t)
    sender.send([MenuRow(CLOCK, scenario.end_t, 1)])
    all_applied()
    wait_until(lambda: daemon.applied()[1] == 0, 120, "every waiting order to be released",
               give_up=child.exit_reason)
    expected = oracle(scenario.menu, scenario.orders)
    check_http(port, scenario, expected)
    # 5. Orders older than the latest order's time minus the retention: too late, whatever the batching.
    late = too_late_orders(7, 25, max(o.t for o in scenario.orders) - RETENTION_S * S)
    sender.send(list[MenuRow | OrderRow](late))
    all_applied()
    child.terminate()
    assert child.wait(120) == 0, child.text()[-2000:]

    got = counts_json(pipe.conn, daemon.state)
    assert got["revenue"] == expected.revenue
    assert got["by_shop"] == expected.by_shop

    causes: Counter[tuple[str, str]] = Counter()
    for msg in read_topic(pipe.conn, pipe.topics.revenue_dlq):
        headers = dict(msg.headers() or [])
        cause = headers["error"].decode().split(":", 1)[0]
        source = headers["source-topic"].decode()
        where = f"menu {headers['source-partition'].decode()}@{headers['source-offset'].decode()}"
        causes[(cause, order_id(msg.value()) if source == pipe.topics.orders else where)] += 1
    assert all(n == 1 for n in causes.values()), [k for k, n in causes.items() if n > 1]  # exactly once
    assert {oid for cause, oid in causes if cause == "no price"} == expected.no_price
    assert {oid for cause, oid in causes if cause == "too late"} == {o.order_id for o in late}
    assert sum(1 for cause, _ in causes if cause == "bad menu record") == len(scenario.bad_menu)
    assert len(causes) == len(expected.no_price) + len(late) + len(scenario.bad_menu)
    # The CLI reads the revenue DLQ by its store's name: each refused record once.
    shown = json.loads(pipe.brew("dlq", "show", "--store", "revenue", "--json", check=True).stdout)
    assert sum(g["count"] for g in shown["reasons"]) == len(causes)
    exported = [json.loads(line) for line in
                pipe.brew("dlq", "export", "--store", "revenue", check=True).stdout.splitlines()]
    assert sorted((e["source_topic"], e["source_partition"], e["source_offset"]) for e in exported) == sorted(
        (h["source-topic"].decode(), int(h["source-partition"]), int(h["source-offset"]))
        for h in (dict(m.headers() or []) for m in read_topic(pipe.conn, pipe.topics.revenue_dlq)))
    assert json.loads(json.dumps(got["offsets"]))  # the offsets are printed

    # `status` shows how far the store has read the menu too, and a menu it has not read is lag.
    def status() -> dict[str, Any]:
        out = pipe.brew("status", "--store", "revenue", "--state-dir", str(daemon.state), "--json", "--max-lag", "0")
        return {"exit": out.returncode, **json.loads(out.stdout)}

    before = status()
    assert before["exit"] == 0 and before["lag"] == 0, before
    assert {p["lag"] for p in before["side_inputs"][pipe.topics.menu]} == {0}
    for i in range(3):
        sender.menu(*menu_record(SPECIAL, 900 + i, start_ns + i * S)[:2], start_ns + i * S)
    after = status()
    assert sum(p["lag"] for p in after["side_inputs"][pipe.topics.menu]) == after["lag"] == 3
    assert after["exit"] == 3  # past --max-lag: a menu nobody reads is unhealthy


def test_the_menu_topic_created_again_under_the_daemon_prices_nothing_wrong(pipe: Pipeline, tmp_path: Path) -> None:
    """Deleted and created again while the daemon runs, then filled again: one line says so,
    orders wait while it is gone, and every sum is the oracle's (a version read again
    changes nothing)."""
    scenario = build(seed=9, n_orders=1500, start_ns=time.time_ns() - 3 * 3600 * S, grace_ns=GRACE_S * S)
    rows = scenario.sequence
    half = len(rows) // 2
    sender = Sender(pipe.conn, pipe.topics.orders, pipe.topics.menu)
    daemon = Revenue(pipe, tmp_path)
    child = daemon.start()
    sender.send(rows[:half])
    end = orders_end(pipe)
    wait_until(lambda: daemon.applied()[0] >= end, 240, "the first half applied", give_up=child.exit_reason)

    admin = pipe.conn.admin()
    admin.delete_topics([pipe.topics.menu])[pipe.topics.menu].result()
    wait_until(lambda: not topic_exists(pipe.conn, pipe.topics.menu), 60, "the menu topic to be gone")
    create_topic(pipe.conn, pipe.topics.menu, 3, MENU_VERSIONS)
    sender.send([r for r in rows[:half] if isinstance(r, MenuRow)])
    child.wait_for("was deleted and created again", 60)
    sender.send([*rows[half:], MenuRow(CLOCK, scenario.end_t, 1)])
    end = orders_end(pipe)
    wait_until(lambda: daemon.applied() == (end, 0), 240, "every order applied and released",
               give_up=child.exit_reason)
    child.terminate()
    assert child.wait(120) == 0, child.text()[-2000:]
    assert child.text().count("was deleted and created again") == 1

    expected = oracle(scenario.menu, scenario.orders)
    got = counts_json(pipe.conn, daemon.state)
    assert (got["revenue"], got["by_shop"]) == (expected.revenue, expected.by_shop)
    refused = [order_id(m.value()) for m in read_topic(pipe.conn, pipe.topics.revenue_dlq)]
    assert sorted(refused) == sorted(expected.no_price)
