"""What a menu record is (pure).

A record of ``brew.menu.v1``: key = the drink (UTF-8), value
``{"drink": "latte", "price_cents": 420, "currency": "EUR"}``, valid from its event time
(the ``event-time`` header, else the record's Kafka timestamp,
``service.records.event_time``). An empty or null value withdraws the drink from that
time: an order of it then has no price.

``parse_menu`` is total: whatever the record holds, it returns a ``MenuUpdate`` or raises
``BadMenu`` with a short one-line reason (the record then goes to the DLQ), never anything
else. A price is a whole number of cents from 1 to ``MAX_PRICE_CENTS``: with quantities up
to 2^31 an order's total stays far inside what the store's 128-bit sums hold.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from service.records.event_time import BadTime, event_time_ns
from service.records.json_reasons import LongInt, exact_reason, refused_reason, show, show_text
from service.records.limits import MAX_NAME_BYTES, name_fault, printable

MAX_PRICE_CENTS = 10**9  # ten million in the currency's units: no drink costs more
_BYTES_LIKE = (bytes, bytearray, memoryview)


class BadMenu(ValueError):
    """The menu record is refused; the message is the short DLQ reason."""


@dataclass(frozen=True)
class MenuUpdate:
    drink: str
    valid_from_ns: int
    price_cents: int | None  # None: withdrawn from valid_from_ns on


def parse_menu(key: object, value: object, event_time: object, kafka_ts_ns: object, *, currency: str,
               max_ahead_ns: int, max_name_bytes: int = MAX_NAME_BYTES) -> MenuUpdate:
    """The version one menu record adds; ``event_time`` None: the record has no header."""
    drink = _drink(key, max_name_bytes)
    try:
        valid_from, _ = event_time_ns(event_time, kafka_ts_ns, max_ahead_ns)
    except BadTime as exc:
        raise BadMenu(str(exc)) from None
    if value is None or (isinstance(value, _BYTES_LIKE) and not value):
        return MenuUpdate(drink, valid_from, None)
    if not isinstance(value, _BYTES_LIKE):
        raise BadMenu("value is not bytes")
    raw = bytes(value)
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise BadMenu(refused_reason(raw, lambda d: _price(d, drink, currency), BadMenu)) from None
    try:
        return MenuUpdate(drink, valid_from, _price(doc, drink, currency))
    except BadMenu as exc:
        # orjson reads integers beyond 64 bits as floats; the stdlib parser keeps them
        # exact, so the reason names the real fault. Only refused records pay for this.
        raise BadMenu(exact_reason(raw, lambda d: _price(d, drink, currency), BadMenu) or str(exc)) from None


def _drink(key: object, max_name_bytes: int) -> str:
    if key is None:
        raise BadMenu("no key: a menu record's key is its drink")
    if not isinstance(key, _BYTES_LIKE):
        raise BadMenu("key is not bytes")
    try:
        drink = bytes(key).decode("utf-8")
    except UnicodeDecodeError:
        raise BadMenu("key is not UTF-8") from None
    if not drink:
        raise BadMenu("key is empty")
    fault = name_fault(drink, max_name_bytes)
    if fault is not None:
        raise BadMenu(f"key {fault}")
    return drink


def _price(doc: object, drink: str, currency: str) -> int:
    if not isinstance(doc, dict):
        raise BadMenu("not a JSON object")
    named = doc.get("drink")
    if named != drink:
        raise BadMenu("drink is missing" if named is None else "drink differs from the record's key")
    price = doc.get("price_cents")
    # bool is an int subclass in Python; JSON true is not a price, nor is 4.2.
    if type(price) is not int:
        if isinstance(price, LongInt):
            raise BadMenu(f"price_cents {price} out of range 1..{MAX_PRICE_CENTS}")
        raise BadMenu("price_cents is missing" if "price_cents" not in doc else "price_cents is not an integer")
    if not 1 <= price <= MAX_PRICE_CENTS:
        raise BadMenu(f"price_cents {show(price)} out of range 1..{MAX_PRICE_CENTS}")
    got = doc.get("currency")
    if got != currency:
        shown = repr(show_text(printable(got))) if isinstance(got, str) else \
            "is missing" if got is None else "is not a string"
        raise BadMenu(f"currency {shown}; this pipeline sums {currency}")
    return price
