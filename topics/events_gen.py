"""Order events with a synthetic event time, as in seed 01 (pure: the clock is passed in).

Each event lags wall-clock time by uniform(0, event_lag_max); with probability
late_prob the lag is uniform(late_lag_min, late_lag_max) instead, like a shop's till
that was offline and flushes its orders later. Such events carry the header late=1.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import orjson

from topics.event_time import EVENT_TIME, LATE_FLAG, encode_event_time
from topics.orders_gen import MENU

PRICES = {"espresso": 2.40, "americano": 3.10, "latte": 3.90, "cappuccino": 3.70, "flat white": 3.80,
          "iced latte": 4.20, "mocha": 4.30, "cold brew": 4.00, "cortado": 3.30, "chai latte": 3.90,
          "matcha latte": 4.40, "macchiato": 2.90, "hot chocolate": 3.50, "filter coffee": 2.60,
          "affogato": 4.80, "babyccino": 1.20}


@dataclass(frozen=True)
class EventsConfig:
    shops: int = 80
    event_lag_max_ns: int = 60 * 10**9
    late_prob: float = 0.10
    late_lag_min_ns: int = 90 * 10**9
    late_lag_max_ns: int = 240 * 10**9


@dataclass(frozen=True)
class GeneratedEvent:
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]
    late: bool


class EventGenerator:
    def __init__(self, cfg: EventsConfig, seed: int | None = None) -> None:
        self.cfg = cfg
        self._rng = random.Random(seed)
        self._drinks = [d for d, _ in MENU]
        self._weights = [w for _, w in MENU]

    def at(self, now_ns: int) -> GeneratedEvent:
        rng, cfg = self._rng, self.cfg
        lag = rng.randint(0, cfg.event_lag_max_ns)
        late = rng.random() < cfg.late_prob and cfg.late_lag_max_ns > cfg.late_lag_min_ns
        if late:
            lag = rng.randint(cfg.late_lag_min_ns, cfg.late_lag_max_ns)
        shop = f"shop-{rng.randrange(1, cfg.shops + 1):02d}"
        drink = rng.choices(self._drinks, weights=self._weights)[0]
        amount = round(PRICES[drink] * rng.choice((1, 1, 1, 2)), 2)
        headers = [(EVENT_TIME, encode_event_time(now_ns - lag))]
        if late:
            headers.append((LATE_FLAG, b"1"))
        return GeneratedEvent(shop.encode(), orjson.dumps({"shop_id": shop, "drink": drink, "amount": amount}),
                              headers, late)


class EventStream:
    """Events stamped at the moment they are asked for, counting the late ones."""

    def __init__(self, gen: EventGenerator, clock_ns: Callable[[], int] = time.time_ns) -> None:
        self.gen, self.clock_ns = gen, clock_ns
        self.late = 0

    def __iter__(self) -> Iterator[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
        while True:
            ev = self.gen.at(self.clock_ns())
            self.late += ev.late
            yield ev.key, ev.value, ev.headers
