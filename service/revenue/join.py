"""The join: each order priced with the menu version that held at its time (pure).

The rule, stated once here (docs/concepts/revenue.md walks through a timeline):

- A menu version of a drink holds from its time until the drink's next version; an order
  item takes the latest version whose time is at or before the order's time. A withdrawn
  drink, or one without any version by then, has no price.
- The join's time J is the latest event time read on either side (orders or menu).
- An order waits until J ≥ its time + the grace, then it is priced with every version
  read by then. So a price change that arrives late, but before J passes its own time +
  the grace, still prices every order at or after it: it arrives before any of them is
  released. That is the grace's promise, and ``tests/unit/service/revenue/test_join.py``
  checks it against an oracle that sees the whole menu history at once.
- After each step, versions older than the history floor, the latest order time read
  minus the retention, are dropped, except each drink's latest one at or before it (it
  still holds then). An order older than the floor the store has already dropped to is
  too late: the versions it needs may be gone. Too late means exactly that, so a backlog
  read in one batch refuses nothing (no version was dropped before it), and the floor
  follows the orders' own clock, not J: reading a backlog, the whole menu comes at the
  first batch and J jumps to its newest record, which says nothing of how late an order is.
- An order that is too late, or any of whose drinks has no price, is refused whole
  (the DLQ, with the reason); it never adds to any sum.

The grace must not exceed the retention: a waiting order's versions are then never
dropped before it is released.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from service.revenue.menu import MenuUpdate

Versions = dict[str, dict[int, int | None]]  # drink -> valid from -> price in cents (None: withdrawn)


@dataclass(frozen=True)
class JoinConfig:
    grace_ns: int
    retention_ns: int
    window_ns: int  # tumbling windows of revenue by order time

    def __post_init__(self) -> None:
        if not 0 <= self.grace_ns <= self.retention_ns:
            raise ValueError("the grace must lie between 0 and the history retention")
        if self.window_ns <= 0:
            raise ValueError("the window must be positive")


@dataclass(frozen=True)
class Order:
    partition: int
    offset: int
    event_ns: int
    shop: str
    items: tuple[tuple[str, int], ...]  # drink, quantity (a drink once)

    @property
    def position(self) -> tuple[int, int]:
        return self.partition, self.offset


@dataclass(frozen=True)
class Priced:
    order: Order
    by_drink: dict[str, int]  # cents per drink of this order

    @property
    def cents(self) -> int:
        return sum(self.by_drink.values())


@dataclass(frozen=True)
class Refused:
    order: Order
    reason: str  # starts "no price" or "too late"


@dataclass
class JoinState:
    versions: Versions = field(default_factory=dict)
    pending: dict[tuple[int, int], Order] = field(default_factory=dict)
    orders_time: int | None = None  # the latest order time read
    menu_time: int | None = None  # the latest menu time read: the menu's watermark
    floor: int | None = None  # versions before this time may have been dropped

    @property
    def join_time(self) -> int | None:
        return later(self.orders_time, self.menu_time)


@dataclass
class StepResult:
    priced: list[Priced] = field(default_factory=list)
    refused: list[Refused] = field(default_factory=list)
    added: list[MenuUpdate] = field(default_factory=list)  # versions written (the last one per drink and time)
    dropped: list[tuple[str, int]] = field(default_factory=list)  # versions past the retention
    waiting: list[Order] = field(default_factory=list)  # orders that start waiting
    released: list[Order] = field(default_factory=list)  # waiting orders priced or refused now
    orders_time: int | None = None
    menu_time: int | None = None
    floor: int | None = None


def later(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def step(state: JoinState, menu: Iterable[MenuUpdate], orders: Iterable[Order], cfg: JoinConfig,
         iso: Callable[[int], str] = str, release: bool = True) -> StepResult:
    """What one batch does: the menu's updates first (a batch reads both sides up to one
    point, and the grace covers which came first), then its orders, then whatever the
    join's time releases. Without ``release`` (the menu could not be read: a version the
    orders need may be unread) every order waits. ``state`` is not changed; the result
    says what to write."""
    out = StepResult(orders_time=state.orders_time, menu_time=state.menu_time, floor=state.floor)
    touched: dict[str, dict[int, int | None]] = {}
    latest: dict[tuple[str, int], MenuUpdate] = {}
    for u in menu:
        touched.setdefault(u.drink, dict(state.versions.get(u.drink, {})))[u.valid_from_ns] = u.price_cents
        latest[(u.drink, u.valid_from_ns)] = u
        out.menu_time = later(out.menu_time, u.valid_from_ns)
    out.added = list(latest.values())
    fresh = [o for o in orders if o.position not in state.pending]
    for o in fresh:
        out.orders_time = later(out.orders_time, o.event_ns)
    j = later(out.orders_time, out.menu_time)
    assert j is not None or not fresh  # an order moves the join's time
    versions: Mapping[str, dict[int, int | None]] = {**state.versions, **touched}
    waiting: list[Order] = []
    for o in fresh:
        if state.floor is not None and o.event_ns < state.floor:
            out.refused.append(Refused(o, f"too late: its time {iso(o.event_ns)} is before {iso(state.floor)}, "
                                          "where the menu's history was cut (the retention behind the latest order)"))
        else:
            waiting.append(o)
    if j is not None and not release:
        out.waiting = waiting
    elif j is not None:
        due = sorted((o for o in [*state.pending.values(), *waiting] if o.event_ns + cfg.grace_ns <= j),
                     key=lambda o: (o.event_ns, o.position))
        due_at = {o.position for o in due}
        for o in due:
            priced = price(o, versions, iso)
            if isinstance(priced, Priced):
                out.priced.append(priced)
            else:
                out.refused.append(priced)
            if o.position in state.pending:
                out.released.append(o)
        out.waiting = [o for o in waiting if o.position not in due_at]
        if out.orders_time is not None and out.orders_time - cfg.retention_ns > (state.floor or 0):
            out.floor = out.orders_time - cfg.retention_ns
            out.dropped = expired(versions, out.floor)
    return out


def price(order: Order, versions: Mapping[str, Mapping[int, int | None]],
          iso: Callable[[int], str] = str) -> Priced | Refused:
    """The order priced at its time, or refused whole for its first drink without a price."""
    by_drink: dict[str, int] = {}
    for drink, qty in order.items:
        history = versions.get(drink, {})
        cents = price_at(history, order.event_ns)
        if cents is None:
            how = "was withdrawn by" if any(t <= order.event_ns for t in history) else "has no price at"
            return Refused(order, f"no price: {drink!r} {how} {iso(order.event_ns)}")
        by_drink[drink] = by_drink.get(drink, 0) + cents * qty
    return Priced(order, by_drink)


def price_at(history: Mapping[int, int | None], t: int) -> int | None:
    """The price of the latest version at or before ``t`` (None: none, or withdrawn)."""
    times = sorted(history)
    i = bisect_right(times, t)
    return history[times[i - 1]] if i else None


def expired(versions: Mapping[str, Mapping[int, int | None]], horizon: int) -> list[tuple[str, int]]:
    """Versions no order from ``horizon`` on can need: all but the latest at or before it."""
    gone: list[tuple[str, int]] = []
    for drink, history in versions.items():
        older = sorted(t for t in history if t <= horizon)
        gone += [(drink, t) for t in older[:-1]]
    return gone


def window_start(t: int, window_ns: int) -> int:
    return t - t % window_ns
