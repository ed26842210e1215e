"""What an instance is doing with each task (``restorer.tasks``) it has: its task roles,
and the moves between them, checked in one place (``check_task_move``), like Kafka
Streams' ``Task.State`` beside the instance's own phases (``service.instance.health``).

One instance holds every task of its store today, so its tasks move with its phase
(``role_in``): restoring while it restores, running while it is active, a standby's copy
while it follows. The table is the task's own all the same: what it forbids holds for
any instance that will hold a share of the tasks.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from service.instance.health import ACTIVE, FENCED, RESTORING, STANDBY, STARTING, STOPPED

log = logging.getLogger("brewstream")

TASK_ROLES = CREATED, RESTORING_TASK, RUNNING, STANDBY_TASK, SUSPENDED, LOST, CLOSED = (
    "created", "restoring", "running", "standby", "suspended", "lost", "closed")

# What each role means for the task's changelog partition:
# - created: known, nothing read yet;
# - restoring: its store is being brought up to the partition's end (a restore, a catch-up,
#   a standby's promotion);
# - running: this instance holds the task and commits it, and nobody else may;
# - standby: a copy following the partition, answered as stale;
# - suspended: running a moment ago, not committing now (its query starting again, Kafka's
#   trouble waited out): the store is still the one this instance wrote;
# - lost: taken from this instance (its writer fenced): it commits nothing more here, and
#   what its store holds may be behind the new owner's;
# - closed: the instance let it go; the end.
#
# What the table holds: a task runs only after its store was brought up to its partition's
# end here (never straight from created, nor from a standby's copy: a promotion catches up
# the rest first), a standby's copy is one that caught up; suspended and running again is a
# query started again over a store this instance kept writing; a lost task runs again only
# after a restore; a running task stops
# committing (suspended or lost) before anything else but its closing, so it is never
# restoring or following while a batch of this instance may still commit to it.
TASK_MOVES: Mapping[str, frozenset[str]] = {
    CREATED: frozenset({RESTORING_TASK, LOST, CLOSED}),
    RESTORING_TASK: frozenset({RUNNING, STANDBY_TASK, LOST, CLOSED}),
    RUNNING: frozenset({SUSPENDED, LOST, CLOSED}),
    STANDBY_TASK: frozenset({RESTORING_TASK, LOST, CLOSED}),
    SUSPENDED: frozenset({RESTORING_TASK, RUNNING, LOST, CLOSED}),
    LOST: frozenset({RESTORING_TASK, CLOSED}),
    CLOSED: frozenset(),
}


class IllegalTaskMove(RuntimeError):
    """A move the table above does not allow: a defect of the runner, never of the input."""


def check_task_move(current: str, new: str) -> None:
    """``IllegalTaskMove`` unless a task in role ``current`` may move to ``new`` (staying
    in a role is no move, and always allowed)."""
    if new not in TASK_MOVES:
        raise ValueError(f"unknown task role {new!r}")
    if current != new and new not in TASK_MOVES[current]:
        raise IllegalTaskMove(f"a task cannot move from {current} to {new}")


def role_in(phase: str, current: str) -> str:
    """Pure: the role a task in role ``current`` takes when the instance holding it moves
    to ``phase``. Starting (a query starting, Kafka's trouble waited out) suspends a
    running task and keeps any other where it was: a standby's copy waiting for Kafka is
    still a copy, and becomes no more by starting a query."""
    if phase == STARTING:
        return SUSPENDED if current == RUNNING else current
    return {RESTORING: RESTORING_TASK, ACTIVE: RUNNING, STANDBY: STANDBY_TASK, FENCED: LOST,
            STOPPED: CLOSED}[phase]


def path_to(current: str, new: str) -> list[str]:
    """Pure: the moves that take a task from ``current`` to ``new`` by the table: the move
    itself, or, leaving running for a role it does not reach directly (an active instance
    sent back to restore a deleted store), through suspended: it stopped committing first."""
    if current == new:
        return []
    if current == RUNNING and new not in TASK_MOVES[RUNNING]:
        check_task_move(SUSPENDED, new)
        return [SUSPENDED, new]
    check_task_move(current, new)
    return [new]


class TaskRoles:
    """The roles of one instance's tasks, moved only through ``check_task_move``."""

    def __init__(self, tasks: int) -> None:
        self._lock = threading.Lock()
        self._roles = [CREATED] * tasks

    def snapshot(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._roles)

    def move(self, task: int, new: str) -> None:
        with self._lock:
            check_task_move(self._roles[task], new)
            self._roles[task] = new

    def follow(self, phase: str) -> None:
        """Every task to the role the instance's new ``phase`` gives it (``role_in``)."""
        with self._lock:
            # Every task's moves checked before any is made: a refused move changes nothing.
            paths = [path_to(current, role_in(phase, current)) for current in self._roles]
            if any(paths):
                self._roles = [path[-1] if path else current for path, current in zip(paths, self._roles, strict=True)]
                log.debug("tasks: %s", ", ".join(f"{t} {r}" for t, r in enumerate(self._roles)))
