import json
import shutil
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from service.engine.start_point import EARLIEST, PlannedBatch, checkpoint_resume_offsets, choose_start

T = "brew.orders.v1"


def test_no_checkpoint_starts_from_store_and_earliest_for_unknown_partitions() -> None:
    sp = choose_start(T, [0, 1, 2], {0: 10, 2: 5}, {}, None)
    assert not sp.use_checkpoint
    assert json.loads(sp.starting_offsets_json() or "") == {T: {"0": 10, "1": EARLIEST, "2": 5}}


def test_checkpoint_behind_or_equal_to_store_is_used() -> None:
    sp = choose_start(T, [0, 1], {0: 10, 1: 7}, {}, {0: 8, 1: 7})
    assert sp.use_checkpoint and sp.starting_offsets is None


def test_checkpoint_ahead_of_store_is_dropped() -> None:
    sp = choose_start(T, [0, 1], {0: 10}, {1: 0}, {0: 10, 1: 4})
    assert not sp.use_checkpoint
    assert "ahead" in sp.reason
    assert sp.starting_offsets == {T: {"0": 10, "1": EARLIEST}}


def test_checkpoint_at_earliest_with_empty_store_is_fine() -> None:
    sp = choose_start(T, [0], {}, {0: 100}, {0: 100})
    assert sp.use_checkpoint


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_reads_the_last_committed_batch(tmp_path: Path) -> None:
    meta = '{"batchWatermarkMs":0}'
    write(tmp_path / "offsets" / "0", f"v1\n{meta}\n" + json.dumps({T: {"0": 4, "1": 2}}))
    write(tmp_path / "offsets" / "1", f"v1\n{meta}\n" + json.dumps({T: {"0": 9, "1": 6}}))
    write(tmp_path / "commits" / "0", "v1\n{}")
    assert checkpoint_resume_offsets(tmp_path, T) == {0: 4, 1: 2}


def test_falls_back_to_initial_offsets_and_none(tmp_path: Path) -> None:
    assert checkpoint_resume_offsets(tmp_path, T) is None
    write(tmp_path / "sources" / "0" / "0", "\x00v1\n" + json.dumps({T: {"0": 0, "1": 0}}))
    assert checkpoint_resume_offsets(tmp_path, T) == {0: 0, 1: 0}


def test_a_checkpoint_pointing_at_deleted_input_is_dropped() -> None:
    sp = choose_start(T, [0, 1], {0: 10, 1: 10}, {0: 0, 1: 40}, {0: 10, 1: 10})
    assert not sp.use_checkpoint and "gone" in sp.reason


def _checkpoint(root: Path, offsets: dict[int, str], commits: list[int]) -> Path:
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text('{"id":"x"}')
    for batch, text in offsets.items():
        (root / "offsets" / str(batch)).write_text(text)
    for batch in commits:
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return root


GOOD = 'v1\n{"batchWatermarkMs":0}\n{"brew.orders.v1":{"0":5,"1":7}}'


def test_a_whole_checkpoint_has_no_problem_and_tells_a_batch_end(tmp_path: Path) -> None:
    from service.engine.start_point import batch_end_offsets, checkpoint_problem

    root = _checkpoint(tmp_path / "c", {0: GOOD, 1: GOOD}, [0])
    assert checkpoint_problem(root, T) is None
    assert batch_end_offsets(root, 1, T) == {0: 5, 1: 7}
    assert batch_end_offsets(root, 2, T) is None
    assert checkpoint_problem(tmp_path / "none", T) is None


def test_damaged_checkpoints_are_named(tmp_path: Path) -> None:
    from service.engine.start_point import checkpoint_problem

    for i, (offsets, commits) in enumerate([
        ({0: GOOD, 1: GOOD[: len(GOOD) // 2]}, [0]),  # truncated last offsets log
        ({0: GOOD, 1: ""}, [0]),                      # empty file
        ({0: GOOD}, [3]),                              # a commit without its offsets
        ({0: "v1\n{not json"}, []),
    ]):
        problem = checkpoint_problem(_checkpoint(tmp_path / str(i), offsets, commits), T)
        assert problem is not None and not problem.other_input, problem


def test_a_whole_checkpoint_of_another_input_is_told_apart_from_a_damaged_one(tmp_path: Path) -> None:
    from service.engine.start_point import checkpoint_problem

    other = GOOD.replace(T, "brew.drink-count-repartition")
    problem = checkpoint_problem(_checkpoint(tmp_path / "other", {0: GOOD, 1: other}, [0]), T)
    assert problem is not None and problem.other_input
    assert problem.verdict == f"was made for another input (offsets/1 does not name {T})"


def test_input_gaps_name_lost_and_reset_partitions() -> None:
    from service.engine.start_point import input_gaps

    gaps = input_gaps({0: 10, 1: 50, 2: 5}, {0: (30, 60), 1: (0, 20), 2: (0, 9)}, recreated=False)
    assert [(g.partition, g.reset, g.lost) for g in gaps] == [(0, False, 20), (1, True, 0)]
    assert "offsets 10..29 were deleted" in gaps[0].describe()
    assert [g.partition for g in input_gaps({0: 1, 2: 1}, {0: (0, 9), 1: (0, 9), 2: (0, 9)}, True)] == [0, 2]


def test_the_replay_filter_is_needed_only_below_the_store() -> None:
    from service.engine.start_point import PlannedBatch

    assert PlannedBatch({0: 10, 1: 5}).replay_filter({0: 10, 1: 5}) == {}
    assert PlannedBatch({0: 8, 1: 5}).replay_filter({0: 10, 1: 5}) == {0: 10}
    assert PlannedBatch(None).replay_filter({0: 10}) == {0: 10}  # unknown start: always filter
    assert PlannedBatch({}).replay_filter({2: 1}) == {2: 1}


_offsets = st.dictionaries(st.integers(0, 4), st.integers(0, 30), max_size=5)


@given(seen=_offsets, end=st.none() | _offsets, applied=_offsets)
def test_a_batch_ends_at_the_furthest_of_its_rows_and_its_plan(seen: dict[int, int], end: dict[int, int] | None,
                                                               applied: dict[int, int]) -> None:
    from service.engine.start_point import PlannedBatch

    ends = PlannedBatch(None, end).ends(seen, applied)
    for p in {*seen, *(end or {})}:
        furthest = max(seen.get(p, 0), (end or {}).get(p, 0))
        assert ends.get(p) == (furthest if furthest > applied.get(p, -1) else None)
    assert set(ends) <= {*seen, *(end or {})}


def test_a_batch_starts_where_the_previous_ended(tmp_path: Path) -> None:
    from service.engine.start_point import batch_start_offsets

    root = _checkpoint(tmp_path / "c", {0: GOOD, 1: GOOD}, [0])
    (root / "sources" / "0").mkdir(parents=True)
    (root / "sources" / "0" / "0").write_bytes(b'\x00v1\n{"brew.orders.v1":{"0":1,"1":2}}')
    assert batch_start_offsets(root, 0, T) == {0: 1, 1: 2}
    assert batch_start_offsets(root, 1, T) == {0: 5, 1: 7}
    assert batch_start_offsets(root, 5, T) is None


def test_a_batch_plans_nothing_only_when_it_starts_where_it_ends_everywhere(tmp_path: Path) -> None:
    from service.engine.start_point import planned_batch

    def planned_nothing(root: Path, batch_id: int, topic: str) -> bool:
        return planned_batch(root, batch_id, topic).reads_nothing

    def offsets(**parts: int) -> str:
        return 'v1\n{"batchWatermarkMs":0}\n' + json.dumps({T: {p[1:]: o for p, o in parts.items()}})

    root = _checkpoint(tmp_path / "c", {0: offsets(p0=3, p1=0), 1: offsets(p0=3, p1=0), 2: offsets(p0=3, p1=1),
                                        3: offsets(p0=3, p1=1, p2=0)}, [0, 1])
    write(root / "sources" / "0" / "0", "\x00v1\n" + json.dumps({T: {"0": 3, "1": 0}}))
    assert planned_nothing(root, 0, T)  # the first batch over an input with nothing new
    assert planned_nothing(root, 1, T)
    assert not planned_nothing(root, 2, T)  # one partition moved
    assert not planned_nothing(root, 3, T)  # a partition added: its records are to be read
    assert not planned_nothing(root, 4, T)  # not planned yet
    assert not planned_nothing(tmp_path / "none", 0, T)
    assert not planned_batch(None, 0, T).reads_nothing  # no checkpoint dir
    write(root / "sources" / "0" / "0", "\x00v1\n" + json.dumps({T: {"0": 1, "1": 0}}))
    assert not planned_nothing(root, 0, T)


def test_a_checkpoint_without_its_metadata_is_damaged_and_an_empty_one_is_not(tmp_path: Path) -> None:
    from service.engine.start_point import checkpoint_problem

    empty = tmp_path / "empty"
    empty.mkdir()
    assert checkpoint_problem(empty, T) is None  # Spark writes a new one there
    (empty / "brewstream.lock").write_text("12")
    (empty / "offsets").mkdir()  # folders Spark made, no log yet
    assert checkpoint_problem(empty, T) is None
    for i, logged in enumerate(["offsets", "commits", "sources"]):
        root = _checkpoint(tmp_path / str(i), {0: GOOD}, [0])
        write(root / "sources" / "0" / "0", "\x00v1\n" + json.dumps({T: {"0": 0}}))
        for other in {"offsets", "commits", "sources"} - {logged}:
            shutil.rmtree(root / other)
        (root / "metadata").unlink()
        problem = checkpoint_problem(root, T)
        assert problem is not None and problem.detail == f"its metadata file is missing, beside {logged}"
        assert problem.verdict.startswith("is damaged (")


@given(st.one_of(st.none(), st.dictionaries(st.integers(0, 5), st.integers(0, 10**12), max_size=4)),
       st.one_of(st.none(), st.dictionaries(st.integers(0, 5), st.integers(0, 10**12), max_size=4)))
def test_a_planned_batch_knows_how_many_offsets_it_spans_or_says_none(
        start: dict[int, int] | None, end: dict[int, int] | None) -> None:
    n = PlannedBatch(start, end).offsets
    if start is None or end is None or any(p not in start for p in end):
        assert n is None
    else:
        assert n == sum(max(0, o - start[p]) for p, o in end.items()) and n >= 0


# What a checkpoint file may hold once damaged or written by something else: text, bytes
# that are no UTF-8, JSON nested past the parser's depth, and pieces of a whole log.
DEEP = "v1\n" + '{"a":' * 5000 + "1" + "}" * 5000
CONTENTS = st.one_of(
    st.text(max_size=80), st.binary(max_size=80).map(lambda b: b.decode("latin-1")),
    st.sampled_from([GOOD, DEEP, "v1\n" + "[" * 5000, "v1", "", f'v1\n{{}}\n{{"{T}":5}}', f'v1\n{{"{T}":{{"x":1}}}}',
                     GOOD.replace(T, "other"), '{"id":"x"}', "[1]", "\x00v1\n" + json.dumps({T: {"0": 0}})]),
)
FILES = ["metadata", "offsets/0", "offsets/1", "offsets/2", "commits/0", "commits/1", "sources/0/0"]


@given(files=st.dictionaries(st.sampled_from(FILES), CONTENTS, max_size=7), binary=st.booleans())
def test_reading_any_checkpoint_is_total(tmp_path_factory: Any, files: dict[str, str], binary: bool) -> None:
    """Whatever the checkpoint's files hold, reading them ends in a verdict, never an
    exception; and one found whole tells where it resumes."""
    from service.engine.start_point import checkpoint_problem, planned_batch

    root = tmp_path_factory.mktemp("ck")
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if binary:
            path.write_bytes(text.encode("utf-8", "surrogatepass") + b"\xff\xfe")
        else:
            path.write_text(text, encoding="utf-8", errors="surrogatepass")
    problem = checkpoint_problem(root, T)
    for batch in (0, 1, 2):
        planned_batch(root, batch, T)
    if problem is None:
        checkpoint_resume_offsets(root, T)
