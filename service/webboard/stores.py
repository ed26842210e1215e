"""A pipeline's store, read by the board: opened read-only, checked, decoded, closed.

A read-only RocksDB view is a point in time, so every refresh opens a fresh one to see
what the running daemon wrote since; it never blocks the daemon's writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from restorer.store import StateDir, Store
from topics.errors import BrewError

T = TypeVar("T")
Check = Callable[[Store], object]


class NotShown(Exception):
    """Why a store is not shown; its message is the page's note."""


def read_store(state_dir: Path, pipeline: str, decode: Callable[[Iterable[tuple[bytes, bytes]]], T],
               check: Check | None = None) -> T:
    """The decoded store of ``brewstream <pipeline>`` in ``state_dir``, or ``NotShown``.

    ``check`` refuses (a BrewError) a store that is not its pipeline's state yet
    (``restorer.restore.check_restored``): an empty store whose restore has not ended is
    no table of zeros."""
    store_path = StateDir(Path(state_dir)).store_path
    if not (store_path / "CURRENT").exists():
        raise NotShown(f"the {pipeline} pipeline has no data yet (no store in {state_dir}); "
                       f"start it with `brewstream {pipeline}`")
    try:
        with Store(store_path, read_only=True) as store:
            if check is not None:
                check(store)
            return decode(store.items())
    except (BrewError, ValueError) as exc:
        raise NotShown(f"cannot read the {pipeline} store: {exc}") from None
