"""What a running instance is doing right now: starting, restoring, active, standby,
fenced or stopped. The runner moves it along; the metrics, the lease, the HTTP probes and
the log read it."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("brewstream")

# The line every change is logged with, and the pattern its readers use (drills, benchmark).
ROLE_LINE = "role: %s%s"
ROLE_PATTERN = re.compile(r"\brole: (?P<role>[a-z]+)")


def role_pattern(role: str) -> re.Pattern[str]:
    """The pattern of the line that says an instance took ``role``."""
    return re.compile(rf"\brole: {role}\b")


PHASES = STARTING, RESTORING, ACTIVE, STANDBY, FENCED, STOPPED = (
    "starting", "restoring", "active", "standby", "fenced", "stopped")


@dataclass(frozen=True)
class Phase:
    name: str
    reason: str
    since: float  # unix seconds

    @property
    def ready(self) -> bool:
        """Serving: active, or a standby that is following its changelog."""
        return self.name in (ACTIVE, STANDBY)


class Health:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._phase = Phase(STARTING, "", time.time())
        self._listeners: list[Callable[[Phase], None]] = []

    @property
    def phase(self) -> Phase:
        with self._lock:
            return self._phase

    def on_change(self, listener: Callable[[Phase], None]) -> None:
        self._listeners.append(listener)
        listener(self.phase)

    def set(self, name: str, reason: str = "") -> None:
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r}")
        with self._lock:
            if self._phase.name == name and self._phase.reason == reason:
                return
            self._phase = Phase(name, reason, time.time())
            phase = self._phase
        log.info(ROLE_LINE, name, f" ({reason})" if reason else "")
        for listener in self._listeners:
            listener(phase)
