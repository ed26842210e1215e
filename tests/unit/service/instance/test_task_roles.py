"""Tasks' roles as a state machine: the table against the rules it states, and the tasks of
one instance following its phases, on any sequence of moves."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.instance.health import ACTIVE, FENCED, MOVES, PHASES, RESTORING, STANDBY, STARTING, STOPPED
from service.instance.task_roles import (
    CLOSED,
    CREATED,
    LOST,
    RESTORING_TASK,
    RUNNING,
    STANDBY_TASK,
    SUSPENDED,
    TASK_MOVES,
    TASK_ROLES,
    IllegalTaskMove,
    TaskRoles,
    check_task_move,
)


def allowed(current: str, new: str) -> bool:
    """The rules in words, as an oracle."""
    if current == new:
        return True  # no move
    if current == CLOSED or new == CREATED:
        return False  # closed is the end; created is only the beginning
    if new == RUNNING:
        return current in (RESTORING_TASK, SUSPENDED)  # once restored here, or paused while running
    if new == STANDBY_TASK:
        return current == RESTORING_TASK  # a copy is one that caught up
    if new == SUSPENDED:
        return current == RUNNING  # only a running task pauses
    if current == RUNNING:
        return new in (LOST, CLOSED)  # it stops committing before anything else
    if current == LOST:
        return new in (RESTORING_TASK, CLOSED)  # a lost task is restored before anything else
    return True  # restore, be lost, close


@given(st.sampled_from(TASK_ROLES), st.sampled_from(TASK_ROLES))
def test_the_table_is_the_rules(current: str, new: str) -> None:
    assert (current == new or new in TASK_MOVES[current]) == allowed(current, new)


@given(st.lists(st.tuples(st.integers(0, 2), st.sampled_from(TASK_ROLES)), max_size=30))
def test_a_task_takes_exactly_the_allowed_moves_and_each_its_own(moves: list[tuple[int, str]]) -> None:
    roles = TaskRoles(3)
    for task, new in moves:
        before = roles.snapshot()
        if allowed(before[task], new):
            roles.move(task, new)
            assert roles.snapshot() == tuple(new if t == task else r for t, r in enumerate(before))
        else:
            with pytest.raises(IllegalTaskMove):
                roles.move(task, new)
            assert roles.snapshot() == before  # a refused move changes nothing


@given(st.text(max_size=12), st.sampled_from(TASK_ROLES))
def test_total_over_names(name: str, current: str) -> None:
    try:
        check_task_move(current, name)
    except ValueError:
        assert name not in TASK_ROLES
    except IllegalTaskMove:
        assert name in TASK_ROLES and not allowed(current, name)


@st.composite
def instance_paths(draw: st.DrawFn) -> list[str]:
    """A sequence of phases the instance's own table allows, from its start."""
    path, current = [], STARTING
    for _ in range(draw(st.integers(0, 25))):
        current = draw(st.sampled_from(sorted(MOVES[current])))
        path.append(current)
    return path


def caught_up(history: list[str], skipping: tuple[str, ...]) -> bool:
    """Whether, looking back past ``skipping``, the instance's last other phase was a restore."""
    earlier = [phase for phase in history if phase not in skipping]
    return bool(earlier) and earlier[-1] == RESTORING


@given(instance_paths())
def test_tasks_follow_their_instance_and_refuse_what_it_may_not_do_with_them(path: list[str]) -> None:
    """The instance's table lets it start its query straight from starting or a standby's
    spell; its tasks refuse to run unless the instance restored them since it started, stood
    by, or was fenced, and refuse to stand by unless it caught them up."""
    roles, history = TaskRoles(2), [STARTING]
    for phase in path:
        if phase == ACTIVE:
            legal = caught_up(history, (STARTING, ACTIVE))
        elif phase == STANDBY:
            legal = caught_up(history, (STARTING, STANDBY))
        else:
            legal = True
        before = roles.snapshot()
        if not legal:
            with pytest.raises(IllegalTaskMove):
                roles.follow(phase)
            assert roles.snapshot() == before
            return
        roles.follow(phase)
        history.append(phase)
        after = set(roles.snapshot())
        assert len(after) == 1  # one instance: every task alike
        expected = {RESTORING: RESTORING_TASK, ACTIVE: RUNNING, STANDBY: STANDBY_TASK, FENCED: LOST,
                    STOPPED: CLOSED}.get(phase)
        if expected is not None:
            assert after == {expected}
        else:  # starting: a running task pauses, any other stays
            assert after == {SUSPENDED if before[0] == RUNNING else before[0]}


def test_the_runner_s_paths_keep_the_tasks_rules() -> None:
    """Each path the runner takes (engine.runner): an active's start, an outage, a standby's
    spell and takeover, a fenced active standing by, a lost store, a stop."""
    paths = [
        [RESTORING, STARTING, ACTIVE, STARTING, ACTIVE, STOPPED],
        [RESTORING, STANDBY, RESTORING, STARTING, ACTIVE, FENCED, RESTORING, STANDBY, STOPPED],
        [STARTING, RESTORING, STARTING, STANDBY, STARTING, STANDBY, STOPPED],
        [RESTORING, STARTING, ACTIVE, RESTORING, STARTING, ACTIVE, FENCED],
    ]
    for path in paths:
        roles = TaskRoles(3)
        for phase in path:
            roles.follow(phase)
    assert set(PHASES) >= {p for path in paths for p in path}
