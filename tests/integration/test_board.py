"""The live board in headless Chromium, against the real daemons on a real broker."""

from __future__ import annotations

import json
import re
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Producer
from playwright.sync_api import BrowserContext, Page, expect, sync_playwright

from restorer.codec import encode_u64, meta_key
from service.revenue.state import PRICED
from service.revenue.table import money
from tests.support.board import board, stop
from tests.support.helpers import Pipeline, order_bytes, produce
from tests.support.revenue import CLOCK, MenuRow, OrderRow, S, Sender, build, oracle
from topics.clock import iso_ns
from topics.event_time import encode_event_time

pytestmark = pytest.mark.spark

CHROMIUM = "/usr/bin/chromium"
# No sandbox (tests may run as root) and nothing that reaches beyond 127.0.0.1.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# Spark takes a while to start a daemon on a small, busy machine.
DAEMON_READY_MS = 180_000
UPDATE_MS = 30_000


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserContext]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium package")
    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM, headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1200, "height": 800})
        try:
            yield ctx
        finally:
            ctx.close()


@pytest.fixture
def page(browser: BrowserContext) -> Iterator[Page]:
    p = browser.new_page()
    try:
        yield p
    finally:
        p.close()








@contextmanager
def explained(*logs: Path) -> Iterator[None]:
    """A failed wait says what the processes under test printed."""
    try:
        yield
    except Exception as exc:
        tails = "\n".join(f"--- {p.name}:\n{p.read_text(errors='replace')[-2000:]}" for p in logs if p.exists())
        raise AssertionError(f"{exc}\n{tails}") from exc


def api_state(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url + "api/state", timeout=10) as resp:
        return json.loads(resp.read())


def test_a_new_drink_appears_on_the_page_without_a_reload(pipe: Pipeline, page: Page, tmp_path: Path) -> None:
    logs = tmp_path / "daemon.log", tmp_path / "board.log"
    shop = "shop-01"
    warmup = [{"order_id": f"w-{i}", "shop_id": shop, "items": [{"drink": "latte", "quantity": 2}]}
              for i in range(20)]
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in warmup))
    daemon = pipe.spawn("run", "--state-dir", str(tmp_path / "state"), "--checkpoint-dir", str(tmp_path / "ckpt"),
                        "--flush", "1s", log=logs[0])
    try:
        with board(pipe, tmp_path / "no-windows", logs[1]) as url, explained(*logs):
            page.goto(url)
            expect(page.locator("#chart-note")).to_contain_text("no data yet")
            latte = page.locator('#top li[data-drink="latte"] .count')
            expect(latte).to_have_text("40", timeout=DAEMON_READY_MS)
            expect(page.locator("#status")).to_have_class("live")
            page.evaluate("window.sameDocument = true")

            drink = f"board-test-{uuid.uuid4().hex[:8]}"
            order = {"order_id": "big-1", "shop_id": shop, "items": [{"drink": drink, "quantity": 4321}]}
            produce(pipe.conn, pipe.topics.orders, [order_bytes(order)])

            row = page.locator(f'#top li[data-drink="{drink}"]')
            expect(row.locator(".count")).to_have_text("4,321", timeout=UPDATE_MS)
            expect(row.locator(".rank")).to_have_text("1")
            expect(row.locator(".name")).to_have_text(drink)
            expect(page.locator("#processed")).to_have_text("21")
            assert page.evaluate("window.sameDocument") is True, "the page was reloaded"
            snapshot = api_state(url)["snapshot"]
            assert isinstance(snapshot, dict) and snapshot["top"][0] == {"rank": 1, "drink": drink, "count": 4321}
    finally:
        assert stop(daemon) == 0, logs[0].read_text()[-2000:]


def send_events(pipe: Pipeline, times_ns: list[int]) -> None:
    producer = Producer({"bootstrap.servers": pipe.conn.bootstrap, "enable.idempotence": True})
    for t in times_ns:
        value = json.dumps({"shop_id": "shop-01", "drink": "mocha", "amount": 3.5}).encode()
        producer.produce(pipe.topics.events, key=b"shop-01", value=value, partition=0,
                         headers=[("event-time", encode_event_time(t))])
    assert producer.flush(10) == 0


def test_the_chart_draws_event_and_processing_time_bars(pipe: Pipeline, page: Page, tmp_path: Path) -> None:
    logs = tmp_path / "windows.log", tmp_path / "board.log"
    s, minute = 10**9, 60 * 10**9
    base = time.time_ns() - 3 * minute
    base -= base % minute
    # 5 events in one minute, 3 in the next; the last one moves the watermark (no delay)
    # past both, so they close and reach the results topic.
    send_events(pipe, [base + i * s for i in range(1, 6)] + [base + minute + i * s for i in range(1, 4)]
                + [base + 150 * s])
    state = tmp_path / "windows-state"
    with board(pipe, state, logs[1]) as url, explained(*logs):
        page.goto(url)
        expect(page.locator("#chart-note")).to_contain_text("the windows pipeline has no data yet")
        daemon = pipe.spawn("windows", "--state-dir", str(state), "--checkpoint-dir", str(tmp_path / "ckpt"),
                            "--from", "earliest", "--window", "1m", "--watermark-delay", "0", "--print", "1s",
                            log=logs[0])
        try:
            expect(page.locator('#chart rect.bar-event[data-count="5"]')).to_have_count(1, timeout=DAEMON_READY_MS)
            expect(page.locator('#chart rect.bar-event[data-count="3"]')).to_have_count(1)
            page.wait_for_function(
                "[...document.querySelectorAll('#chart rect.bar-processing')]"
                ".reduce((n, r) => n + Number(r.dataset.count), 0) === 9", timeout=UPDATE_MS)
            heights = page.eval_on_selector_all(
                "#chart rect.bar-event", "rs => rs.map(r => [Number(r.dataset.count), r.getBBox().height])")
            tall = dict(heights)
            assert tall[5] > tall[3] > 0 and tall[0] == 0, heights
            expect(page.locator("#chart-note")).to_have_text("")

            rows = page.locator("#windows tbody tr")
            expect(rows).to_have_count(2, timeout=UPDATE_MS)
            expect(rows.nth(0).locator("td").nth(2)).to_have_text("3")
            expect(rows.nth(1).locator("td").nth(2)).to_have_text("5")
            expect(rows.nth(0)).to_contain_text("final")
        finally:
            assert stop(daemon) == 0, logs[0].read_text()[-2000:]


def test_the_chart_is_not_drawn_from_a_windows_store_before_its_restore(pipe: Pipeline, tmp_path: Path) -> None:
    """A lost disk under the windows daemon: its new store is empty while the changelog holds
    its state. The chart says so instead of drawing zeros."""
    from restorer.store import Store

    produce(pipe.conn, pipe.topics.windows_changelog, [(b"\xffmeta\x00total", (7).to_bytes(8, "big"))])
    state = tmp_path / "windows-state"
    state.mkdir()
    Store(state / "store").close()  # what the daemon opens before it restores
    with board(pipe, state, tmp_path / "board.log") as url:
        chart = api_state(url)["chart"]
    assert isinstance(chart, dict) and chart["available"] is False, chart
    assert f"is empty but changelog {pipe.topics.windows_changelog} holds records it has not applied" in \
        str(chart["message"]), chart


def ranked(sums: dict[str, int]) -> list[tuple[str, int]]:
    return sorted(sums.items(), key=lambda kv: (-kv[1], kv[0]))


def test_the_revenue_panel_shows_the_oracles_sums(pipe: Pipeline, page: Page, tmp_path: Path) -> None:
    """A real ``brewstream revenue --available-now`` over a menu with price changes, a drink
    withdrawn and one never listed: the panel shows the oracle's top drinks and shops as
    money, the orders priced and refused; before the store exists it says so, with no figure.
    A shop named in markup is shown as the text it is."""
    logs = tmp_path / "revenue.log", tmp_path / "board.log"
    scenario = build(seed=11, n_orders=150, start_ns=time.time_ns() - 3 * 3600 * S, grace_ns=10 * S, span_s=120)
    hostile = OrderRow("hostile-1", '<b class="injected">corner & co</b>', scenario.orders[0].t, (("latte", 400),))
    orders = [*scenario.orders, hostile]
    Sender(pipe.conn, pipe.topics.orders, pipe.topics.menu).send(
        [*scenario.sequence, hostile, MenuRow(CLOCK, scenario.end_t, 1)])  # the clock releases every order
    expected = oracle(scenario.menu, orders)
    priced = len(orders) - len(expected.no_price)
    total = sum(expected.revenue.values())
    state = tmp_path / "revenue-state"
    with board(pipe, tmp_path / "no-windows", logs[1], revenue_state=state) as url, explained(*logs):
        page.goto(url)
        expect(page.locator("#revenue-note")).to_contain_text("the revenue pipeline has no data yet")
        expect(page.locator("#revenue-body")).to_be_hidden()
        daemon = pipe.spawn("revenue", "--available-now", "--state-dir", str(state), "--checkpoint-dir",
                            str(tmp_path / "ckpt"), "--grace", "10s", "--print", "0", log=logs[0])
        try:
            assert daemon.wait(DAEMON_READY_MS / 1000) == 0
        finally:
            stop(daemon.proc)

        (top_drink, top_cents), (top_shop, _) = ranked(expected.revenue)[0], ranked(expected.by_shop)[0]
        first = page.locator("#revenue-drinks tbody tr").first
        expect(first.locator(".name")).to_have_text(top_drink, timeout=UPDATE_MS)
        expect(first.locator(".money")).to_have_text(money(top_cents, "EUR"))
        expect(page.locator("#revenue-note")).to_have_text("")
        expect(page.locator("#revenue-total")).to_have_text(money(total, "EUR"))
        expect(page.locator("#revenue-priced")).to_have_text(f"{priced:,}")
        expect(page.locator("#revenue-no-price")).to_have_text(str(len(expected.no_price)))
        expect(page.locator("#revenue-too-late")).to_have_text("0")
        expect(page.locator("#revenue-waiting")).to_have_text("0")
        expect(page.locator("#revenue-menu")).to_have_text(re.compile(r"^\d\d:\d\d:\d\d$"))
        assert top_shop == hostile.shop, ranked(expected.by_shop)[:2]  # 400 lattes outsell any other shop
        expect(page.locator("#revenue-shops tbody tr").first.locator(".name")).to_have_text(hostile.shop)
        expect(page.locator("#revenue .injected")).to_have_count(0)

        rev = api_state(url)["revenue"]
    assert isinstance(rev, dict) and rev["available"] is True, rev
    assert [(r["name"], r["cents"]) for r in rev["top_drinks"]] == ranked(expected.revenue)[:8]
    assert [(r["name"], r["cents"]) for r in rev["top_shops"]] == ranked(expected.by_shop)[:8]
    assert rev["total_cents"] == total == sum(expected.by_shop.values())
    assert rev["orders"] == {"priced": priced, "no_price": len(expected.no_price), "too_late": 0, "waiting": 0}
    assert rev["menu_watermark"] == iso_ns(scenario.end_t)


def test_the_revenue_panel_is_not_shown_from_a_store_before_its_restore(pipe: Pipeline, tmp_path: Path) -> None:
    """A lost disk under the revenue daemon: its new store is empty while the changelog holds
    its state. The panel says so instead of showing zeros."""
    from restorer.store import Store

    produce(pipe.conn, pipe.topics.revenue_changelog, [(meta_key(PRICED), encode_u64(7))])
    state = tmp_path / "revenue-state"
    state.mkdir()
    Store(state / "store").close()  # what the daemon opens before it restores
    with board(pipe, tmp_path / "no-windows", tmp_path / "board.log", revenue_state=state) as url:
        rev = api_state(url)["revenue"]
    assert isinstance(rev, dict) and rev["available"] is False and "orders" not in rev, rev
    assert f"is empty but changelog {pipe.topics.revenue_changelog} holds records it has not applied" in \
        str(rev["message"]), rev
