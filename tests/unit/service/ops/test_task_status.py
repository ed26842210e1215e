"""``brewstream status``'s per-task lines (pure)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from service.instance.health import ACTIVE, FENCED, PHASES, STOPPED
from service.instance.lease import Announcement
from service.instance.task_roles import RUNNING, TASK_ROLES
from service.ops.status import PartitionLag, Status, TaskView, status_text, task_owner


@given(st.one_of(st.none(), st.integers(0, 10**6)), st.integers(0, 10**6))
def test_a_task_lags_exactly_when_more_than_the_last_commit_marker_is_unapplied(position: int | None,
                                                                                end: int) -> None:
    task = TaskView(0, 1, position, end)
    if position is None:
        assert task.lag == end  # nothing applied: every offset is behind
    else:
        assert (task.lag == 0) == (position >= end - 1)
        assert task.lag == max(0, end - position - 1)


def test_status_names_each_tasks_owner_role_and_position() -> None:
    s = Status(Path("/s/store"), "orders", [], None, 2, tasks=[TaskView(0, 2, 11, 12, "brew-1", 3, "running"),
                                                                TaskView(1, 0, None, 0)])
    lines = status_text(s, now=0).splitlines()
    assert lines[-3].split() == ["TASK", "SEQ", "POSITION", "END", "LAG", "HERE", "OWNER"]
    assert lines[-2].split() == ["0", "2", "11", "12", "0", "running", "brew-1", "(generation", "3)"]
    assert lines[-1].split() == ["1", "0", "-", "0", "0", "-", "-"]
    assert s.as_json(0)["tasks"] == [
        {"task": 0, "seq": 2, "changelog_position": 11, "changelog_end": 12, "lag": 0, "owner": "brew-1",
         "generation": 3, "role": "running"},
        {"task": 1, "seq": 0, "changelog_position": None, "changelog_end": 0, "lag": 0, "owner": None,
         "generation": None, "role": None}]


announcements = st.builds(
    Announcement, instance=st.sampled_from(["a", "b", "c"]), host=st.just("h"), pid=st.integers(1, 3),
    state_dir=st.just("/s"), changelog=st.just("cl"), role=st.sampled_from(PHASES),
    holds_lease=st.booleans(), generation=st.integers(0, 4),
    tasks=st.one_of(st.just(()), st.lists(st.sampled_from(TASK_ROLES), min_size=1, max_size=3).map(tuple)))


@given(st.lists(announcements, max_size=6), st.integers(0, 3))
def test_a_task_s_owner_is_the_latest_generation_that_runs_it_and_never_a_stopped_one(
        announced: list[Announcement], task: int) -> None:
    owner = task_owner(task, announced)

    def runs(a: Announcement) -> bool:  # the rule in words, as an oracle
        if a.role in (STOPPED, FENCED):
            return False  # a stopped or fenced instance commits nothing
        if not a.tasks:  # an instance that does not name its tasks: the lease holder, active
            return a.holds_lease and a.role == ACTIVE
        return task < len(a.tasks) and a.tasks[task] == RUNNING

    running = [a for a in announced if runs(a)]
    if not running:
        assert owner is None
    else:
        assert owner in running and owner.generation == max(a.generation for a in running)


def test_a_side_input_s_lag_is_shown_and_counted() -> None:
    s = Status(Path("/s/store"), "orders", [PartitionLag(0, 5, 5, 0)], None, 2,
               side={"menu": [PartitionLag(0, 3, 7, 4), PartitionLag(1, None, 2, 2)]})
    assert s.lag == 6  # a menu nobody reads is lag like any input's
    text = status_text(s, now=0)
    assert "total lag on orders: 0" in text and "total lag on menu: 6" in text
    assert [line.split() for line in text.splitlines() if line.startswith(("0 ", "1 "))][-2:] == [
        ["0", "3", "7", "4"], ["1", "-", "2", "2"]]
    doc = s.as_json(0)
    assert doc["lag"] == 6 and doc["side_inputs"] == {"menu": [
        {"partition": 0, "stored": 3, "end": 7, "lag": 4}, {"partition": 1, "stored": None, "end": 2, "lag": 2}]}
