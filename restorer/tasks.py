"""Tasks: the state split by key, one task per changelog partition (pure).

A key's task is the changelog partition Kafka's default partitioner (murmur2, as in the
Java client) picks for its state key among the changelog's R partitions, so Kafka's own
tools find a key's history where brewstream keeps it. The state key is the store key
itself (a drink), or the part of it its pipeline names (``Routing``: a window's key, so
that a shop's windows and sessions share one task). ``ChangelogWriter`` produces every
key there, and
a store records R (``CHANGELOG_PARTITIONS``) when it is built against its changelog. R is
fixed when the topics are created (``brewstream topics create --tasks R``); a changelog of
another R is refused by the restore (``restorer.codec``'s shape markers), and rebuilt only
offline by ``brewstream republish-changelog --partitions R``.

A task's bookkeeping is per changelog partition: its commit marker (the last batch
committed to it), the store's position in it, and its own input offsets (``codec``). This
module groups a store's keys and that bookkeeping by task, for ``brewstream counts
--json``, ``status`` and the HTTP API.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from restorer.codec import CHANGELOG_PARTITIONS, StoreState
from topics.partitioner import murmur2_partition


def _whole(key: bytes) -> bytes:
    return key


@dataclass(frozen=True)
class Routing:
    """Which part of a store key decides its task (``state_key``), and the version of that
    rule (``version``, 0: the whole key). A changelog keeps the version it was written by in
    its route markers (``restorer.codec``), since keys routed by another rule would find
    their history in other partitions."""

    state_key: Callable[[bytes], bytes] = _whole
    version: int = 0


BY_WHOLE_KEY = Routing()


def task_of(key: bytes, tasks: int, routing: Routing = BY_WHOLE_KEY) -> int:
    """The task (changelog partition) of a pipeline's key among ``tasks``."""
    return murmur2_partition(routing.state_key(key), tasks)


def task_count(state: StoreState) -> int | None:
    """R as the store was built against its changelog; None before its first build, or
    for a value that is not a positive count (read from disk: never trusted to be one)."""
    raw = state.local.get(CHANGELOG_PARTITIONS)
    try:
        n = int(raw) if raw is not None else 0
    except ValueError:
        return None
    return n if n > 0 else None


@dataclass(frozen=True)
class TaskState:
    """One task of a store: its keys, and how far its changelog partition has come."""

    task: int
    names: dict[bytes, bytes] = field(default_factory=dict)  # the pipeline's keys in this task
    seq: int = 0  # the last batch committed to the task's changelog partition (0: none)
    position: int | None = None  # the next changelog offset the store will apply; None: none yet
    offsets: dict[str, dict[int, int]] = field(default_factory=dict)  # its own next input offsets

    def labels(self) -> dict[str, object]:
        """The fields every per-task answer carries."""
        return {"keys": len(self.names), "seq": self.seq, "changelog_position": self.position,
                "offsets": {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in sorted(self.offsets.items())}}


def split_by_task(state: StoreState, routing: Routing = BY_WHOLE_KEY) -> dict[int, TaskState]:
    """Every task of the store, keys and bookkeeping, by task: each key in exactly one.
    A store not yet built against its changelog has no tasks."""
    tasks = task_count(state)
    if tasks is None:
        return {}
    names: dict[int, dict[bytes, bytes]] = {t: {} for t in range(tasks)}
    for key, value in state.names.items():
        names[task_of(key, tasks, routing)][key] = value
    return {t: TaskState(t, names[t], state.commits.get(t, 0), state.positions.get(t), state.task_offsets.get(t, {}))
            for t in range(tasks)}


def tasks_json(tasks: Mapping[int, TaskState]) -> dict[str, dict[str, object]]:
    """Tasks as JSON objects keyed by the task number (a string, as JSON keys are)."""
    return {str(t): task.labels() for t, task in sorted(tasks.items())}
