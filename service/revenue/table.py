"""The revenue table, and the thread that reads the menu and prints it every --print
interval."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import datetime
from typing import TextIO

from restorer.store import Store
from service.instance.periodic import Every
from service.records.limits import printable
from service.revenue.state import NO_PRICE, PRICED, TOO_LATE, RevenueState, decode_revenue_state
from topics.clock import iso_ns


def money(cents: int, currency: str) -> str:
    return f"{cents // 100:,}.{cents % 100:02d} {currency}"


def table_text(now: datetime, state: RevenueState, rows: int, currency: str) -> str:
    """``[HH:MM:SS] priced=N no-price=M too-late=K waiting=W menu=…`` and the top drinks and shops."""
    j = state.join
    menu = iso_ns(j.menu_time) if j.menu_time is not None else "-"
    lines = [f"[{now:%H:%M:%S}] priced={state.counter(PRICED)} no-price={state.counter(NO_PRICE)} "
             f"too-late={state.counter(TOO_LATE)} waiting={len(j.pending)} menu={menu}"]
    for title, sums in (("DRINK", state.by_drink), ("SHOP", state.by_shop)):
        lines.append(f"{title:<24}{'REVENUE':>20}")
        for name, cents in sorted(sums.items(), key=lambda kv: (-kv[1], kv[0]))[:rows]:
            lines.append(f"{printable(name)[:23]:<24}{money(cents, currency):>20}")
    lines.append("---")
    return "\n".join(lines)


class RevenueReporter:
    """Every ``tick_s``: let the sink read the menu (a quiet order stream still sees price
    changes); every ``print_s``: print the table."""

    def __init__(self, store: Store, tick: Callable[[], None], tick_s: float, print_s: float, rows: int,
                 currency: str, out: TextIO = sys.stdout) -> None:
        self.store, self.rows, self.currency, self.out = store, rows, currency, out
        self._ticks = Every(tick_s, tick, "menu reader")
        self._prints = Every(print_s, self.print_table, "revenue table") if print_s > 0 else None

    def start(self) -> None:
        self._ticks.start()
        if self._prints is not None:
            self._prints.start()

    def stop(self, final_flush: bool = True) -> None:
        self._ticks.stop()
        if self._prints is not None:
            self._prints.stop()
        if final_flush:
            self.print_table()

    def print_table(self) -> None:
        state = decode_revenue_state(self.store.items())
        print(table_text(datetime.now(), state, self.rows, self.currency), file=self.out, flush=True)
