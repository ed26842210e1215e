"""The order rules of brewstream (DESIGN.md, "order"), written plainly for the benchmark's
Python peers (the plain consumer and the Quix Streams application), which import nothing
of brewstream's: a JSON object with string ``order_id`` and ``shop_id`` and a non-empty
``items`` list; each item an object with a non-empty string ``drink`` of at most 256
UTF-8 bytes and an integer ``quantity`` from 1 to 2^31-1 (booleans, floats, strings and
nulls are not integers). One bad item makes the whole order bad. JSON is what orjson
reads (valid UTF-8, no byte order mark, no NaN, a repeated key keeps its last value).
"""

from __future__ import annotations

import orjson

MAX_QUANTITY = 2**31 - 1
MAX_NAME_BYTES = 256


def order_items(raw: bytes | None) -> list[tuple[str, int]]:
    """The (drink, quantity) items of a good order; an empty list for a bad one."""
    if not raw:
        return []
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return []
    if type(doc) is not dict:
        return []
    if not (_text(doc.get("order_id")) and _text(doc.get("shop_id"))):
        return []
    items = doc.get("items")
    if type(items) is not list or not items:
        return []
    out: list[tuple[str, int]] = []
    for item in items:
        if type(item) is not dict:
            return []
        drink, quantity = item.get("drink"), item.get("quantity")
        if not _text(drink) or not drink or len(drink.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
            return []
        # type() and not isinstance(): JSON true is a bool, which is an int in Python.
        if type(quantity) is not int or not 1 <= quantity <= MAX_QUANTITY:
            return []
        out.append((drink, quantity))
    return out


def _text(value: object) -> bool:
    """A string that is valid Unicode (a lone surrogate from a \\u escape is not)."""
    if type(value) is not str:
        return False
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
