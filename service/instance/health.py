"""What a running instance is doing right now: starting, restoring, active, standby,
fenced or stopped. The runner moves it along; the metrics, the lease, the HTTP probes and
the log read it."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from topics.kafka_config import redact

log = logging.getLogger("brewstream")

# The line every change is logged with, and the pattern its readers use (drills, benchmark).
ROLE_LINE = "role: %s%s"
ROLE_PATTERN = re.compile(r"\brole: (?P<role>[a-z]+)")


def role_pattern(role: str) -> re.Pattern[str]:
    """The pattern of the line that says an instance took ``role``."""
    return re.compile(rf"\brole: {role}\b")


PHASES = STARTING, RESTORING, ACTIVE, STANDBY, FENCED, STOPPED = (
    "starting", "restoring", "active", "standby", "fenced", "stopped")

# The moves an instance may make, checked in one place (``check_move``), like Kafka Streams'
# ``StreamThread.State``. What they hold: an instance is active only once its query started
# (from starting: never straight from a restore, a standby spell or a fencing, so it never
# serves a store it has not caught up and fenced for); a standby is one that caught up
# (restoring or starting, never straight from active: a fenced active restores first);
# stopped is the end. Staying in a phase with another reason is a move too.
MOVES: dict[str, frozenset[str]] = {
    STARTING: frozenset({STARTING, RESTORING, ACTIVE, STANDBY, FENCED, STOPPED}),
    RESTORING: frozenset({RESTORING, STARTING, STANDBY, FENCED, STOPPED}),
    ACTIVE: frozenset({ACTIVE, STARTING, RESTORING, FENCED, STOPPED}),
    STANDBY: frozenset({STANDBY, RESTORING, STARTING, FENCED, STOPPED}),
    FENCED: frozenset({FENCED, RESTORING, STARTING, STOPPED}),
    STOPPED: frozenset({STOPPED}),
}


class IllegalMove(RuntimeError):
    """A move the table above does not allow: a defect of the runner, never of the input."""


def check_move(current: str, new: str) -> None:
    """``IllegalMove`` unless an instance in phase ``current`` may move to ``new``."""
    if new not in MOVES:
        raise ValueError(f"unknown phase {new!r}")
    if new not in MOVES[current]:
        raise IllegalMove(f"an instance cannot move from {current} to {new}")


@dataclass(frozen=True)
class Phase:
    name: str
    reason: str
    since: float  # unix seconds
    # Asked on every probe of an active instance: does its streaming query still run? A
    # query can die while the phase still says active (the runner is deciding whether to
    # start it again), and a probe must not call that ready.
    query_alive: Callable[[], bool] | None = field(default=None, compare=False, repr=False)

    @property
    def query_running(self) -> bool:
        if self.query_alive is None:
            return True
        try:
            return bool(self.query_alive())
        except Exception:  # Spark's gateway is gone (shutting down): not running
            return False

    @property
    def ready(self) -> bool:
        """Serving: active with its query running, or a standby that is following its changelog."""
        return (self.name == ACTIVE and self.query_running) or self.name == STANDBY

    def describe(self) -> str:
        return self.name + (f" ({self.reason})" if self.reason else "")


def liveness(phase: Phase) -> tuple[bool, str]:
    """For /healthz: is this process worth keeping? A restart cannot help a restore or a
    standby, so both are alive; a fenced or stopped instance, or an active one whose query
    died, is not."""
    if phase.name in (FENCED, STOPPED):
        return False, f"not alive: {phase.describe()}"
    if phase.name == ACTIVE and not phase.query_running:
        return False, "not alive: active, but its streaming query is not running"
    return True, f"alive: {phase.describe()}"


def readiness(phase: Phase) -> tuple[bool, str]:
    """For /readyz: should traffic (queries of the store, a load balancer) come here?"""
    if phase.ready:
        return True, f"ready: {phase.describe()}"
    if phase.name == ACTIVE:
        return False, "not ready: active, but its streaming query is not running"
    return False, f"not ready: {phase.describe()}"


def data_refusal(phase: Phase, store_whole: bool) -> str | None:
    """Why the data paths of the HTTP API (a pipeline's store as JSON) do not answer now, or
    None. They answer only what /readyz calls ready, from a store that is whole (brought up
    to date with its changelog by this process: ``engine.runner.OpenStore``): never a store
    that is empty because its restore has not begun or not ended, nor one that stopped moving."""
    ready, why = readiness(phase)
    if not ready:
        return why.removeprefix("not ready: ")
    return None if store_whole else f"{phase.name}, but the store is not up to date with its changelog yet"


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

    def set(self, name: str, reason: str = "", query_alive: Callable[[], bool] | None = None) -> None:
        reason = redact(reason)  # the probes and the log show it; no config value may ride along
        with self._lock:
            check_move(self._phase.name, name)
            if (self._phase.name, self._phase.reason, self._phase.query_alive) == (name, reason, query_alive):
                return
            self._phase = Phase(name, reason, time.time(), query_alive)
            phase = self._phase
        log.info(ROLE_LINE, name, f" ({reason})" if reason else "")
        for listener in self._listeners:
            listener(phase)
