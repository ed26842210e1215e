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

import json
import math

import orjson

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
        return _count(orjson.loads(raw), max_name_bytes)
    except orjson.JSONDecodeError:
        pass
    except BadOrder as exc:
        # orjson reads integers beyond 64 bits as floats; the stdlib parser keeps them
        # exact, so the reason names the real fault. Only rejected orders pay for this.
        raise BadOrder(_exact_reason(raw, max_name_bytes) or str(exc)) from None
    raise BadOrder(_refused_reason(raw, max_name_bytes))


def _count(doc: object, max_name_bytes: int) -> dict[str, int]:
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
            if isinstance(qty, _LongInt):
                raise BadOrder(f"item {i}: quantity {qty} out of range 1..{MAX_QUANTITY}")
            raise BadOrder(f"item {i}: quantity is {'missing' if 'quantity' not in item else 'not an integer'}")
        if not 1 <= qty <= MAX_QUANTITY:
            raise BadOrder(f"item {i}: quantity {_show(qty)} out of range 1..{MAX_QUANTITY}")
        counts[drink] = counts.get(drink, 0) + qty
    return counts


# --- the stdlib fallback: only rejected values come here, to name the reason -----------

_LONG_INT = 400  # characters: longer integer literals are beyond a double, and int() refuses over 4300 digits


class _LongInt:
    """An integer literal too long to convert (only the stdlib fallback makes one):
    beyond every bound here and beyond a double; shows as the start of its digits."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return _show_text(self.text)


def _parse_int(text: str) -> int | _LongInt:
    return int(text) if len(text) <= _LONG_INT else _LongInt(text)


def _stdlib_read(raw: bytes | bytearray | memoryview) -> tuple[object, str | None]:
    """The document as the stdlib parser reads it, or why it cannot."""
    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        return None, "invalid UTF-8"
    try:
        # Unlike orjson, the stdlib parser reads lone surrogates, NaN, Infinity and numbers
        # beyond a double, so the reason can name the field that holds one.
        return json.loads(text, parse_int=_parse_int), None
    except (ValueError, RecursionError):  # ValueError includes JSONDecodeError
        return None, "not JSON"


def _exact_reason(raw: bytes | bytearray | memoryview, max_name_bytes: int) -> str | None:
    """Why the stdlib reading of an order orjson read and rejected is bad, if it can tell."""
    doc, unread = _stdlib_read(raw)
    if unread is not None:
        return None  # e.g. nested deeper than the stdlib parser's recursion limit
    try:
        _count(doc, max_name_bytes)
    except BadOrder as exc:
        return str(exc)
    return None


def _refused_reason(raw: bytes | bytearray | memoryview, max_name_bytes: int) -> str:
    """Why orjson refused the value: the field at fault when the stdlib parser can read it."""
    doc, unread = _stdlib_read(raw)
    if unread is not None:
        return unread
    try:
        _count(doc, max_name_bytes)
    except BadOrder as exc:
        return str(exc)
    return _unheld(doc) or "not JSON"


def _unheld(doc: object) -> str | None:
    """What, in a document the stdlib parser read, orjson refuses (walked without recursion)."""
    stack = [doc]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if not is_unicode(value):
                return "a string is not valid Unicode"
        elif isinstance(value, float):
            if not math.isfinite(value):
                return "a number is not finite"
        elif isinstance(value, _LongInt):
            return "a number is out of range"
        elif isinstance(value, int):
            try:
                float(value)
            except OverflowError:
                return "a number is out of range"
        elif isinstance(value, dict):
            stack.extend(value)
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return None


def _show(number: int | float) -> str:
    if isinstance(number, int) and number.bit_length() > 10_000:  # str() refuses over 4300 digits
        return "-huge" if number < 0 else "huge"
    return _show_text(str(number))


def _show_text(text: str) -> str:
    return text if len(text) <= 20 else text[:17] + "..."
