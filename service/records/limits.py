"""The bound on names that the per-record parsers enforce (pure).

Drink names and shop ids become keys: store and changelog keys (drink-count), window
and session keys (windows, whose store keeps a 2-byte key length), and they appear in
top-N snapshots and closed-window records. A name over the bound makes its whole
record bad at parse time, so every record that carries names stays far below Kafka's
1 MB record limit.

Names are data, not text for a terminal: whatever a valid name holds (newlines, escape
sequences, bidi overrides) is shown through ``printable``, so a record cannot redraw or
forge the lines a person reads.
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


def printable(text: str) -> str:
    """``text`` for a terminal: each character Python calls unprintable (controls, format
    characters such as bidi overrides, separators other than the space) becomes a visible
    escape, so the result is one line that draws only what it says."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _escape(c: str) -> str:
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
