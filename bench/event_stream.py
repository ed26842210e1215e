"""The windows scenario's data: order events on a compressed clock, what every window must
hold, and when each system's rule makes a window final (pure: no I/O).

The events are ``brewstream events``' own (``topics.events_gen``: key the shop, value
``{"shop_id","drink","amount"}``, the ``event-time`` header, ``late: 1`` on late ones),
stamped by a clock that runs ``speedup`` times faster than the feed: event ``i`` is fed
``i / rate`` seconds into the feed and happened ``lag`` before ``t0 + speedup * i / rate``.
So a minute of the feed closes ``speedup`` one-minute windows. The whole stream lies in the
past of the moment it is generated (each event time behind its record's Kafka timestamp,
as an offline till's are; never ahead).

Whether an event is late is decided here, when it is generated, with margins wide enough
that every system's rule agrees whatever its batching or the order in which its tasks
interleave the partitions (see ``Plan``): an on-time event's window closes at least
``on_time_margin_ns`` of event time after the newest event fed with it, a late event's
at least ``late_margin_ns`` before. The oracle counts the on-time events.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import orjson

from topics.event_time import EVENT_TIME, decode_event_time
from topics.events_gen import EventGenerator, EventsConfig

NS = 10**9
Header = tuple[str, bytes]


@dataclass(frozen=True)
class Plan:
    """The event-time settings of the scenario, all in event time (the compressed clock).

    A window [start, end) is final once the clock of a system reaches ``end + close_ns``:
    brewstream's watermark (clock - ``watermark_delay_ns``) reaches end + allowed
    lateness; Kafka Streams' stream time reaches end + grace, grace = ``close_ns``."""

    window_ns: int = 60 * NS
    watermark_delay_ns: int = 30 * NS
    allowed_lateness_ns: int = 150 * NS
    lag_max_ns: int = 60 * NS  # an on-time event happened up to this long before it was fed
    late_prob: float = 0.05
    late_lag_min_ns: int = 15 * 60 * NS  # a late one (an offline till) 15 to 20 minutes before
    late_lag_max_ns: int = 20 * 60 * NS
    shops: int = 80

    def __post_init__(self) -> None:
        if self.on_time_margin_ns <= 0 or self.late_margin_ns <= 0:
            raise ValueError("the lags leave no margin between on-time and late events")

    @property
    def close_ns(self) -> int:
        return self.watermark_delay_ns + self.allowed_lateness_ns

    @property
    def on_time_margin_ns(self) -> int:
        """How far the clock may run ahead of the newest event fed (a system's tasks
        interleaving partitions unevenly) before an on-time event could be judged late."""
        return self.close_ns - self.lag_max_ns

    @property
    def late_margin_ns(self) -> int:
        """How far a system's clock may trail the newest event fed (a batch planned
        earlier, a task behind) before a late event could still be accepted."""
        return self.late_lag_min_ns - self.window_ns - self.close_ns

    def generator_config(self) -> EventsConfig:
        return EventsConfig(self.shops, self.lag_max_ns, self.late_prob, self.late_lag_min_ns, self.late_lag_max_ns)


@dataclass(frozen=True)
class TimedEvents:
    """The events in feed order, with what the oracle and the triggers need of each."""

    plan: Plan
    rate: int
    speedup: float
    t0_ns: int  # the compressed clock when the feed starts
    keys: list[bytes]
    values: list[bytes]
    header_lists: list[list[Header]]
    event_ns: list[int]
    late: list[bool]
    cents: list[int]

    def __len__(self) -> int:
        return len(self.keys)

    def record(self, i: int) -> tuple[bytes, bytes]:
        return self.keys[i], self.values[i]

    def headers(self, i: int) -> list[Header]:
        return self.header_lists[i]

    def window_of(self, i: int) -> int:
        t = self.event_ns[i]
        return t - t % self.plan.window_ns

    def oracle(self) -> dict[int, tuple[int, int]]:
        """Window start -> (count, amount in cents) of the on-time events."""
        out: dict[int, tuple[int, int]] = {}
        for i in range(len(self)):
            if not self.late[i]:
                start = self.window_of(i)
                n, c = out.get(start, (0, 0))
                out[start] = (n + 1, c + self.cents[i])
        return out

    @property
    def late_count(self) -> int:
        return sum(self.late)


def timed_events(plan: Plan, seed: int, rate: int, seconds: float, speedup: float, now_ns: int) -> TimedEvents:
    """``rate * seconds`` events whose clock runs from ``t0`` (a whole minute) to at most
    ``now_ns`` - a minute. Event 0 is on time: it is fed alone first, to see each system up."""
    count = max(2, round(rate * seconds))
    span = round(speedup * count * NS / rate)
    t0 = now_ns - 60 * NS - span
    t0 -= t0 % (60 * NS)
    first = EventGenerator(replace(plan.generator_config(), late_prob=0.0), seed)
    gen = EventGenerator(plan.generator_config(), seed + 1)
    keys: list[bytes] = []
    values: list[bytes] = []
    headers: list[list[Header]] = []
    stamps: list[int] = []
    late: list[bool] = []
    cents: list[int] = []
    for i in range(count):
        ev = (gen if i else first).at(t0 + round(i * speedup * NS / rate))
        keys.append(ev.key)
        values.append(ev.value)
        headers.append(ev.headers)
        stamps.append(decode_event_time(dict(ev.headers)[EVENT_TIME]))
        late.append(ev.late)
        # brewstream keeps an amount as round(amount * 100) cents (service.windows.events).
        cents.append(round(orjson.loads(ev.value)["amount"] * 100))
    return TimedEvents(plan, rate, speedup, t0, keys, values, headers, stamps, late, cents)


MIN_OF_PARTITIONS, MAX_OF_ALL = "min over partitions", "max over all"


def close_triggers(event_ns: Sequence[int], partitions: Sequence[int], closes: Sequence[int],
                   clock: str) -> dict[int, int]:
    """For each close point (event time), the index of the event, in feed order, whose
    arrival moves the system's clock to it or past it; close points never reached are left
    out. ``clock``: ``MIN_OF_PARTITIONS`` (brewstream: the least, over the partitions that
    had events, of each one's highest event time) or ``MAX_OF_ALL`` (Kafka Streams: the
    highest event time of the task, which sees every partition through its repartition
    topic). Within a partition, feed order is offset order (one producer, idempotent)."""
    todo = sorted(set(closes))
    out: dict[int, int] = {}
    highest: dict[int, int] = {}
    k = 0
    for i, (t, p) in enumerate(zip(event_ns, partitions, strict=True)):
        if t <= highest.get(p, t - 1):
            continue
        highest[p] = t
        now = min(highest.values()) if clock == MIN_OF_PARTITIONS else max(highest.values())
        while k < len(todo) and todo[k] <= now:
            out[todo[k]] = i
            k += 1
        if k == len(todo):
            break
    return out
