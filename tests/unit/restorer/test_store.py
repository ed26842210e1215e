"""The store notices its folder deleted or replaced under it (a real RocksDB in a temp dir)."""

from __future__ import annotations

import shutil
from pathlib import Path

from restorer.store import Store


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
