"""The checkpoint dir's ownership and what a drop deletes, on real folders and flocks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.engine.checkpoint_dir import (
    SPARK_ENTRIES,
    CheckpointDir,
    drop_checkpoint,
    forget_unfinished_batches,
    overlap_problem,
    spark_entry,
)
from topics.errors import BrewError


def spark_checkpoint(root: Path) -> Path:
    """The files Spark leaves at a checkpoint location (as a run on Spark 4 did)."""
    for folder in ("offsets", "commits", "sources/0"):
        (root / folder).mkdir(parents=True)
    (root / "metadata").write_text('{"id":"q"}')
    (root / ".metadata.crc").write_bytes(b"crc")
    (root / "offsets" / "0").write_text("v1\n{}\n{}")
    (root / "commits" / "0").write_text("v1\n{}")
    (root / "sources" / "0" / "0").write_text("v1\n{}")
    return root


def test_a_checkpoint_dir_held_by_another_instance_is_refused_naming_it(tmp_path: Path) -> None:
    ckpt = spark_checkpoint(tmp_path / "ckpt")
    with CheckpointDir(ckpt, tmp_path / "a"):
        with pytest.raises(BrewError, match=rf"^checkpoint dir {ckpt} is in use by another brewstream process "
                                            rf"\(pid {os.getpid()}\); stop it first or pass another --checkpoint-dir$"):
            CheckpointDir(ckpt, tmp_path / "b").__enter__()
        assert (ckpt / "metadata").read_text() == '{"id":"q"}'  # refused, not touched
    with CheckpointDir(ckpt, tmp_path / "b"):  # released on exit
        pass


def test_a_drop_deletes_what_spark_wrote_and_keeps_the_lock_and_anything_else(tmp_path: Path) -> None:
    ckpt = spark_checkpoint(tmp_path / "ckpt")
    (ckpt / ".metadata.1f2e.tmp").write_text("{")
    (ckpt / "notes.txt").write_text("mine")
    (ckpt / ".bashrc").write_text("mine too")
    with CheckpointDir(ckpt, tmp_path / "state"):
        drop_checkpoint(ckpt)
        assert sorted(p.name for p in ckpt.iterdir()) == [".bashrc", "brewstream.lock", "notes.txt"]
        with pytest.raises(BrewError, match="in use"):  # the lock outlived the drop
            CheckpointDir(ckpt, tmp_path / "other").__enter__()
        drop_checkpoint(ckpt)  # nothing left of Spark's: nothing to do
    drop_checkpoint(tmp_path / "never-made")


@given(st.text(min_size=1, max_size=30).filter(lambda s: "/" not in s and "\x00" not in s))
def test_a_drop_takes_no_name_spark_does_not_write(name: str) -> None:
    if spark_entry(name):
        assert name in SPARK_ENTRIES or (name.startswith(".") and "metadata." in name)
    if not name.startswith("."):
        assert spark_entry(name) == (name in SPARK_ENTRIES)
    for kept in ("brewstream.lock", ".bashrc", "store", "metadata.json", ".metadata"):
        assert not spark_entry(kept)


def test_a_checkpoint_dir_that_is_holds_or_lies_in_the_state_dir_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state" / "drink-count"
    for ckpt, why in [(state, "is the state dir"), (tmp_path / "state", "holds the state dir"),
                      (tmp_path, "holds the state dir"), (state / "store" / "ckpt", "lies inside the store")]:
        problem = overlap_problem(ckpt, state)
        assert problem is not None and why in problem and problem.endswith("pass another --checkpoint-dir")
        with pytest.raises(BrewError, match=why):
            CheckpointDir(ckpt, state).__enter__()
    assert overlap_problem(tmp_path / "state" / "checkpoints" / "drink-count", state) is None
    assert overlap_problem(state / "checkpoint", state) is None  # beside the store, in the state dir
    state.mkdir(parents=True)
    (tmp_path / "alias").symlink_to(state, target_is_directory=True)
    assert "is the state dir" in (overlap_problem(tmp_path / "alias", state) or "")


@given(planned=st.sets(st.integers(0, 30)), committed=st.sets(st.integers(0, 30)))
def test_only_the_batches_planned_past_the_last_commit_are_forgotten(planned: set[int], committed: set[int]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp)
        (ckpt / "offsets").mkdir()
        (ckpt / "commits").mkdir()
        for b in planned:
            for name in (str(b), f".{b}.crc", f".{b}.0f3a.tmp"):
                (ckpt / "offsets" / name).write_text("v1\n{}")
        for b in committed:
            (ckpt / "commits" / str(b)).write_text("v1\n{}")
        last = max(committed, default=-1)
        unfinished = sorted(b for b in planned if b > last)
        assert forget_unfinished_batches(ckpt) == unfinished
        kept = {b for b in planned if b <= last}
        assert {f.name for f in (ckpt / "offsets").iterdir()} == {
            n for b in kept for n in (str(b), f".{b}.crc", f".{b}.0f3a.tmp")}
        assert {f.name for f in (ckpt / "commits").iterdir()} == {str(b) for b in committed}
        assert forget_unfinished_batches(ckpt) == []  # nothing left to forget


def test_a_checkpoint_without_logs_forgets_nothing(tmp_path: Path) -> None:
    assert forget_unfinished_batches(tmp_path / "none") == []
    assert forget_unfinished_batches(spark_checkpoint(tmp_path / "ckpt")) == []
    assert (tmp_path / "ckpt" / "offsets" / "0").exists()
