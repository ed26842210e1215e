"""What a valid Brew order is, and the drinks it counts (pure).

An order is a JSON object with string ``order_id`` and ``shop_id`` and a non-empty
``items`` list; each item has a non-empty string ``drink`` and an integer ``quantity``
from 1 to 2^31-1 (booleans, floats, strings and nulls are not integers). One bad item
makes the whole order bad: it counts nothing and goes to the DLQ with the reason.
"""

from __future__ import annotations

import json

import orjson

MAX_QUANTITY = 2**31 - 1


class BadOrder(ValueError):
    """The order is rejected as a whole; the message is the short DLQ reason."""


def count_drinks(raw: bytes | None) -> dict[str, int]:
    """Quantity per drink in one order (drinks repeated within it are summed)."""
    if raw is None:
        raise BadOrder("null value")
    if not raw:
        raise BadOrder("empty value")
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _count(_fallback_json(raw))
    try:
        return _count(doc)
    except BadOrder:
        # orjson reads integers beyond 64 bits as floats; the stdlib parser keeps them
        # exact, so the reason names the real fault. Only rejected orders pay for this.
        return _count(_fallback_json(raw))


def _count(doc: object) -> dict[str, int]:
    if not isinstance(doc, dict):
        raise BadOrder("not a JSON object")
    for name in ("order_id", "shop_id"):
        if name not in doc:
            raise BadOrder(f"missing {name}")
        if not isinstance(doc[name], str):
            raise BadOrder(f"{name} is not a string")
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
        qty = item.get("quantity")
        # bool is an int subclass in Python; JSON true is not a quantity.
        if type(qty) is not int:
            raise BadOrder(f"item {i}: quantity is {'missing' if 'quantity' not in item else 'not an integer'}")
        if not 1 <= qty <= MAX_QUANTITY:
            raise BadOrder(f"item {i}: quantity {qty} out of range 1..{MAX_QUANTITY}")
        counts[drink] = counts.get(drink, 0) + qty
    return counts


def _fallback_json(raw: bytes) -> object:
    """Tell apart what orjson rejects: bad UTF-8, non-JSON, or JSON beyond orjson's limits."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadOrder("invalid UTF-8") from None
    try:
        # The JSON grammar allows lone surrogates, which orjson refuses; the standard
        # parser reads them so the reason can name the field.
        doc = json.loads(text)
    except (ValueError, RecursionError):
        raise BadOrder("not JSON") from None
    _require_encodable(doc)
    return doc


def _require_encodable(doc: object) -> None:
    # A drink name must survive being a UTF-8 changelog key.
    if isinstance(doc, dict):
        for item in doc.get("items") or []:
            drink = item.get("drink") if isinstance(item, dict) else None
            if isinstance(drink, str):
                try:
                    drink.encode("utf-8")
                except UnicodeEncodeError:
                    raise BadOrder("drink is not valid Unicode") from None
