"""The store notices its folder deleted or replaced under it, and a follower keeps up with a
writer (a real RocksDB in a temp dir)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from restorer.store import Store
from topics.errors import BrewError


def test_a_store_knows_when_its_folder_is_deleted_or_replaced(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with Store(path) as store:
        store.commit([(b"latte", b"\x00" * 8)])
        assert store.gone() is None
        shutil.rmtree(path)
        assert store.gone() == f"the store at {path} was deleted"
        path.mkdir()  # something (a restore, a user) puts a new folder at the same path
        assert store.gone() == f"the store at {path} was replaced by another folder"


def test_an_intact_store_is_not_gone_after_writes_and_a_flush(tmp_path: Path) -> None:
    with Store(tmp_path / "store") as store:
        for i in range(50):
            store.commit([(f"k{i}".encode(), b"\x00" * 8)])
        store.flush()
        assert store.gone() is None


def test_a_follower_sees_each_commit_of_the_writer_once_it_catches_up(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with Store(path) as writer:
        writer.commit([(b"latte", b"\x00" * 7 + b"\x01")])
        follower = Store(path, follow=True)
        own_files = Path(follower._follower_dir or "")
        assert own_files.is_dir() and follower.get_u64([b"latte"]) == {b"latte": 1}
        writer.commit([(b"latte", b"\x00" * 7 + b"\x02"), (b"mocha", b"\x00" * 7 + b"\x05")])
        writer.flush()  # into an SST file as well as the WAL: the follower reads both
        writer.commit([(b"latte", b"\x00" * 7 + b"\x03")])
        assert follower.get_u64([b"latte", b"mocha"]) == {b"latte": 1}  # not caught up yet
        follower.catch_up()
        assert follower.get_u64([b"latte", b"mocha"]) == {b"latte": 3, b"mocha": 5}
        follower.close()
        assert not own_files.exists()


def test_a_follower_needs_a_store(tmp_path: Path) -> None:
    with pytest.raises(BrewError, match="no store at"):
        Store(tmp_path / "none", follow=True)


def test_a_store_counted_through_a_shuffle_says_so_by_its_part_cursors(tmp_path: Path) -> None:
    from restorer.codec import encode_u64, task_offset_key, task_part_key

    with Store(tmp_path / "store") as store:
        store.commit([(b"latte", encode_u64(3)), (task_offset_key("orders", 0, 1), encode_u64(40))])
        assert not store.counted_through_shuffle()  # the direct pipeline's offsets, spread over the tasks
        store.commit([(task_part_key("orders", 0, 1), encode_u64(0))])
        assert store.counted_through_shuffle()


def test_the_furthest_offsets_are_the_highest_any_task_reached(tmp_path: Path) -> None:
    from restorer.codec import encode_u64, offset_key, task_offset_key

    with Store(tmp_path / "store") as store:
        assert store.furthest_offsets("orders") == {}
        store.commit([(offset_key("orders", 2), encode_u64(7))])  # a store of the layout before tasks
        assert store.furthest_offsets("orders") == {2: 7}
        store.commit([(task_offset_key("orders", 0, t), encode_u64(o)) for t, o in ((0, 40), (1, 55), (2, 12))])
        assert store.next_offsets("orders") == {0: 12, 2: 7}
        assert store.furthest_offsets("orders") == {0: 55, 2: 7}
