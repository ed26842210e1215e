"""The revenue pipeline's HTTP paths (answers are pure):

- ``/api/revenue?n=``: revenue in cents per drink and per shop, the top ``n`` of each by
  revenue, the windows, the orders waiting and the menu's watermark;
- ``/api/menu/<drink>?at=``: the version of the drink's price that held at ``at`` (an
  ISO 8601 time or unix seconds; default: the latest), among those the store keeps
  (the history retention).
"""

from __future__ import annotations

from collections.abc import Mapping

from service.ops.queries import Answer, BadQuery, Route, batch_fields, time_param, top_param
from service.revenue.join import price_at
from service.revenue.state import NO_PRICE, PRICED, TOO_LATE, RevenueState, decode_revenue_state
from topics.clock import iso_ns

MENU_PATH = "/api/menu/"


def revenue_answer(state: RevenueState, n: int) -> dict[str, object]:
    def top(sums: Mapping[str, int]) -> list[dict[str, object]]:
        return [{"name": k, "cents": v} for k, v in sorted(sums.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]

    j = state.join
    return {**batch_fields(state.reserved), "revenue": dict(sorted(state.by_drink.items())),
            "by_shop": dict(sorted(state.by_shop.items())), "top_drinks": top(state.by_drink),
            "top_shops": top(state.by_shop),
            "windows": [{"start": iso_ns(s), "cents": c} for s, c in sorted(state.by_window.items())],
            "orders": {"priced": state.counter(PRICED), "no_price": state.counter(NO_PRICE),
                       "too_late": state.counter(TOO_LATE), "waiting": len(j.pending)},
            "menu_watermark": None if j.menu_time is None else iso_ns(j.menu_time),
            "join_time": None if j.join_time is None else iso_ns(j.join_time)}


def menu_answer(state: RevenueState, drink: str, at: int | None) -> dict[str, object]:
    history = state.join.versions.get(drink, {})
    when = at if at is not None else max(history, default=0)
    held = [t for t in history if t <= when]
    since = max(held, default=None)
    doc: dict[str, object] = {**batch_fields(state.reserved), "drink": drink,
                              "at": None if at is None else iso_ns(when),
                              "price_cents": price_at(history, when) if held else None,
                              "valid_from": None if since is None else iso_ns(since),
                              "withdrawn": since is not None and history[since] is None,
                              "versions_kept": len(history)}
    if since is None:
        doc["reason"] = "no version of this drink at that time among those kept" if history else "unknown drink"
    return doc


def routes() -> dict[str, Route]:
    def revenue(params: Mapping[str, str]) -> Answer:
        n = top_param(params)
        return lambda store: revenue_answer(decode_revenue_state(store.items()), n)

    def menu(params: Mapping[str, str]) -> Answer:
        drink = params.get("drink", "")
        if not drink:
            raise BadQuery("name a drink: /api/menu/<drink>")
        at = time_param(params, "at")
        if at is not None and at < 0:
            raise BadQuery("at is before 1970")
        return lambda store: menu_answer(decode_revenue_state(store.items()), drink, at)

    return {"/api/revenue": Route(("n",), revenue), MENU_PATH: Route(("at",), menu, tail="drink")}
