"""``brewstream status``'s per-task lines (pure)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from service.ops.status import Status, TaskView, status_text


@given(st.one_of(st.none(), st.integers(0, 10**6)), st.integers(0, 10**6))
def test_a_task_lags_exactly_when_more_than_the_last_commit_marker_is_unapplied(position: int | None,
                                                                                end: int) -> None:
    task = TaskView(0, 1, position, end)
    if position is None:
        assert task.lag == end  # nothing applied: every offset is behind
    else:
        assert (task.lag == 0) == (position >= end - 1)
        assert task.lag == max(0, end - position - 1)


def test_status_names_each_tasks_owner_and_position() -> None:
    s = Status(Path("/s/store"), "orders", [], None, 2, tasks=[TaskView(0, 2, 11, 12, "brew-1", 3),
                                                                TaskView(1, 0, None, 0)])
    lines = status_text(s, now=0).splitlines()
    assert lines[-3].split() == ["TASK", "SEQ", "POSITION", "END", "LAG", "OWNER"]
    assert lines[-2].split() == ["0", "2", "11", "12", "0", "brew-1", "(generation", "3)"]
    assert lines[-1].split() == ["1", "0", "-", "0", "0", "-"]
    assert s.as_json(0)["tasks"] == [
        {"task": 0, "seq": 2, "changelog_position": 11, "changelog_end": 12, "lag": 0, "owner": "brew-1",
         "generation": 3},
        {"task": 1, "seq": 0, "changelog_position": None, "changelog_end": 0, "lag": 0, "owner": None,
         "generation": None}]
