"""The bytes of the windows store and its changelog (pure).

Besides the reserved 0xFF families shared with drink-count (input offsets, counters,
commit markers, positions), the windows store keeps three families of its own:

- ``w`` + kind + key length + key + start: an open window, or a shop's session ->
  end, count, amount in cents, late-accepted count, flags (40 bytes)
- ``c`` + partition: that input partition's clock -> max event time, last seen (16 bytes)
- ``t`` + ``e``/``p`` + start: the printed table's count per tumbling window by event
  time / by processing time (8 bytes)

A window that becomes final is deleted (a tombstone in the changelog), so the store
holds only open windows and stays bounded on an endless stream.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

from restorer.codec import RESERVED, U64_LEN, StoreState, as_signed, decode_entries
from restorer.tasks import Routing
from service.windows.watermark import PartitionClock

_WINDOW, _CLOCK, _TABLE = b"w", b"c", b"t"
_KIND_CODE = {"tumbling": b"t", "hopping": b"h", "session": b"s"}
_KIND_NAME = {v: k for k, v in _KIND_CODE.items()}
_AGG = struct.Struct(">qQqQQ")
_CLK = struct.Struct(">qq")
_BIAS = 1 << 63  # signed times as unsigned big-endian keys that sort in time order
EARLY_EMITTED = 1

BY_EVENT, BY_PROCESSING = b"e", b"p"

# Counters kept under the reserved meta family.
WATERMARK_NS = "watermark_ns"
TOTAL = "total"
LATE = "late"
NO_HEADER = "no_header"
BAD = "bad"
SPEC = "spec"


@dataclass
class WindowAgg:
    kind: str
    start_ns: int
    end_ns: int
    key: str | None
    count: int = 0
    amount_cents: int = 0
    late_accepted: int = 0
    flags: int = 0

    @property
    def early_emitted(self) -> bool:
        return bool(self.flags & EARLY_EMITTED)


def _t(ns: int) -> bytes:
    return (ns + _BIAS).to_bytes(8, "big")


def _untime(raw: bytes) -> int:
    return int.from_bytes(raw, "big") - _BIAS


# A window key's layout: family, kind, the key's length (2 bytes), the key, the start.
_KEY_AT = len(_WINDOW) + 1 + 2


def _name_span(key: bytes) -> tuple[int, int]:
    """Where a window key's own key (a shop) lies in it, by the layout above."""
    return _KEY_AT, _KEY_AT + int.from_bytes(key[_KEY_AT - 2:_KEY_AT], "big")


def state_key(store_key: bytes) -> bytes:
    """The part of a store key that decides its task: a window's key (a shop; empty for the
    windows over every key), so that a key's windows and sessions share one task; any
    other key (a partition's clock, a table row) by itself. Total over any bytes."""
    if not store_key.startswith(_WINDOW) or len(store_key) < _KEY_AT:
        return store_key
    at, end = _name_span(store_key)
    return store_key[at:end] if len(store_key) >= end else store_key


# Version 1: windows by their key (before it, by their whole store key, start included).
ROUTING = Routing(state_key, version=1)


def window_key(kind: str, start_ns: int, key: str | None) -> bytes:
    return sessions_prefix(kind, key) + _t(start_ns)


def sessions_prefix(kind: str, key: str | None) -> bytes:
    """Every window of ``kind`` for one key (a shop's sessions) shares this prefix."""
    name = (key or "").encode()
    return _WINDOW + _KIND_CODE[kind] + len(name).to_bytes(2, "big") + name


def encode_window(w: WindowAgg) -> tuple[bytes, bytes]:
    return (window_key(w.kind, w.start_ns, w.key),
            _AGG.pack(w.end_ns, w.count, w.amount_cents, w.late_accepted, w.flags))


def decode_window(key: bytes, value: bytes) -> WindowAgg:
    end, count, cents, late, flags = _AGG.unpack(value)
    kind = _KIND_NAME[key[1:2]]
    at, name_end = _name_span(key)
    name = key[at:name_end].decode()
    return WindowAgg(kind, _untime(key[name_end:name_end + 8]), end, name or None, count, cents, late, flags)


def window_prefix() -> bytes:
    return _WINDOW


def clock_key(partition: int) -> bytes:
    return _CLOCK + partition.to_bytes(4, "big")


def encode_clock(clock: PartitionClock) -> bytes:
    return _CLK.pack(clock.max_event_ns, clock.last_seen_ms)


def table_key(which: bytes, start_ns: int) -> bytes:
    return _TABLE + which + _t(start_ns)


@dataclass
class WindowsState:
    windows: dict[bytes, WindowAgg] = field(default_factory=dict)
    clocks: dict[int, PartitionClock] = field(default_factory=dict)
    by_event: dict[int, int] = field(default_factory=dict)
    by_processing: dict[int, int] = field(default_factory=dict)
    reserved: StoreState = field(default_factory=StoreState)

    @property
    def watermark_ns(self) -> int | None:
        stored = self.reserved.meta.get(WATERMARK_NS)
        return None if stored is None else as_signed(stored)  # before 1970 when event times are near 0

    def counter(self, name: str) -> int:
        return self.reserved.meta.get(name, 0)


def decode_windows_state(entries: Iterable[tuple[bytes, bytes]]) -> WindowsState:
    state = WindowsState()
    reserved: list[tuple[bytes, bytes]] = []
    for key, value in entries:
        family = key[:1]
        if key.startswith(RESERVED):
            reserved.append((key, value))
        elif family == _WINDOW:
            state.windows[key] = decode_window(key, value)
        elif family == _CLOCK:
            state.clocks[int.from_bytes(key[1:5], "big")] = PartitionClock(*_CLK.unpack(value))
        elif family == _TABLE:
            table = state.by_event if key[1:2] == BY_EVENT else state.by_processing
            table[_untime(key[2:10])] = int.from_bytes(value, "big")
        else:
            raise ValueError(f"unknown windows store key {key!r}")
    state.reserved = decode_entries(reserved)
    return state


def check_value(key: bytes, value: bytes) -> str | None:
    """Why a changelog value cannot belong to ``key``, or None (the restorer asks)."""
    expected = {_WINDOW: _AGG.size, _CLOCK: _CLK.size, _TABLE: U64_LEN}.get(key[:1], U64_LEN)
    if key.startswith(RESERVED):
        expected = U64_LEN
    elif key[:1] not in (_WINDOW, _CLOCK, _TABLE):
        return f"unknown key family {key[:1]!r}"
    return None if len(value) == expected else f"{len(value)}-byte value; expected {expected}"
