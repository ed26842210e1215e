"""The board's revenue panel: what it shows of a real revenue store (RocksDB in a temp dir),
and that a missing, unreadable or refused store shows its reason and no figure."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from restorer.codec import Entry, encode_u64, meta_key
from restorer.store import Store
from service.revenue.join import Order
from service.revenue.state import (
    MENU_TIME,
    NO_PRICE,
    PRICED,
    TOO_LATE,
    RevenueState,
    drink_key,
    encode_sum,
    encode_waiting,
    shop_key,
    waiting_key,
)
from service.revenue.table import money
from service.webboard.feed import FeedView
from service.webboard.revenue_panel import RevenuePanel, panel_doc
from service.webboard.state import Hub, Refresher
from topics.clock import iso_ns
from topics.errors import BrewError

MENU_NS = 1_795_000_000_123_000_000
HOSTILE = '<img src=x onerror="alert(1)">'  # a name is data: it must come out as it went in


def write_store(state_dir: Path, entries: list[Entry]) -> None:
    with Store(state_dir / "store") as store:
        store.commit(entries)


def sums(drinks: dict[str, int], shops: dict[str, int]) -> list[Entry]:
    out: list[Entry] = [(drink_key(d), encode_sum(c)) for d, c in drinks.items()]
    return out + [(shop_key(s), encode_sum(c)) for s, c in shops.items()]


def test_the_panel_shows_a_stores_top_sums_as_money_and_its_orders(tmp_path: Path) -> None:
    drinks = {"latte": 123_456, "mocha": 99, HOSTILE: 5_000, "chai": 5_000}
    shops = {"shop-01": 100_000, "shop-02": 33_555}
    waiting = Order(1, 42, MENU_NS - 1, "shop-03", (("latte", 2),))
    write_store(tmp_path, [
        *sums(drinks, shops), (meta_key(PRICED), encode_u64(17)), (meta_key(NO_PRICE), encode_u64(3)),
        (meta_key(TOO_LATE), encode_u64(2)),
        (meta_key(MENU_TIME), encode_u64(MENU_NS)), (waiting_key(*waiting.position), encode_waiting(waiting))])

    doc = RevenuePanel(tmp_path, "EUR", rows=3).read()

    assert doc["available"] is True and doc["message"] is None
    assert doc["top_drinks"] == [{"name": "latte", "cents": 123_456, "money": "1,234.56 EUR"},
                                 {"name": HOSTILE, "cents": 5_000, "money": "50.00 EUR"},  # ties: by name
                                 {"name": "chai", "cents": 5_000, "money": "50.00 EUR"}]
    assert [s["name"] for s in doc["top_shops"]] == ["shop-01", "shop-02"]
    assert doc["orders"] == {"priced": 17, "no_price": 3, "too_late": 2, "waiting": 1}
    assert doc["menu_watermark"] == iso_ns(MENU_NS) == "2026-11-18T11:06:40.123Z"
    assert (doc["total_cents"], doc["total"]) == (133_555, "1,335.55 EUR")
    assert (doc["drinks"], doc["shops"], doc["currency"]) == (4, 2, "EUR")
    orjson.dumps(doc)  # the hub sends it as it is


def test_no_store_yet_shows_why_and_no_figure(tmp_path: Path) -> None:
    doc = RevenuePanel(tmp_path / "absent").read()
    assert doc["available"] is False and doc["top_drinks"] == [] and doc["top_shops"] == []
    assert "the revenue pipeline has no data yet" in doc["message"] and "`brewstream revenue`" in doc["message"]
    assert "orders" not in doc and "total" not in doc


def test_a_store_its_check_refuses_is_not_shown(tmp_path: Path) -> None:
    """What ``check_restored`` says of an empty store whose changelog holds state."""
    write_store(tmp_path, [])

    def not_restored(store: Store) -> None:
        raise BrewError(f"the store in {store.path} is empty but changelog c holds records it has not applied")

    doc = RevenuePanel(tmp_path, check=not_restored).read()
    assert doc["available"] is False and "orders" not in doc
    assert doc["message"].startswith("cannot read the revenue store: the store in ")
    assert "holds records it has not applied" in doc["message"]


def test_a_restored_store_with_nothing_priced_says_so(tmp_path: Path) -> None:
    write_store(tmp_path, [])
    checked: list[Path] = []
    doc = RevenuePanel(tmp_path, check=lambda store: checked.append(store.path)).read()
    assert checked == [tmp_path / "store"]
    assert doc["available"] is True and doc["message"] == "the revenue pipeline has not priced any order yet"
    assert doc["orders"]["priced"] == 0 and doc["menu_watermark"] is None


def test_orders_waiting_before_any_is_priced_are_said(tmp_path: Path) -> None:
    first = Order(0, 0, MENU_NS, "shop-01", (("latte", 1),))
    write_store(tmp_path, [(waiting_key(*first.position), encode_waiting(first))])
    doc = RevenuePanel(tmp_path).read()
    assert doc["message"] == "no order priced yet: 1 waiting out the grace" and doc["orders"]["waiting"] == 1


def test_a_store_of_another_pipeline_is_not_shown(tmp_path: Path) -> None:
    write_store(tmp_path, [(b"zz-not-revenue", b"1")])
    doc = RevenuePanel(tmp_path).read()
    assert doc["available"] is False and "unknown revenue store key" in doc["message"]


names = st.text(min_size=1, max_size=12)
amounts = st.dictionaries(names, st.integers(1, 10**15), max_size=20)


@given(amounts, amounts, st.integers(1, 10), st.sampled_from(["EUR", "USD", "CHF"]))
def test_the_top_rows_are_the_highest_sums_each_written_as_its_money(
        drinks: dict[str, int], shops: dict[str, int], rows: int, currency: str) -> None:
    doc = panel_doc(RevenueState(by_drink=drinks, by_shop=shops), currency, rows)
    for shown, all_sums in ((doc["top_drinks"], drinks), (doc["top_shops"], shops)):
        ranked = sorted(all_sums.items(), key=lambda kv: (-kv[1], kv[0]))[:rows]
        assert [(r["name"], r["cents"]) for r in shown] == ranked
        assert all(r["money"] == money(r["cents"], currency) for r in shown)
    assert doc["total_cents"] == sum(drinks.values())
    assert doc["total"] == money(sum(drinks.values()), currency)


def feed_view() -> FeedView:
    return FeedView(snapshot=None, windows=[], waiting_for=[], error=None)


def published(hub: Hub) -> dict[str, Any]:
    doc: dict[str, Any] = orjson.loads(hub.latest()[1])
    return doc


def test_the_refresher_publishes_the_panel_beside_the_chart(tmp_path: Path) -> None:
    write_store(tmp_path / "revenue", [*sums({"latte": 250}, {"shop-01": 250}), (meta_key(PRICED), encode_u64(1))])
    hub = Hub()
    Refresher(hub, feed_view, tmp_path / "windows", {}, revenue=RevenuePanel(tmp_path / "revenue", "USD")).refresh()
    doc = published(hub)
    assert doc["chart"]["available"] is False and "the windows pipeline has no data yet" in doc["chart"]["message"]
    assert doc["revenue"]["top_drinks"] == [{"name": "latte", "cents": 250, "money": "2.50 USD"}]


class Broken(RevenuePanel):
    def read(self) -> dict[str, Any]:
        raise OSError("disk gone")


def test_a_broken_revenue_store_never_stops_the_board(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    hub = Hub()
    Refresher(hub, feed_view, tmp_path / "windows", {}, revenue=Broken(tmp_path)).refresh()
    doc = published(hub)
    assert doc["revenue"] == {"available": False, "message": "cannot read the revenue store: disk gone",
                              "top_drinks": [], "top_shops": []}
    assert "reading the revenue store failed" in caplog.text
    assert datetime.fromisoformat(doc["now"].replace("Z", "+00:00")).tzinfo == UTC


def test_without_a_revenue_store_the_panel_says_so() -> None:
    hub = Hub()
    Refresher(hub, feed_view, Path("/nonexistent/windows"), {}).refresh()
    assert published(hub)["revenue"]["available"] is False
