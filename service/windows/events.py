"""Order events of seed 01 and their event time (pure).

An event is ``{"shop_id": "shop-07", "drink": "latte", "amount": 4.5}``, keyed by shop,
with the event time in the ``event-time`` header (8-byte big-endian unix nanoseconds).
A record without the header is timed by its Kafka timestamp and counted as no-header.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import orjson

EVENT_TIME = "event-time"
LATE_FLAG = "late"


class BadEvent(ValueError):
    """Rejected as a whole; the message is the short DLQ reason."""


@dataclass(frozen=True)
class Event:
    shop_id: str
    drink: str
    amount_cents: int
    event_ns: int
    has_header: bool


def encode_event_time(ns: int) -> bytes:
    return ns.to_bytes(8, "big", signed=False)


def decode_event_time(raw: bytes) -> int:
    if len(raw) != 8:
        raise BadEvent(f"event-time header has {len(raw)} bytes; expected 8")
    return int.from_bytes(raw, "big", signed=False)


def parse_event(value: bytes | None, event_time: bytes | None, kafka_ts_ns: int) -> Event:
    if value is None:
        raise BadEvent("null value")
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        raise BadEvent("not JSON") from None
    if not isinstance(doc, dict):
        raise BadEvent("not a JSON object")
    shop, drink, amount = doc.get("shop_id"), doc.get("drink"), doc.get("amount")
    if not isinstance(shop, str) or not shop:
        raise BadEvent("shop_id is missing or not a non-empty string")
    if not isinstance(drink, str) or not drink:
        raise BadEvent("drink is missing or not a non-empty string")
    if isinstance(amount, bool) or not isinstance(amount, int | float) or not math.isfinite(amount):
        raise BadEvent("amount is missing or not a number")
    if event_time is None:
        return Event(shop, drink, round(amount * 100), kafka_ts_ns, False)
    return Event(shop, drink, round(amount * 100), decode_event_time(event_time), True)
