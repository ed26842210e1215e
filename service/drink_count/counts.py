"""The drink-count store's own keys and counters (pure).

A drink's key is its name in UTF-8 and its value an 8-byte big-endian unsigned count, as
in the seed; the counters ``processed_orders`` and ``bad_orders`` live under the state
layer's meta prefix (``restorer.codec``), which no drink name can reach.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from restorer.codec import U64_LEN, StoreState, decode_u64
from restorer.tasks import TaskState, split_by_task

PROCESSED_ORDERS = "processed_orders"
BAD_ORDERS = "bad_orders"


def drink_key(drink: str) -> bytes:
    return drink.encode("utf-8")


def check_count(key: bytes, value: bytes) -> str | None:
    """Why a changelog value cannot be a drink's count, or None: every value is 8 bytes."""
    return None if len(value) == U64_LEN else f"{len(value)}-byte value; expected {U64_LEN}"


@dataclass(frozen=True)
class DrinkCounts:
    """The store as drink-count reads it: a count per drink, beside the bookkeeping."""

    counts: dict[str, int]
    state: StoreState

    @property
    def processed_orders(self) -> int:
        return self.state.meta.get(PROCESSED_ORDERS, 0)

    @property
    def bad_orders(self) -> int:
        return self.state.meta.get(BAD_ORDERS, 0)

    def as_json(self) -> dict[str, object]:
        """What ``brewstream counts --json`` prints."""
        return {"counts": dict(sorted(self.counts.items())), "offsets": self.state.offsets_json(),
                "tasks": self.tasks_json()}

    def tasks_json(self) -> dict[str, dict[str, object]]:
        """Each task's drinks and how far its changelog partition has come (``restorer.tasks``)."""
        return {str(t): {**task.labels(), "counts": dict(sorted(_counts_of(task.names).items()))}
                for t, task in sorted(split_by_task(self.state).items())}


def _counts_of(names: Mapping[bytes, bytes]) -> dict[str, int]:
    return {key.decode("utf-8"): decode_u64(value) for key, value in names.items()}


def task_counts(task: TaskState) -> dict[str, int]:
    """One task's drinks and their counts."""
    return _counts_of(task.names)


def drink_counts(state: StoreState) -> DrinkCounts:
    """Decode the drinks of a store snapshot; a value that is not a count is an error."""
    return DrinkCounts(_counts_of(state.names), state)
