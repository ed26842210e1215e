"""Order events of seed 01 and their event time (pure).

An event is ``{"shop_id": "shop-07", "drink": "latte", "amount": 4.5}``, keyed by shop,
with the event time in the ``event-time`` header (8-byte big-endian unix nanoseconds).
A record without the header is timed by its Kafka timestamp and counted as no-header.

``parse_event`` is total: whatever the value and the header, it returns an ``Event`` or
raises ``BadEvent`` with a short one-line reason, never anything else. What the windows
state and outputs cannot hold is rejected here:

- ``shop_id`` and ``drink``: non-empty strings of valid Unicode, at most
  ``max_name_bytes`` bytes in UTF-8 (they become window keys);
- ``amount``: a finite JSON number (not a boolean), at most ``MAX_AMOUNT`` either way;
  the event keeps it as whole cents;
- the event time (header, or the Kafka timestamp without one): from 0 (1970) to
  ``MAX_EVENT_NS`` (2100), which leaves room under 2^63 for window sizes added to it;
- an event time from the header at most ``max_ahead_ns`` ahead of the record's own Kafka
  timestamp (``ahead_fault``), which must then lie in the same range: one device with a
  clock far ahead would otherwise move its partition's clock, and with it the watermark,
  past every real event. Behind it is fine, however far: that is a late event (an offline
  till flushing its orders), for the watermark to judge.

JSON here is what orjson reads: RFC 8259 text in UTF-8 without a BOM, no lone
surrogates, numbers a double holds, at most 1024 levels deep. Where a key repeats in an
object, its last value counts (orjson and the stdlib parser agree on that).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import orjson

from service.records.event_time import DEFAULT_MAX_AHEAD_NS, MAX_AHEAD_LIMIT_NS, BadTime, event_time_ns
from service.records.json_reasons import LongInt, exact_reason, refused_reason, show
from service.records.limits import MAX_NAME_BYTES, name_fault

MAX_AMOUNT = 1_000_000  # per event, either sign; in cents it stays far inside 64 bits
_BYTES_LIKE = (bytes, bytearray, memoryview)  # a tuple: isinstance() is slower with a union


class BadEvent(ValueError):
    """Rejected as a whole; the message is the short DLQ reason."""


@dataclass(frozen=True)
class Event:
    shop_id: str
    drink: str
    amount_cents: int
    event_ns: int
    has_header: bool


def parse_event(value: bytes | None, event_time: bytes | None, kafka_ts_ns: int, *,
                max_name_bytes: int = MAX_NAME_BYTES, max_ahead_ns: int = DEFAULT_MAX_AHEAD_NS) -> Event:
    """The event in one record; ``event_time`` None means the record has no header."""
    if max_name_bytes <= 0:
        raise ValueError(f"max_name_bytes must be positive, not {max_name_bytes}")
    if not 0 <= max_ahead_ns <= MAX_AHEAD_LIMIT_NS:
        raise ValueError(f"max_ahead_ns must lie in 0..{MAX_AHEAD_LIMIT_NS}, not {max_ahead_ns}")
    if value is None:
        raise BadEvent("null value")
    if type(value) is not bytes and not isinstance(value, _BYTES_LIKE):
        raise BadEvent("value is not bytes")
    if not value:
        raise BadEvent("empty value")
    try:
        shop, drink, cents = _judge(orjson.loads(value), max_name_bytes)
    except orjson.JSONDecodeError:
        raise BadEvent(refused_reason(value, lambda doc: _judge(doc, max_name_bytes), BadEvent)) from None
    except BadEvent as exc:
        # orjson reads integers beyond 64 bits as floats; the stdlib parser keeps them
        # exact, so the reason names the real fault. Only rejected events pay for this.
        raise BadEvent(exact_reason(value, lambda doc: _judge(doc, max_name_bytes), BadEvent) or str(exc)) from None
    try:
        ns, has_header = event_time_ns(event_time, kafka_ts_ns, max_ahead_ns)
    except BadTime as exc:
        raise BadEvent(str(exc)) from None
    return Event(shop, drink, cents, ns, has_header)


def _judge(doc: object, max_name_bytes: int) -> tuple[str, str, int]:
    """shop_id, drink and amount in cents of a parsed value, or BadEvent."""
    if not isinstance(doc, dict):
        raise BadEvent("not a JSON object")
    shop, drink, amount = doc.get("shop_id"), doc.get("drink"), doc.get("amount")
    if not isinstance(shop, str) or not shop:
        raise BadEvent("shop_id is missing or not a non-empty string")
    if not (shop.isascii() and len(shop) <= max_name_bytes):
        fault = name_fault(shop, max_name_bytes)
        if fault is not None:
            raise BadEvent(f"shop_id {fault}")
    if not isinstance(drink, str) or not drink:
        raise BadEvent("drink is missing or not a non-empty string")
    if not (drink.isascii() and len(drink) <= max_name_bytes):
        fault = name_fault(drink, max_name_bytes)
        if fault is not None:
            raise BadEvent(f"drink {fault}")
    # bool is an int subclass in Python; JSON true is not an amount.
    if type(amount) is not float and type(amount) is not int:
        if isinstance(amount, LongInt):
            raise BadEvent(f"amount {amount} out of range -{MAX_AMOUNT}..{MAX_AMOUNT}")
        raise BadEvent("amount is missing or not a number")
    if not -MAX_AMOUNT <= amount <= MAX_AMOUNT:  # NaN fails every comparison
        if type(amount) is float and not math.isfinite(amount):  # NaN, Infinity or 1e400: stdlib fallback only
            raise BadEvent("amount is not a finite number")
        raise BadEvent(f"amount {show(amount)} out of range -{MAX_AMOUNT}..{MAX_AMOUNT}")
    return shop, drink, round(amount * 100)
