"""Time helpers every layer shares: waiting for a condition with a deadline, and UTC
timestamps in ISO-8601."""

from __future__ import annotations

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
