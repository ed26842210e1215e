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
    """``text`` for a terminal, unambiguously: each character Python calls unprintable
    (controls, format characters such as bidi overrides, separators other than the space)
    becomes a visible escape, and a backslash becomes two, so the result is one line that
    draws only what it says and reads back to exactly ``text`` (``unprintable``)."""
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(_shown(c) for c in text)


def fitted(text: str, width: int) -> str:
    """``printable(text)`` in at most ``width`` terminal columns (``width`` ≥ 1): a longer one
    is cut, never inside an escape, and ends with an ellipsis."""
    from rich.cells import cell_len  # columns, as a terminal draws them (wide characters take two)

    shown = printable(text)
    if cell_len(shown) <= width:
        return shown
    out, used = [], 0
    for c in text:
        piece = _shown(c)
        if used + cell_len(piece) > width - 1:
            break
        out.append(piece)
        used += cell_len(piece)
    return "".join(out) + "…"


def unprintable(shown: str) -> str:
    """The text ``printable`` showed (its inverse)."""
    out, i = [], 0
    while i < len(shown):
        c = shown[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        kind = shown[i + 1]
        if kind == "\\":
            out.append("\\")
            i += 2
            continue
        digits = {"x": 2, "u": 4, "U": 8}[kind]
        out.append(chr(int(shown[i + 2:i + 2 + digits], 16)))
        i += 2 + digits
    return "".join(out)


def _shown(c: str) -> str:
    if c == "\\":
        return "\\\\"
    if c.isprintable():
        return c
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
