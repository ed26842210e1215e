"""The decision made before every start and restore: what the changelog still gives the store."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from restorer.integrity import (
    CATCH_UP,
    REPUBLISH,
    RESTORE,
    ChangelogRefused,
    ChangelogView,
    StoreFacts,
    plan_start,
    routing_refusal,
    unapplied,
)

T = "brew.drink-count-changelog"


def view(low: dict[int, int], end: dict[int, int], topic_id: str = "A", partitions: int = 3) -> ChangelogView:
    return ChangelogView(T, topic_id, partitions, low, end)


def test_an_empty_store_restores_from_the_start() -> None:
    plan = plan_start(view({0: 0, 1: 0, 2: 0}, {0: 5, 1: 0, 2: 9}), StoreFacts(empty=True))
    assert plan.action == RESTORE and plan.todo == {0: (0, 5), 2: (0, 9)}


def test_an_empty_store_refuses_a_changelog_that_lost_its_oldest_records() -> None:
    with pytest.raises(ChangelogRefused, match=r"no longer holds its oldest records.*--accept-changelog-loss"):
        plan_start(view({0: 4, 1: 0, 2: 0}, {0: 9, 1: 3, 2: 3}), StoreFacts(empty=True))
    plan = plan_start(view({0: 4, 1: 0, 2: 0}, {0: 9, 1: 3, 2: 3}), StoreFacts(empty=True), accept_loss=True)
    assert plan.action == RESTORE and plan.start == {0: 4, 1: 0, 2: 0} and plan.warning


def test_a_recreated_changelog_gets_the_store_again() -> None:
    facts = StoreFacts(False, {0: 10, 1: 10, 2: 10}, "A", 3)
    assert plan_start(view({0: 0, 1: 0, 2: 0}, {0: 50, 1: 50, 2: 50}, "B"), facts).action == REPUBLISH


def test_a_changelog_behind_the_store_gets_the_store_again() -> None:
    facts = StoreFacts(False, {0: 10, 1: 10, 2: 10})
    assert plan_start(view({0: 0, 1: 0, 2: 0}, {0: 3, 1: 10, 2: 10}), facts).action == REPUBLISH


def test_records_the_store_still_needs_are_gone() -> None:
    facts = StoreFacts(False, {0: 10, 1: 10, 2: 10}, "A", 3)
    with pytest.raises(ChangelogRefused, match=r"lost records this store has not applied"):
        plan_start(view({0: 12, 1: 0, 2: 0}, {0: 20, 1: 10, 2: 10}), facts)
    assert plan_start(view({0: 12, 1: 0, 2: 0}, {0: 20, 1: 10, 2: 10}), facts, True).action == REPUBLISH


def test_a_changed_partition_count_is_refused_whatever_else() -> None:
    facts = StoreFacts(False, {0: 1}, "A", 3)
    with pytest.raises(ChangelogRefused, match=r"has 6 partitions but the state was built against 3"):
        plan_start(view({p: 0 for p in range(6)}, {p: 1 for p in range(6)}, partitions=6), facts, True)


def test_a_store_of_another_changelog_is_refused() -> None:
    facts = StoreFacts(False, {0: 10, 1: 10, 2: 10}, "A", 3, "other.brew.drink-count-changelog")
    with pytest.raises(ChangelogRefused, match=rf"published to changelog other\.brew\.drink-count-changelog, not {T}"):
        plan_start(view({0: 0, 1: 0, 2: 0}, {0: 50, 1: 50, 2: 50}, "B"), facts, True)
    # Its own name, or none recorded (a store written before names were), decides as before.
    for name in (T, None):
        same = StoreFacts(False, {0: 10, 1: 10, 2: 10}, "A", 3, name)
        assert plan_start(view({0: 0, 1: 0, 2: 0}, {0: 50, 1: 50, 2: 50}, "B"), same).action == REPUBLISH
    # An empty store holds nothing to mix: it is restored from this changelog.
    empty = StoreFacts(True, {}, None, None, "other.brew.drink-count-changelog")
    assert plan_start(view({0: 0, 1: 0, 2: 0}, {0: 5, 1: 5, 2: 5}), empty).action == RESTORE


offsets = st.dictionaries(st.integers(0, 5), st.integers(0, 50), max_size=6)


@settings(max_examples=500, deadline=None)
@given(low=offsets, span=offsets, positions=offsets, empty=st.booleans(), recorded_id=st.sampled_from([None, "A", "B"]),
       built=st.sampled_from([None, 3, 6]), accept=st.booleans(), name=st.sampled_from([None, T, "other"]))
def test_the_decision_is_total_and_safe(low: dict[int, int], span: dict[int, int], positions: dict[int, int],
                                        empty: bool, recorded_id: str | None, built: int | None,
                                        accept: bool, name: str | None) -> None:
    parts = sorted(set(low) | set(span))
    lows = {p: low.get(p, 0) for p in parts}
    ends = {p: lows[p] + span.get(p, 0) for p in parts}
    facts = StoreFacts(empty, {} if empty else positions, recorded_id, built, name)
    v = view(lows, ends, "A", 3)
    foreign = not empty and name == "other"
    try:
        plan = plan_start(v, facts, accept)
    except ChangelogRefused as exc:
        # Refused only for another pipeline's store, a changed shape, or lost records
        # without the user's say.
        lost = any(lo > 0 for lo in lows.values()) if empty else any(
            lows[p] > positions.get(p, 0) for p in parts)
        assert foreign or (built not in (None, 3)) or (lost and not accept), str(exc)
        return
    assert not foreign  # another pipeline's store is never used, whatever the user accepts
    assert built in (None, 3)
    if empty:
        assert plan.action == RESTORE
        assert all(lows[p] <= s <= ends[p] for p, s in plan.start.items())
    elif plan.action == CATCH_UP:
        # Catching up never skips a record the store has not applied.
        assert all(plan.start[p] == positions.get(p, 0) >= lows[p] for p in parts)
        assert recorded_id in (None, "A")
    else:
        assert plan.action == REPUBLISH



_parts = st.dictionaries(st.integers(0, 3), st.integers(0, 50), max_size=4)


@given(low=_parts, end=_parts, positions=_parts, empty=st.booleans())
def test_an_empty_store_lacks_exactly_what_its_changelog_holds_beyond_it(
        low: dict[int, int], end: dict[int, int], positions: dict[int, int], empty: bool) -> None:
    low = {p: min(lo, end.get(p, 0)) for p, lo in low.items()}
    missing = unapplied(view(low, end), StoreFacts(empty, positions))
    if not empty:
        assert missing == {}  # a store that holds state is read as it is
        return
    for p, e in end.items():
        first = max(positions.get(p, 0), low.get(p, 0))
        assert missing.get(p) == ((first, e) if first < e else None)
    assert set(missing) <= set(end)


def test_an_empty_store_beside_an_empty_or_applied_changelog_lacks_nothing() -> None:
    assert unapplied(view({0: 0}, {0: 0}), StoreFacts(empty=True)) == {}
    # Restored from a changelog of aborted transactions only: its positions are at the end.
    assert unapplied(view({0: 0, 1: 0}, {0: 4, 1: 2}), StoreFacts(True, {0: 4, 1: 2})) == {}
    assert unapplied(view({0: 0, 1: 0}, {0: 4, 1: 2}), StoreFacts(True)) == {0: (0, 4), 1: (0, 2)}
    assert unapplied(view({0: 7}, {0: 7}), StoreFacts(True)) == {}  # everything compacted or deleted away


@given(st.booleans(), st.dictionaries(st.integers(0, 5), st.integers(0, 3), max_size=6), st.integers(0, 3))
def test_a_store_goes_on_only_by_the_routing_its_history_was_written_by(
        committed: bool, routes: dict[int, int], version: int) -> None:
    why = routing_refusal("brew.windows-changelog", 3, committed, routes, version, "windows")
    # Oracle: no markers means the whole keys' rule (version 0); every marker must name the writer's.
    written_by = set(routes.values()) or {0}
    assert (why is None) == (not committed or written_by == {version})
    if why is not None:
        assert "`brewstream republish-changelog --store windows --partitions 3`" in why and "\n" not in why


def test_a_windows_changelog_of_an_earlier_brewstream_is_refused_naming_the_command() -> None:
    why = routing_refusal("brew.windows-changelog", 3, True, {}, 1, "windows")
    assert why is not None and why.startswith("changelog brew.windows-changelog was written with its keys routed")
    assert routing_refusal("brew.windows-changelog", 3, False, {}, 1, "windows") is None  # nothing written yet
    assert routing_refusal("brew.drink-count-changelog", 3, True, {}, 0, "drink-count") is None  # as before
