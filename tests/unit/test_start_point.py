import json
from pathlib import Path

from service.start_point import EARLIEST, checkpoint_resume_offsets, choose_start

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
