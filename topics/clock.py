"""Time helpers every layer shares: waiting for a condition with a deadline, UTC
timestamps in ISO-8601, and durations as people write them (``50ms``, ``1m30s``)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

from topics.errors import BrewError

T = TypeVar("T")


class WaitTimedOut(BrewError):
    """The condition did not hold before the deadline (or the thing waited on died)."""


def wait_until(cond: Callable[[], T | None], timeout: float, what: str, every: float = 0.2,
               give_up: Callable[[], str | None] | None = None) -> T:
    """Poll ``cond`` until it returns something truthy, and return that.

    ``give_up`` may name a reason to stop early (the process waited on exited); past
    ``timeout`` seconds, or then, ``WaitTimedOut`` says what was waited for.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        reason = give_up() if give_up is not None else None
        if reason:
            raise WaitTimedOut(f"{reason} while waiting for {what}")
        if time.monotonic() > deadline:
            raise WaitTimedOut(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def utc_iso(when: datetime | float, millis: bool = False) -> str:
    """``2026-11-22T10:00:05Z`` (or ``…05.123Z``) for a datetime or unix seconds."""
    moment = when if isinstance(when, datetime) else datetime.fromtimestamp(when, tz=UTC)
    moment = moment.astimezone(UTC)
    if millis:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def iso_ns(ns: int) -> str:
    """An event time in unix nanoseconds as ``2026-11-22T10:00:05.123Z``."""
    return utc_iso(ns / 1e9, millis=True)


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration(text: str) -> float:
    """Seconds in ``text`` (``50ms``, ``1s``, ``5m``, ``1m30s``); a bare ``0`` is allowed,
    any other number needs a unit."""
    text = text.strip()
    if text == "0":
        return 0.0
    pos, total = 0, 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or pos == 0:
        raise ValueError(f"not a duration: {text!r} (use e.g. 50ms, 1s, 5m, 1m30s, 1d)")
    return total


def format_duration(seconds: float) -> str:
    """The shortest way ``parse_duration`` reads back: ``250ms``, ``5s``, ``2m``, ``1h``."""
    if seconds == 0:
        return "0"
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"
