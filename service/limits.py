"""The bound on names that the per-record parsers enforce (pure).

Drink names and shop ids become keys: store and changelog keys (drink-count), window
and session keys (windows, whose store keeps a 2-byte key length), and they appear in
top-N snapshots and closed-window records. A name over the bound makes its whole
record bad at parse time, so every record that carries names stays far below Kafka's
1 MB record limit.
"""

from __future__ import annotations

MAX_NAME_BYTES = 256  # UTF-8 bytes of one drink name or shop id


def name_fault(name: str, max_bytes: int) -> str | None:
    """Why ``name`` cannot be a key (a phrase to follow the field name), or None."""
    if name.isascii():  # O(1) in CPython, and the common case: one byte a character
        size = len(name)
    else:
        try:
            size = len(name.encode("utf-8"))
        except UnicodeEncodeError:
            return "is not valid Unicode"
    return None if size <= max_bytes else f"is {size} bytes, over the {max_bytes}-byte limit"


def is_unicode(text: str) -> bool:
    """False when ``text`` holds a lone surrogate, which UTF-8 cannot encode. JSON's
    ``\\ud800`` escapes make one; orjson refuses them, the stdlib parser reads them."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
