"""The input stage's share ranges (pure): each input partition's share of a batch starts
where the stage's last committed share of it ended, so the shares of one partition follow
each other, whatever Spark planned; a batch Spark planned past that point is refused, as
it would skip the offsets between."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.engine.start_point import PlannedBatch
from service.shuffle.input_stage import CheckpointSkipped, share_ranges

offsets = st.dictionaries(st.integers(0, 5), st.integers(0, 1000), max_size=6)


@given(progress=offsets, starts=st.none() | offsets, moves=offsets)
def test_each_share_starts_where_the_last_one_ended_or_is_refused(
        progress: dict[int, int], starts: dict[int, int] | None, moves: dict[int, int]) -> None:
    # A batch's ends move each partition it names past the progress (PlannedBatch.ends).
    ends = {p: max(progress.get(p, 0), (starts or {}).get(p, 0)) + 1 + n for p, n in moves.items()}
    planned = PlannedBatch(starts, None)
    skipped = [p for p in ends if p in progress and (starts or {}).get(p, progress[p]) > progress[p]]
    if skipped:
        with pytest.raises(CheckpointSkipped, match=f"partition {min(skipped)} "):
            share_ranges(planned, progress, ends)
        return
    ranges = share_ranges(planned, progress, ends)
    assert set(ranges) == set(ends)
    for p, (start, end) in ranges.items():
        assert end == ends[p] and start < end
        assert start == progress.get(p, (starts or {}).get(p, 0))


@given(progress=offsets, starts=st.none() | offsets, planned_ends=offsets, seen=offsets)
def test_any_planned_batch_gives_ranges_or_is_refused(progress: dict[int, int], starts: dict[int, int] | None,
                                                      planned_ends: dict[int, int], seen: dict[int, int]) -> None:
    """Whatever Spark planned (a partition added under the query and still empty: planned
    from 0 to 0), the ranges of the ends the batch reaches (``PlannedBatch.ends``) are
    given, or the batch is refused for skipping: nothing else is raised."""
    planned = PlannedBatch(starts, planned_ends)
    ends = planned.ends(seen, progress)
    try:
        ranges = share_ranges(planned, progress, ends)
    except CheckpointSkipped:
        assert any(p in progress and (starts or {}).get(p, progress[p]) > progress[p] for p in ends)
        return
    for p, end in ends.items():
        start = progress.get(p, min((starts or {}).get(p, 0), end))
        assert ranges.get(p) == ((start, end) if start < end else None)


def test_a_partition_added_and_still_empty_gets_no_share() -> None:
    assert share_ranges(PlannedBatch({0: 5, 3: 0}, {0: 9, 3: 0}), {0: 5}, {0: 9, 3: 0}) == {0: (5, 9)}


def test_a_batch_planned_past_the_progress_is_refused_in_words() -> None:
    with pytest.raises(CheckpointSkipped, match="starts input partition 1 at offset 9, past offset 5"):
        share_ranges(PlannedBatch({1: 9}, {1: 12}), {1: 5}, {1: 12})
