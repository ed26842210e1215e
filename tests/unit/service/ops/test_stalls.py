"""A partition held back by an open upstream transaction: found from the offsets alone, said
once when it has stood a few seconds, once when it goes on (``service.ops.stalls``)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from service.ops.stalls import HeldBack
from service.ops.status import HELD_BACK_AFTER_S, PartitionLag, Status, held_back, status_text


def test_a_partition_is_held_back_only_once_the_store_reached_its_last_stable_offset() -> None:
    stable = {0: 100, 1: 50, 2: 70}
    end = {0: 130, 1: 50, 2: 90}
    # 0: the store at the LSO, records past it: held back. 1: nothing past the LSO. 2: the
    # store is behind the LSO: that is lag, the daemon has work to do.
    assert held_back({0: 100, 1: 50, 2: 60}, stable, end) == {0: (100, 30)}
    assert held_back({}, stable, end) == {}


@given(st.dictionaries(st.integers(0, 5), st.tuples(st.integers(0, 100), st.integers(0, 100), st.integers(0, 100))))
def test_held_back_is_exactly_records_past_a_reached_lso(parts: dict[int, tuple[int, int, int]]) -> None:
    stored = {p: s for p, (s, _lso, _extra) in parts.items()}
    stable = {p: lso for p, (_s, lso, _extra) in parts.items()}
    end = {p: lso + extra for p, (_s, lso, extra) in parts.items()}
    held = held_back(stored, stable, end)
    for p, (s, lso, extra) in parts.items():
        assert (p in held) == (extra > 0 and s >= lso)
        if p in held:
            assert held[p] == (lso, extra)


def test_said_once_after_a_few_seconds_and_once_when_it_goes_on() -> None:
    watch = HeldBack(after_s=5.0)
    assert watch.look({1: (40, 3)}, 1000.0, 0.0) == ([], [])  # a producer at work, maybe
    assert watch.look({1: (40, 7)}, 1004.0, 4.0) == ([], [])
    began, ended = watch.look({1: (40, 9)}, 1005.0, 5.0)
    assert [(e.partition, e.lso, e.records, e.since) for e in began] == [(1, 40, 9, 1000.0)] and ended == []
    assert watch.look({1: (40, 12)}, 1030.0, 30.0) == ([], [])  # said once
    assert [(e.partition, e.records) for e in watch.current()] == [(1, 12)]
    began, ended = watch.look({}, 1064.0, 64.0)  # committed or aborted
    assert began == [] and [e.partition for e in ended] == [1]
    assert watch.current() == []


def test_a_moving_lso_is_producers_at_work_and_ends_an_episode() -> None:
    watch = HeldBack(after_s=5.0)
    for t in range(0, 60, 2):  # a transaction after another, each short: the LSO moves every look
        assert watch.look({0: (t * 10, 3)}, 1000.0 + t, float(t)) == ([], [])
    watch.look({0: (600, 3)}, 1060.0, 60.0)
    began, _ = watch.look({0: (600, 3)}, 1066.0, 66.0)
    assert [e.partition for e in began] == [0]
    began, ended = watch.look({0: (700, 1)}, 1068.0, 68.0)  # that one ended, another is open
    assert began == [] and [e.lso for e in ended] == [600]


def test_forgetting_returns_what_was_said() -> None:
    watch = HeldBack(after_s=0.0)
    watch.look({2: (5, 1)}, 0.0, 0.0)
    assert [e.partition for e in watch.forget()] == [2] and watch.current() == []


@given(st.lists(st.dictionaries(st.integers(0, 3), st.tuples(st.integers(0, 3), st.integers(1, 5)), max_size=4),
                max_size=30))
def test_every_episode_ends_once_for_each_time_it_began(looks: list[dict[int, tuple[int, int]]]) -> None:
    watch = HeldBack(after_s=HELD_BACK_AFTER_S)
    open_: set[int] = set()
    for i, held in enumerate(looks):
        began, ended = watch.look(held, 1000.0 + 3 * i, 3.0 * i)
        for e in ended:
            assert e.partition in open_
            open_.discard(e.partition)
        for e in began:
            assert e.partition not in open_ and e.partition in held
            open_.add(e.partition)
        assert {e.partition for e in watch.current()} == open_


def test_status_names_a_held_back_partition_and_a_deleting_changelog() -> None:
    parts = [PartitionLag(0, 10, 10, 0), PartitionLag(1, 40, 40, 0, held_back=9, held_since_ms=1_000_000)]
    risk = "changelog brew.c is not compacted (cleanup.policy=delete): …"
    status = Status(Path("/s"), "brew.orders.v1", parts, None, 0, changelog_risk=risk)
    text = status_text(status, now=1_064.0)
    assert "partition 1 held back by an open upstream transaction since 1970-01-01T00:16:40Z (64s): 9 records" in text
    assert "partition 0 held back" not in text and risk in text
    doc = status.as_json(1_064.0)
    assert doc["changelog_risk"] == risk
    assert [p["held_back"] for p in doc["partitions"]] == [0, 9]  # type: ignore[index, union-attr]
