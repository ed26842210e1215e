"""Naming why a JSON value is bad, once orjson refused it or read it and a parser
rejected it (pure; runs on executors too).

The per-record parsers (orders, events) judge what orjson reads, the fast path. Only
rejected values come here: the stdlib parser reads what orjson refuses (lone surrogates,
NaN, Infinity, numbers beyond a double), so the reason can name the field at fault.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from service.records.limits import is_unicode

Raw = bytes | bytearray | memoryview

_LONG_INT = 400  # characters: longer integer literals are beyond a double, and int() refuses over 4300 digits


class LongInt:
    """An integer literal too long to convert (only the stdlib fallback makes one):
    beyond every bound here and beyond a double; shows as the start of its digits."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return show_text(self.text)


def _parse_int(text: str) -> int | LongInt:
    return int(text) if len(text) <= _LONG_INT else LongInt(text)


def _stdlib_read(raw: Raw) -> tuple[object, str | None]:
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


def exact_reason(raw: Raw, judge: Callable[[object], object], bad: type[Exception]) -> str | None:
    """Why the stdlib reading of a value orjson read and ``judge`` rejected is bad, if it
    can tell (``judge`` raises ``bad`` for a bad document)."""
    doc, unread = _stdlib_read(raw)
    if unread is not None:
        return None  # e.g. nested deeper than the stdlib parser's recursion limit
    try:
        judge(doc)
    except bad as exc:
        return str(exc)
    return None


def refused_reason(raw: Raw, judge: Callable[[object], object], bad: type[Exception]) -> str:
    """Why orjson refused the value: the field at fault when the stdlib parser can read it."""
    doc, unread = _stdlib_read(raw)
    if unread is not None:
        return unread
    try:
        judge(doc)
    except bad as exc:
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
        elif isinstance(value, LongInt):
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


def show(number: int | float) -> str:
    if isinstance(number, int) and number.bit_length() > 10_000:  # str() refuses over 4300 digits
        return "-huge" if number < 0 else "huge"
    return show_text(str(number))


def show_text(text: str) -> str:
    return text if len(text) <= 20 else text[:17] + "..."
