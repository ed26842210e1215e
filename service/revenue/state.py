"""The bytes of the revenue store and its changelog (pure).

Besides the reserved 0xFF families every store keeps (input offsets for the orders and
for the menu, counters, commit markers), the revenue store keeps:

- ``v`` + drink length (2 bytes) + drink + valid-from time: a menu version -> its price
  in cents (8 bytes; 0: withdrawn). The menu is a global table: every version, of every
  drink, in this one store (docs/concepts/revenue.md says why).
- ``q`` + input partition (4 bytes) + offset: an order waiting for its grace -> its time,
  shop and items (msgpack)
- ``d`` + drink, ``s`` + shop, ``w`` + window start: revenue in cents (16 bytes: a sum that
  no run of orders can overflow)

A released order's key and an expired version's key are deleted (tombstones in the
changelog), so the store holds only what the join still needs, and the sums.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import msgspec

from restorer.codec import (
    RESERVED,
    U64_LEN,
    Entry,
    StoreState,
    decode_entries,
    decode_u64,
    encode_u64,
    meta_key,
    offset_key,
)
from service.records.limits import printable
from service.revenue.join import JoinState, Order, StepResult, window_start

_VERSION, _WAITING, _DRINK, _SHOP, _WINDOW = b"v", b"q", b"d", b"s", b"w"
SUM_LEN = 16
WITHDRAWN = 0

# Counters and times under the reserved meta family.
ORDERS_TIME = "orders_time"
MENU_TIME = "menu_time"
HISTORY_FLOOR = "history_floor"
PRICED = "priced_orders"
NO_PRICE = "no_price_orders"
TOO_LATE = "too_late_orders"
BAD_ORDERS = "bad_orders"
BAD_MENU = "bad_menu_records"
MENU_TOPIC_ID = "menu_topic_id"  # the menu topic whose offsets the store keeps (its id, hashed)
WINDOW_NS = "window_ns"  # the windows' size the store sums by: a store holds one

_order = msgspec.msgpack.Encoder()
_read_order = msgspec.msgpack.Decoder(tuple[int, str, list[tuple[str, int]]])


def version_key(drink: str, valid_from_ns: int) -> bytes:
    name = drink.encode()
    return _VERSION + len(name).to_bytes(2, "big") + name + encode_u64(valid_from_ns)


def waiting_key(partition: int, offset: int) -> bytes:
    return _WAITING + partition.to_bytes(4, "big") + encode_u64(offset)


def drink_key(drink: str) -> bytes:
    return _DRINK + drink.encode()


def shop_key(shop: str) -> bytes:
    return _SHOP + shop.encode()


def window_key(start_ns: int) -> bytes:
    return _WINDOW + encode_u64(start_ns)


def encode_price(price_cents: int | None) -> bytes:
    return encode_u64(WITHDRAWN if price_cents is None else price_cents)


def encode_waiting(o: Order) -> bytes:
    return _order.encode((o.event_ns, o.shop, list(o.items)))


def encode_sum(cents: int) -> bytes:
    return cents.to_bytes(SUM_LEN, "big")


@dataclass
class RevenueState:
    join: JoinState = field(default_factory=JoinState)
    by_drink: dict[str, int] = field(default_factory=dict)
    by_shop: dict[str, int] = field(default_factory=dict)
    by_window: dict[int, int] = field(default_factory=dict)
    reserved: StoreState = field(default_factory=StoreState)

    def counter(self, name: str) -> int:
        return self.reserved.meta.get(name, 0)

    def as_json(self) -> dict[str, object]:
        """What ``brewstream counts --json`` prints for a revenue store."""
        return {"revenue": dict(sorted(self.by_drink.items())), "by_shop": dict(sorted(self.by_shop.items())),
                "offsets": self.reserved.offsets_json()}

    def text(self, top_n: int | None) -> str:
        """``brewstream counts``: revenue in cents per drink and per shop, ranked, then the counters."""
        lines: list[str] = []
        for title, sums in (("drink", self.by_drink), ("shop", self.by_shop)):
            ranked = sorted(sums.items(), key=lambda kv: (-kv[1], kv[0]))
            lines += [f"{title:<6}{printable(name)}  {cents} cents" for name, cents in ranked[:top_n or len(ranked)]]
        lines.append(f"orders: priced={self.counter(PRICED)} no-price={self.counter(NO_PRICE)} "
                     f"too-late={self.counter(TOO_LATE)} bad={self.counter(BAD_ORDERS)} "
                     f"waiting={len(self.join.pending)}; bad menu records={self.counter(BAD_MENU)}")
        lines += [f"next offset {topic}[{p}] = {o}" for topic, parts in sorted(self.reserved.offsets.items())
                  for p, o in sorted(parts.items())]
        return "\n".join(lines)


def decode_revenue_state(entries: Iterable[tuple[bytes, bytes]]) -> RevenueState:
    state = RevenueState()
    reserved: list[tuple[bytes, bytes]] = []
    for key, value in entries:
        family = key[:1]
        if key.startswith(RESERVED):
            reserved.append((key, value))
        elif family == _VERSION:
            size = int.from_bytes(key[1:3], "big")
            price = decode_u64(value)
            state.join.versions.setdefault(key[3:3 + size].decode(), {})[decode_u64(key[3 + size:])] = \
                None if price == WITHDRAWN else price
        elif family == _WAITING:
            p, o = int.from_bytes(key[1:5], "big"), decode_u64(key[5:])
            t, shop, items = _read_order.decode(value)
            state.join.pending[(p, o)] = Order(p, o, t, shop, tuple((d, q) for d, q in items))
        elif family == _DRINK:
            state.by_drink[key[1:].decode()] = int.from_bytes(value, "big")
        elif family == _SHOP:
            state.by_shop[key[1:].decode()] = int.from_bytes(value, "big")
        elif family == _WINDOW:
            state.by_window[decode_u64(key[1:])] = int.from_bytes(value, "big")
        else:
            raise ValueError(f"unknown revenue store key {key!r}")
    state.reserved = decode_entries(reserved)
    meta = state.reserved.meta
    state.join.orders_time = meta.get(ORDERS_TIME)
    state.join.menu_time = meta.get(MENU_TIME)
    state.join.floor = meta.get(HISTORY_FLOOR)
    return state


def time_entries(join: JoinState) -> list[Entry]:
    return [(meta_key(name), encode_u64(t)) for name, t in ((ORDERS_TIME, join.orders_time),
                                                           (MENU_TIME, join.menu_time),
                                                           (HISTORY_FLOOR, join.floor)) if t is not None]


def check_value(key: bytes, value: bytes) -> str | None:
    """Why a changelog value cannot belong to ``key``, or None (the restorer asks)."""
    family = key[:1]
    if key.startswith(RESERVED) or family == _VERSION:
        expected: int | None = U64_LEN
    elif family in (_DRINK, _SHOP, _WINDOW):
        expected = SUM_LEN
    elif family == _WAITING:
        try:
            _read_order.decode(value)
        except (msgspec.DecodeError, ValueError):
            return "not a waiting order"
        return None
    else:
        return f"unknown key family {family!r}"
    return None if len(value) == expected else f"{len(value)}-byte value; expected {expected}"


def step_entries(state: RevenueState, result: StepResult, window_ns: int, bad_orders: int, bad_menu: int,
                 offsets: Mapping[str, Mapping[int, int]], menu_topic_id: int | None = None) -> list[Entry]:
    """What one step writes: versions added and dropped, orders waiting and released, the
    sums the priced orders add to, times, counters, each topic's next offsets, and the menu
    topic's id when it is not the one the store read."""
    entries: list[Entry] = [(version_key(u.drink, u.valid_from_ns), encode_price(u.price_cents))
                            for u in result.added]
    entries += [(version_key(drink, at), None) for drink, at in result.dropped]
    entries += [(waiting_key(*o.position), encode_waiting(o)) for o in result.waiting]
    entries += [(waiting_key(*o.position), None) for o in result.released]
    drinks, shops, windows = dict(state.by_drink), dict(state.by_shop), dict(state.by_window)
    for p in result.priced:
        for drink, cents in p.by_drink.items():
            drinks[drink] = drinks.get(drink, 0) + cents
        shops[p.order.shop] = shops.get(p.order.shop, 0) + p.cents
        start = window_start(p.order.event_ns, window_ns)
        windows[start] = windows.get(start, 0) + p.cents
    entries += [(drink_key(d), encode_sum(c)) for d, c in sorted(drinks.items()) if c != state.by_drink.get(d)]
    entries += [(shop_key(s), encode_sum(c)) for s, c in sorted(shops.items()) if c != state.by_shop.get(s)]
    entries += [(window_key(w), encode_sum(c)) for w, c in sorted(windows.items()) if c != state.by_window.get(w)]
    entries += time_entries(JoinState(orders_time=result.orders_time, menu_time=result.menu_time,
                                      floor=result.floor))
    causes = Counter(r.reason.split(":", 1)[0] for r in result.refused)
    for name, n in ((PRICED, len(result.priced)), (NO_PRICE, causes["no price"]), (TOO_LATE, causes["too late"]),
                    (BAD_ORDERS, bad_orders), (BAD_MENU, bad_menu)):
        if n:
            entries.append((meta_key(name), encode_u64(state.counter(name) + n)))
    if menu_topic_id is not None:
        entries.append((meta_key(MENU_TOPIC_ID), encode_u64(menu_topic_id)))
    if WINDOW_NS not in state.reserved.meta:
        entries.append((meta_key(WINDOW_NS), encode_u64(window_ns)))
    entries += [(offset_key(topic, p), encode_u64(o)) for topic, ps in offsets.items() for p, o in sorted(ps.items())]
    return entries
