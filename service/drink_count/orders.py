"""What a valid Brew order is, and the drinks it counts (pure).

An order is a JSON object with string ``order_id`` and ``shop_id`` and a non-empty
``items`` list; each item has a non-empty string ``drink`` of at most ``max_name_bytes``
UTF-8 bytes and an integer ``quantity`` from 1 to 2^31-1 (booleans, floats, strings and
nulls are not integers). One bad item makes the whole order bad: it counts nothing and
goes to the DLQ with the reason.

``count_drinks`` is total: whatever the bytes, it returns counts or raises ``BadOrder``
with a short one-line reason, never anything else. JSON here is what orjson reads:
RFC 8259 text in UTF-8 without a BOM, valid Unicode (no lone surrogates), numbers a
double holds, at most 1024 levels deep. Where a key repeats in an object, its last
value counts (orjson and the stdlib parser agree on that).
"""

from __future__ import annotations

from typing import Any

import orjson

from service.json_reasons import LongInt, exact_reason, refused_reason, show
from service.limits import MAX_NAME_BYTES, is_unicode, name_fault

MAX_QUANTITY = 2**31 - 1
_BYTES_LIKE = (bytes, bytearray, memoryview)  # a tuple: isinstance() is slower with a union


class BadOrder(ValueError):
    """The order is rejected as a whole; the message is the short DLQ reason."""


def count_drinks(raw: bytes | None, *, max_name_bytes: int = MAX_NAME_BYTES) -> dict[str, int]:
    """Quantity per drink in one order (drinks repeated within it are summed)."""
    if max_name_bytes <= 0:
        raise ValueError(f"max_name_bytes must be positive, not {max_name_bytes}")
    if raw is None:
        raise BadOrder("null value")
    if type(raw) is not bytes and not isinstance(raw, _BYTES_LIKE):
        raise BadOrder("value is not bytes")
    if not raw:
        raise BadOrder("empty value")
    try:
        return count_order(orjson.loads(raw), max_name_bytes)
    except orjson.JSONDecodeError:
        pass
    except BadOrder as exc:
        # orjson reads integers beyond 64 bits as floats; the stdlib parser keeps them
        # exact, so the reason names the real fault. Only rejected orders pay for this.
        raise BadOrder(exact_reason(raw, lambda doc: count_order(doc, max_name_bytes), BadOrder) or str(exc)) from None
    raise BadOrder(refused_reason(raw, lambda doc: count_order(doc, max_name_bytes), BadOrder))


def count_order(doc: object, max_name_bytes: int) -> dict[str, int]:
    """The drinks of one parsed order, or ``BadOrder``. ``count_drinks`` is the entry
    point; this is its check of the parsed document, for a caller that parsed it."""
    if not isinstance(doc, dict):
        raise BadOrder("not a JSON object")
    for name in ("order_id", "shop_id"):
        if name not in doc:
            raise BadOrder(f"missing {name}")
        value = doc[name]
        if not isinstance(value, str):
            raise BadOrder(f"{name} is not a string")
        if not value.isascii() and not is_unicode(value):
            raise BadOrder(f"{name} is not valid Unicode")
    items = doc.get("items")
    if items is None:
        raise BadOrder("missing items" if "items" not in doc else "items is null")
    if not isinstance(items, list):
        raise BadOrder("items is not a list")
    if not items:
        raise BadOrder("items is empty")
    counts: dict[str, int] = {}
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise BadOrder(f"item {i} is not an object")
        drink = item.get("drink")
        if not isinstance(drink, str):
            raise BadOrder(f"item {i}: drink is {'missing' if 'drink' not in item else 'not a string'}")
        if not drink:
            raise BadOrder(f"item {i}: drink is empty")
        if not (drink.isascii() and len(drink) <= max_name_bytes):
            fault = name_fault(drink, max_name_bytes)
            if fault is not None:
                raise BadOrder(f"item {i}: drink {fault}")
        qty = item.get("quantity")
        # bool is an int subclass in Python; JSON true is not a quantity.
        if type(qty) is not int:
            if isinstance(qty, LongInt):
                raise BadOrder(f"item {i}: quantity {qty} out of range 1..{MAX_QUANTITY}")
            raise BadOrder(f"item {i}: quantity is {'missing' if 'quantity' not in item else 'not an integer'}")
        if not 1 <= qty <= MAX_QUANTITY:
            raise BadOrder(f"item {i}: quantity {show(qty)} out of range 1..{MAX_QUANTITY}")
        counts[drink] = counts.get(drink, 0) + qty
    return counts


def clean_items(doc: object, max_name_bytes: int) -> list[dict[str, Any]] | None:
    """The items of ``doc`` when it is a plain clean order, else None: a shorter check for
    the common case, not a second definition of an order. It accepts a subset of what
    ``count_order`` accepts (ASCII ids and drink names, exact types as orjson builds
    them) and its items count the same (tests/unit/test_orders.py checks both on any
    document); None says only "take ``count_order``", which decides and names the reason."""
    if type(doc) is not dict:
        return None
    oid, sid, items = doc.get("order_id"), doc.get("shop_id"), doc.get("items")
    if type(oid) is not str or type(sid) is not str or type(items) is not list or not items:
        return None
    if not (oid.isascii() and sid.isascii()):
        return None
    for item in items:
        if type(item) is not dict:
            return None
        drink, qty = item.get("drink"), item.get("quantity")
        if (type(drink) is not str or type(qty) is not int or not drink or not drink.isascii()
                or len(drink) > max_name_bytes or not 0 < qty <= MAX_QUANTITY):
            return None
    return items
