"""Which instance holds each task (``restorer.tasks``), which keep warm copies of it, and
which warm up to take it next (pure): the rule every instance of an application computes
alike from the same view, after Kafka Streams' high-availability assignor (KIP-441).

The rule, in the order it is applied:

1. **Sticky.** A task stays with the live instance that held it.
2. **Never cold.** A task whose holder is gone goes to the live instance with the best copy
   of it: one caught up (lag at most ``acceptable_lag`` records) with the fewest tasks, else
   the least lag; with no copy anywhere, the instance with the fewest tasks.
3. **Balanced, but only warm.** While two instances' task counts differ by more than one, a
   task moves from the fuller to the emptier only if the emptier is caught up on it: a
   planned move never makes a task wait for a restore. Where no such task exists, the
   emptier instance gets a warm-up: a copy that follows the task's changelog partition
   until it is caught up, when the same rule moves the task (at most ``max_warmups`` at
   once, so warming never floods the cluster).
4. **Standbys.** Each task gets ``replicas`` warm copies on other instances than its
   holder (fewer when there are not enough instances), those already holding a copy first,
   then the least loaded.

Fed its own answer back with the same lags it gives the same holders (no flapping); fed
back with the warm-ups caught up, it balances the tasks within a few rounds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

NO_COPY = -1  # a lag that means: this instance holds no copy of the task


@dataclass(frozen=True)
class Assignment:
    """Who holds each task, and who follows it."""

    active: dict[int, str]  # task -> its holder; every task, when there is any instance
    standbys: dict[int, tuple[str, ...]] = field(default_factory=dict)  # task -> its warm copies
    warmups: dict[int, str] = field(default_factory=dict)  # task -> the instance warming to take it

    def tasks_of(self, instance: str) -> list[int]:
        return sorted(t for t, owner in self.active.items() if owner == instance)


def _lag(lags: Mapping[str, Mapping[int, int]], instance: str, task: int) -> int | None:
    """The instance's copy's lag on the task; None when it holds no copy (or says nonsense)."""
    lag = lags.get(instance, {}).get(task, NO_COPY)
    return lag if isinstance(lag, int) and not isinstance(lag, bool) and lag >= 0 else None


def assign(tasks: int, lags: Mapping[str, Mapping[int, int]], previous: Mapping[int, str], *,
           replicas: int = 0, acceptable_lag: int = 0, max_warmups: int = 2) -> Assignment:
    """The assignment of ``tasks`` tasks among the live instances (the keys of ``lags``:
    each instance's copies, task -> records behind its changelog partition's end), given
    who held each task before (``previous``; departed instances are ignored)."""
    if tasks < 0 or replicas < 0 or acceptable_lag < 0 or max_warmups < 0:
        raise ValueError("tasks, replicas, acceptable_lag and max_warmups cannot be negative")
    live = sorted(lags)
    if not live:
        return Assignment({})

    def caught_up(instance: str, task: int) -> bool:
        lag = _lag(lags, instance, task)
        return lag is not None and lag <= acceptable_lag

    load = dict.fromkeys(live, 0)
    active: dict[int, str] = {}
    for task in range(tasks):  # 1. sticky
        holder = previous.get(task)
        if holder in load:
            active[task] = holder
            load[holder] += 1
    for task in range(tasks):  # 2. never cold
        if task not in active:
            def best(instance: str, task: int = task) -> tuple[bool, int, int, str]:
                lag = _lag(lags, instance, task)
                return (not caught_up(instance, task), lag if lag is not None else 1 << 62, load[instance], instance)
            holder = min(live, key=best)
            active[task] = holder
            load[holder] += 1

    while True:  # 3. balanced, but only warm
        move = _warm_move(active, load, caught_up)
        if move is None:
            break
        task, to = move
        load[active[task]] -= 1
        load[to] += 1
        active[task] = to

    standbys = _standbys(tasks, live, active, replicas, lags)
    warmups = _warmups(active, load, standbys, lags, max_warmups)
    return Assignment(active, standbys, warmups)


def _unbalanced_pairs(load: Mapping[str, int]) -> list[tuple[str, str]]:
    """(fuller, emptier) pairs whose counts differ by more than one, widest first."""
    pairs = [(a, b) for a in load for b in load if load[a] - load[b] > 1]
    return sorted(pairs, key=lambda p: (load[p[1]] - load[p[0]], p))


def _warm_move(active: Mapping[int, str], load: Mapping[str, int],
               caught_up: Callable[[str, int], bool]) -> tuple[int, str] | None:
    """A task that can move from a fuller instance to an emptier one caught up on it."""
    for fuller, emptier in _unbalanced_pairs(load):
        for task in sorted(t for t, owner in active.items() if owner == fuller):
            if caught_up(emptier, task):
                return task, emptier
    return None


def _standbys(tasks: int, live: list[str], active: Mapping[int, str], replicas: int,
              lags: Mapping[str, Mapping[int, int]]) -> dict[int, tuple[str, ...]]:
    held = dict.fromkeys(live, 0)
    out: dict[int, tuple[str, ...]] = {}
    for task in range(tasks):
        others = [i for i in live if i != active[task]]
        chosen = sorted(others, key=lambda i: (_lag(lags, i, task) is None, held[i], _lag(lags, i, task) or 0, i))
        out[task] = tuple(sorted(chosen[:replicas]))
        for i in out[task]:
            held[i] += 1
    return {t: s for t, s in out.items() if s}


def _warmups(active: Mapping[int, str], load: Mapping[str, int], standbys: Mapping[int, tuple[str, ...]],
             lags: Mapping[str, Mapping[int, int]], max_warmups: int) -> dict[int, str]:
    """For each unbalanced pair, one task of the fuller instance for the emptier to warm
    (the one it is least behind on), unless it already follows one of them as a standby."""
    warmups: dict[int, str] = {}
    for fuller, emptier in _unbalanced_pairs(load):
        if len(warmups) >= max_warmups:
            break
        theirs = sorted(t for t, owner in active.items() if owner == fuller and t not in warmups)
        if any(emptier in standbys.get(t, ()) for t in theirs):
            continue  # its standby's copy is warming already; the move comes once it is caught up
        if theirs:
            task = min(theirs, key=lambda t: (_lag(lags, emptier, t) is None, _lag(lags, emptier, t) or 0, t))
            warmups[task] = emptier
    return warmups
