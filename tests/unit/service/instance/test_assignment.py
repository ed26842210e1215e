"""The task assignment rule (pure): every task one live holder, moves only to warm
copies, standbys and warm-ups where they may be, stable when fed back, and balanced once
the warm-ups it asks for are caught up."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.instance.assignment import Assignment, assign

NAMES = ["a", "b", "c", "d", "e"]
GONE = ["x", "y"]  # instances that held tasks and are gone

task_counts = st.integers(0, 24)
instances = st.lists(st.sampled_from(NAMES), min_size=1, max_size=5, unique=True)


@st.composite
def views(draw: Any) -> tuple[int, dict[str, dict[int, int]], dict[int, str], int, int, int]:
    tasks = draw(task_counts)
    live = draw(instances)
    task_ids = st.integers(-1, tasks + 1)  # a few that are no task: ignored
    lags = {i: draw(st.dictionaries(task_ids, st.integers(-3, 40), max_size=tasks + 2)) for i in live}
    previous = draw(st.dictionaries(task_ids, st.sampled_from(NAMES + GONE), max_size=tasks + 2))
    return (tasks, lags, previous, draw(st.integers(0, 3)), draw(st.integers(0, 5)), draw(st.integers(0, 4)))


def caught_up(lags: dict[str, dict[int, int]], instance: str, task: int, acceptable: int) -> bool:
    lag = lags.get(instance, {}).get(task)
    return lag is not None and 0 <= lag <= acceptable


def spread(a: Assignment, live: list[str]) -> int:
    counts = [len(a.tasks_of(i)) for i in live]
    return max(counts) - min(counts)


@given(views())
def test_every_task_has_one_live_holder_and_moves_only_to_a_warm_copy(view: Any) -> None:
    tasks, lags, previous, replicas, acceptable, warmups = view
    a = assign(tasks, lags, previous, replicas=replicas, acceptable_lag=acceptable, max_warmups=warmups)
    assert sorted(a.active) == list(range(tasks))
    assert set(a.active.values()) <= set(lags)
    for task, holder in a.active.items():
        before = previous.get(task)
        if before in lags and holder != before:
            assert caught_up(lags, holder, task, acceptable), (task, before, holder)


@given(views())
def test_a_task_whose_holder_is_gone_goes_to_a_caught_up_copy_if_there_is_one(view: Any) -> None:
    tasks, lags, previous, replicas, acceptable, warmups = view
    a = assign(tasks, lags, previous, replicas=replicas, acceptable_lag=acceptable, max_warmups=warmups)
    for task in range(tasks):
        if previous.get(task) not in lags and any(caught_up(lags, i, task, acceptable) for i in lags):
            assert caught_up(lags, a.active[task], task, acceptable)


@given(views())
def test_standbys_and_warmups_sit_beside_the_holder_never_on_it(view: Any) -> None:
    tasks, lags, previous, replicas, acceptable, warmups = view
    a = assign(tasks, lags, previous, replicas=replicas, acceptable_lag=acceptable, max_warmups=warmups)
    for task in range(tasks):
        copies = a.standbys.get(task, ())
        assert len(copies) == min(replicas, len(lags) - 1) and len(set(copies)) == len(copies)
        assert a.active[task] not in copies and set(copies) <= set(lags)
    assert len(a.warmups) <= warmups
    for task, instance in a.warmups.items():
        assert instance in lags and instance != a.active[task] and instance not in a.standbys.get(task, ())


@given(views())
def test_fed_its_own_answer_back_it_moves_nothing(view: Any) -> None:
    tasks, lags, previous, replicas, acceptable, warmups = view
    a = assign(tasks, lags, previous, replicas=replicas, acceptable_lag=acceptable, max_warmups=warmups)
    again = assign(tasks, lags, a.active, replicas=replicas, acceptable_lag=acceptable, max_warmups=warmups)
    assert again == a


def _caught_up_after(a: Assignment, lags: dict[str, dict[int, int]]) -> dict[str, dict[int, int]]:
    """Every copy the assignment keeps (holder, standbys, warm-ups) caught up a round later;
    the rest stay where they were."""
    out = {i: dict(copies) for i, copies in lags.items()}
    for task, holder in a.active.items():
        out[holder][task] = 0
    for task, copies in a.standbys.items():
        for i in copies:
            out[i][task] = 0
    for task, i in a.warmups.items():
        out[i][task] = 0
    return out


@given(views(), st.integers(1, 4))
def test_with_its_warmups_caught_up_it_balances_within_a_few_rounds(view: Any, warmups: int) -> None:
    tasks, lags, previous, replicas, acceptable, _ = view
    a = assign(tasks, lags, previous, replicas=replicas, acceptable_lag=acceptable, max_warmups=warmups)
    for _round in range(tasks + 1):
        if spread(a, list(lags)) <= 1:
            break
        lags = _caught_up_after(a, lags)
        a = assign(tasks, lags, a.active, replicas=replicas, acceptable_lag=acceptable, max_warmups=warmups)
    assert spread(a, list(lags)) <= 1, a


@given(task_counts, instances, st.integers(0, 3))
def test_a_first_start_is_balanced_at_once(tasks: int, live: list[str], replicas: int) -> None:
    a = assign(tasks, {i: {} for i in live}, {}, replicas=replicas)
    assert spread(a, live) <= 1 and not a.warmups


def test_a_joining_instance_warms_a_task_before_it_takes_it() -> None:
    held = {t: "a" for t in range(4)}
    lags = {"a": dict.fromkeys(range(4), 0), "b": {}}
    first = assign(4, lags, held, max_warmups=1)
    assert first.active == held and len(first.warmups) == 1  # nothing moves cold
    (task, warming), = first.warmups.items()
    assert warming == "b"
    lags["b"][task] = 0  # its warm-up caught up
    second = assign(4, lags, first.active, max_warmups=1)
    assert second.active[task] == "b" and len(second.tasks_of("a")) == 3


def test_a_lost_instances_tasks_go_to_their_standbys() -> None:
    before = assign(4, {"a": {}, "b": {}, "c": {}}, {}, replicas=1)
    lost = "a"
    lags = {i: {t: 0 for t in range(4) if i in before.standbys[t] or before.active[t] == i} for i in ("b", "c")}
    after = assign(4, lags, before.active, replicas=1)
    for task in before.tasks_of(lost):
        assert after.active[task] in before.standbys[task]


def test_no_instance_holds_nothing_and_negative_settings_are_refused() -> None:
    assert assign(3, {}, {0: "a"}) == Assignment({})
    with pytest.raises(ValueError, match="negative"):
        assign(3, {"a": {}}, {}, replicas=-1)
