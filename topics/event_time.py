"""The event-time header of order events (seed 01): 8-byte big-endian unix nanoseconds,
and the ``late`` flag on generated late events (pure)."""

from __future__ import annotations

EVENT_TIME = "event-time"
LATE_FLAG = "late"
_BYTES_LIKE = (bytes, bytearray, memoryview)  # a tuple: isinstance() is slower with a union


def encode_event_time(ns: int) -> bytes:
    return ns.to_bytes(8, "big", signed=False)


def decode_event_time(raw: object) -> int:
    """The header's unix nanoseconds; ``ValueError`` with a short reason for anything else."""
    if raw is None:
        raise ValueError("event-time header is null")
    if type(raw) is not bytes and not isinstance(raw, _BYTES_LIKE):
        raise ValueError("event-time header is not bytes")
    if len(raw) != 8:
        raise ValueError(f"event-time header has {len(raw)} bytes; expected 8")
    return int.from_bytes(raw, "big", signed=False)
