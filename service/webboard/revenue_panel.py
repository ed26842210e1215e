"""The revenue panel: the top drinks and shops by revenue, the orders priced, refused and
waiting, and the menu's watermark, from the revenue store (``stores.read_store``).

The figures are the daemon's own ``/api/revenue`` answer (``service.revenue.http``), cut
to what the page shows (the per-window sums grow with time and are not drawn), with each
sum also written as money.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from service.revenue.http import revenue_answer
from service.revenue.state import RevenueState, decode_revenue_state
from service.revenue.table import money
from service.webboard.stores import Check, NotShown, read_store

ROWS = 8


def panel_doc(state: RevenueState, currency: str, rows: int = ROWS) -> dict[str, Any]:
    answer = revenue_answer(state, rows)
    orders = cast(dict[str, int], answer["orders"])

    def shown(key: str) -> list[dict[str, Any]]:
        return [{**r, "money": money(r["cents"], currency)} for r in cast(list[dict[str, Any]], answer[key])]

    total = sum(state.by_drink.values())  # every priced order adds its cents to its drinks and to its shop alike
    if orders["priced"]:
        message = None
    elif orders["waiting"]:
        message = f"no order priced yet: {orders['waiting']} waiting out the grace"
    else:
        message = "the revenue pipeline has not priced any order yet"
    return {
        "available": True,
        "message": message,
        "currency": currency,
        "top_drinks": shown("top_drinks"),
        "top_shops": shown("top_shops"),
        "drinks": len(state.by_drink),
        "shops": len(state.by_shop),
        "total_cents": total,
        "total": money(total, currency),
        "orders": orders,
        "menu_watermark": answer["menu_watermark"],
        "join_time": answer["join_time"],
        "last_batch": answer["last_batch"],
    }


def unavailable(message: str) -> dict[str, Any]:
    """No figure at all: an absent or unrestored store is not a revenue of zero."""
    return {"available": False, "message": message, "top_drinks": [], "top_shops": []}


@dataclass(frozen=True)
class RevenuePanel:
    """Where the revenue store is, how to check it is restored (``stores.read_store``), and
    the currency its cents are in."""

    state_dir: Path
    currency: str = "EUR"
    check: Check | None = None
    rows: int = ROWS

    def read(self) -> dict[str, Any]:
        try:
            state = read_store(self.state_dir, "revenue", decode_revenue_state, self.check)
        except NotShown as exc:
            return unavailable(str(exc))
        return panel_doc(state, self.currency, self.rows)
