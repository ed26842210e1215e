"""The instance's phases as a state machine: the table against the rules it states, on
any sequence of moves."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.instance.health import (
    ACTIVE,
    FENCED,
    MOVES,
    PHASES,
    RESTORING,
    STANDBY,
    STARTING,
    STOPPED,
    Health,
    IllegalMove,
    check_move,
)


def allowed(current: str, new: str) -> bool:
    """The rules in words, as an oracle."""
    if current == STOPPED:
        return new == STOPPED  # the end
    if new == ACTIVE:
        return current in (STARTING, ACTIVE)  # only once its query started
    if new == STANDBY:
        return current in (RESTORING, STARTING, STANDBY)  # only once caught up
    return True  # anything may restore, start again, be fenced or stop


@given(st.sampled_from(PHASES), st.sampled_from(PHASES))
def test_the_table_is_the_rules(current: str, new: str) -> None:
    assert (new in MOVES[current]) == allowed(current, new)


@given(st.lists(st.sampled_from(PHASES), max_size=30))
def test_health_takes_exactly_the_allowed_moves(moves: list[str]) -> None:
    health = Health()
    for new in moves:
        current = health.phase.name
        if allowed(current, new):
            health.set(new, "reason")
            assert health.phase.name == new
        else:
            with pytest.raises(IllegalMove):
                health.set(new, "reason")
            assert health.phase.name == current  # a refused move changes nothing


@given(st.text(max_size=12), st.sampled_from(PHASES))
def test_total_over_names(name: str, current: str) -> None:
    try:
        check_move(current, name)
    except ValueError:
        assert name not in PHASES
    except IllegalMove:
        assert name in PHASES and not allowed(current, name)


def test_the_runner_s_paths_are_moves() -> None:
    """Each path the runner takes (engine.runner): an active's start, an outage, a standby's
    spell and takeover, a fenced active standing by, a lost store, a stop."""
    paths = [
        [RESTORING, STARTING, ACTIVE, STARTING, ACTIVE, STOPPED],
        [RESTORING, STANDBY, RESTORING, STARTING, ACTIVE, FENCED, RESTORING, STANDBY, STOPPED],
        [STARTING, RESTORING, STARTING, STANDBY, STOPPED],
        [RESTORING, STARTING, ACTIVE, RESTORING, STARTING, ACTIVE, FENCED],
    ]
    for path in paths:
        health = Health()
        for phase in path:
            health.set(phase, "")
