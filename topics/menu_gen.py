"""Menu records for brew.menu.v1, reproducible from a seed (pure: no I/O).

A menu record prices one drink from its event time on: key = the drink (UTF-8), value
``{"drink": "latte", "price_cents": 420, "currency": "EUR"}``, the time in the
``event-time`` header; an empty value withdraws the drink from that time.

The stream opens with a price list of every drink at ``start_ns``. Then each step moves
the menu time on by ``step_ns`` and changes a few drinks. Some changes arrive out of order,
stamped up to ``max_late_ns`` before the latest time already sent: a versioned table must
place them between versions it already holds. Now and then a drink is withdrawn and listed
again at a later step.

What a reader may rely on, whatever the seed and settings:
- no two records of one drink share an event time (which version holds at t is never a tie);
- in event-time order, a withdrawal withdraws a listed drink and a price follows a withdrawal
  only as the re-listing: a late change is never stamped at or before its drink's latest
  withdrawal or re-listing, which are themselves sent in order.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import orjson

from topics.event_time import EVENT_TIME, encode_event_time
from topics.orders_gen import MENU

PRICE_MIN_CENTS = 150
PRICE_MAX_CENTS = 650
MAX_CHANGES_PER_STEP = 3
# A withdrawn drink comes back at each later step with this chance: most return within a
# few steps, so a reader sees the gap and the re-listing in one short run.
RELIST_CHANCE = 0.5
DRINKS: tuple[str, ...] = tuple(d for d, _ in MENU)

MenuRecord = tuple[bytes, bytes, list[tuple[str, bytes]]]  # a topics.feed.Record with headers
_CURRENCY = re.compile(r"[A-Z]{3}")


def menu_record(drink: str, price_cents: int | None, valid_from_ns: int, currency: str = "EUR") -> MenuRecord:
    """``drink`` at ``price_cents`` from ``valid_from_ns`` on; ``None`` withdraws it."""
    value = b"" if price_cents is None else orjson.dumps(
        {"drink": drink, "price_cents": price_cents, "currency": currency})
    return drink.encode(), value, [(EVENT_TIME, encode_event_time(valid_from_ns))]


def check_currency(code: str) -> str:
    """``code`` when it looks like an ISO 4217 code (three capital letters); else ``ValueError``."""
    if not _CURRENCY.fullmatch(code):
        raise ValueError(f"a currency is three capital letters (ISO 4217, e.g. EUR), not {code[:20]!r}")
    return code


@dataclass(frozen=True)
class MenuConfig:
    start_ns: int  # event time of the opening price list
    step_ns: int = 60 * 10**9  # menu time between steps of changes
    currency: str = "EUR"  # ISO 4217 code
    late_fraction: float = 0.1  # share of price changes sent out of order
    max_late_ns: int = 120 * 10**9  # how far before the latest time sent a late change may be
    withdraw_fraction: float = 0.05  # share of changes that withdraw the drink

    def __post_init__(self) -> None:
        if not 0 <= self.start_ns < 2**64:
            raise ValueError(f"the start time must be unix nanoseconds from 0 to 2^64-1, not {self.start_ns}")
        if self.step_ns <= 0:
            raise ValueError("the step must be above 0")
        if self.max_late_ns < 0:
            raise ValueError("the most lateness cannot be below 0")
        check_currency(self.currency)
        for name in ("late_fraction", "withdraw_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name.replace('_', ' ')} must be from 0 to 1")


@dataclass
class MenuTally:
    """What the records handed out so far hold."""

    prices: int = 0  # the opening price list and later price changes (re-listings not included)
    late: int = 0
    withdrawals: int = 0
    relistings: int = 0


@dataclass
class _Drink:
    price: int | None  # None: withdrawn
    floor_ns: int  # its latest withdrawal or re-listing (or the opening list): late changes stay after it
    withdrawn_step: int = -1
    times: set[int] = field(default_factory=set)  # its recent event times, to keep them apart


class MenuGenerator:
    """An endless stream of menu records; ``tally`` counts what it has handed out."""

    def __init__(self, cfg: MenuConfig, seed: int | None = None, clock_ns: Callable[[], int] | None = None) -> None:
        self.cfg = cfg
        # With a clock, no step is stamped after it (a record's event time may then run at
        # most a few nanoseconds ahead of its Kafka timestamp): a menu sent faster than its
        # --step would otherwise run into the future, where a consumer refuses it.
        self._clock_ns = clock_ns
        self.tally = MenuTally()
        self._rng = random.Random(seed)
        self._high_ns = cfg.start_ns  # the latest event time handed out

    def __iter__(self) -> Iterator[MenuRecord]:
        cfg, rng = self.cfg, self._rng
        drinks: dict[str, _Drink] = {}
        for name in DRINKS:
            price = rng.randint(PRICE_MIN_CENTS, PRICE_MAX_CENTS)
            drinks[name] = _Drink(price, cfg.start_ns, times={cfg.start_ns})
            self.tally.prices += 1
            yield menu_record(name, price, cfg.start_ns, cfg.currency)
        step, now_ns = 0, cfg.start_ns
        while True:
            step += 1
            planned = cfg.start_ns + step * cfg.step_ns
            if self._clock_ns is not None:
                planned = min(planned, self._clock_ns())
            now_ns = max(now_ns + 1, planned)  # each step later than the one before
            yield from self._step(drinks, step, now_ns)

    def _step(self, drinks: dict[str, _Drink], step: int, now_ns: int) -> Iterator[MenuRecord]:
        cfg, rng = self.cfg, self._rng
        back = [n for n, d in drinks.items() if d.price is None and d.withdrawn_step < step
                and rng.random() < RELIST_CHANCE]
        listed = [n for n, d in drinks.items() if d.price is not None]
        changed = rng.sample(listed, min(len(listed), rng.randint(1, MAX_CHANGES_PER_STEP)))
        plan = [(n, "relist") for n in back] + [
            (n, "withdraw" if rng.random() < cfg.withdraw_fraction else "price") for n in changed]
        rng.shuffle(plan)
        for name, kind in plan:
            d = drinks[name]
            self._forget_before(d)
            if kind == "withdraw":
                d.price, d.floor_ns, d.withdrawn_step = None, now_ns, step
                self.tally.withdrawals += 1
                yield self._emit(name, d, None, now_ns)
                continue
            price = self._new_price(d.price)
            if kind == "relist":
                d.price, d.floor_ns = price, now_ns
                self.tally.relistings += 1
                yield self._emit(name, d, price, now_ns)
                continue
            d.price = price
            self.tally.prices += 1
            at_ns = self._late_time(d) if rng.random() < cfg.late_fraction else None
            if at_ns is not None:
                self.tally.late += 1
            yield self._emit(name, d, price, now_ns if at_ns is None else at_ns)

    def _late_time(self, d: _Drink) -> int | None:
        """A time before the latest one sent, by at most ``max_late_ns``, after the drink's
        floor and apart from its other times; None when there is no room for one."""
        earliest = max(d.floor_ns + 1, self._high_ns - self.cfg.max_late_ns)
        if earliest > self._high_ns - 1:
            return None
        for _ in range(8):  # a clash with one of the drink's own times is rare; then it goes in order
            at_ns = self._rng.randint(earliest, self._high_ns - 1)
            if at_ns not in d.times:
                return at_ns
        return None

    def _new_price(self, old: int | None) -> int:
        if old is None:
            return self._rng.randint(PRICE_MIN_CENTS, PRICE_MAX_CENTS)
        price = self._rng.randint(PRICE_MIN_CENTS, PRICE_MAX_CENTS - 1)
        return price + 1 if price >= old else price  # differs from the price it had before

    def _emit(self, name: str, d: _Drink, price: int | None, at_ns: int) -> MenuRecord:
        d.times.add(at_ns)
        self._high_ns = max(self._high_ns, at_ns)
        return menu_record(name, price, at_ns, self.cfg.currency)

    def _forget_before(self, d: _Drink) -> None:
        # Only times a late change could still land on matter: the set stays small in an endless run.
        horizon = self._high_ns - self.cfg.max_late_ns
        d.times = {t for t in d.times if t >= horizon}


def menu_records(seed: int | None = None, *, start_ns: int, step_ns: int = 60 * 10**9, currency: str = "EUR",
                 late_fraction: float = 0.1, max_late_ns: int = 120 * 10**9,
                 withdraw_fraction: float = 0.05) -> Iterator[MenuRecord]:
    """The records of ``MenuGenerator`` for these settings (``ValueError`` for bad ones)."""
    cfg = MenuConfig(start_ns, step_ns, currency, late_fraction, max_late_ns, withdraw_fraction)
    return iter(MenuGenerator(cfg, seed))
