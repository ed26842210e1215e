"""The local RocksDB store and the state dir that holds it.

A state dir contains ``brewstream.lock`` (an flock held by the one process that owns
the dir) and ``store/`` (RocksDB).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType

from rocksdict import AccessType, Options, Rdict, WriteBatch, WriteOptions

from restorer.codec import (
    LAST_BATCH_MS,
    Entry,
    StoreState,
    commit_prefix,
    decode_entries,
    decode_u64,
    is_reserved,
    local_key,
    meta_key,
    offset_prefix,
    position_prefix,
    published_prefixes,
    route_prefix,
    task_offset_prefix,
    task_part_prefix,
    tasked_prefix,
)
from restorer.file_lock import lock_folder
from topics.errors import BrewError, disk_problem

log = logging.getLogger("brewstream")


class StateDir:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock_fd: int | None = None

    @property
    def store_path(self) -> Path:
        return self.path / "store"

    def lock(self) -> StateDir:
        """Take the dir for this process; a second owner gets a clear error."""
        self._lock_fd = lock_folder(self.path, "state dir", "--state-dir")
        return self

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None

    def __enter__(self) -> StateDir:
        return self.lock()

    def __exit__(self, *exc: object) -> None:
        self.unlock()

    def remove_store(self) -> None:
        shutil.rmtree(self.store_path, ignore_errors=True)


class Store:
    """Byte keys and values in RocksDB; every write is one synced WriteBatch.

    Writes and whole-store reads are serialised by a lock: rocksdict's snapshot
    iterators read the live database, and the store is small (one key per drink plus a
    few per partition), so a short lock is the simple way to a consistent read.
    """

    def __init__(self, path: Path, read_only: bool = False, follow: bool = False) -> None:
        """``read_only`` opens a point-in-time view that works beside a running writer;
        ``follow`` a view beside it that ``catch_up`` brings up to the writer's latest
        commit, without opening the store again (a RocksDB secondary instance, whose own
        few files live in a temporary folder until ``close``)."""
        self.path = Path(path)
        self._follower_dir: str | None = None
        if (read_only or follow) and not (self.path / "CURRENT").exists():
            raise BrewError(f"no store at {self.path}; run `brewstream run` or `brewstream restore` first")
        try:
            if follow:
                self._follower_dir = tempfile.mkdtemp(prefix="brewstream-follow-")
                self._db = Rdict(str(self.path), _options(), access_type=AccessType.secondary(self._follower_dir))
            elif read_only:
                self._db = Rdict(str(self.path), _options(), access_type=AccessType.read_only())
            else:
                self._db = Rdict(str(self.path), _options())
        except Exception as exc:  # rocksdict raises plain Exception for I/O errors
            self._drop_follower_dir()
            raise BrewError(f"cannot open the store at {self.path}: {_first_line(exc)}"
                            + (f"; {hint}" if (hint := disk_problem(str(exc))) else "")) from None
        self._lock = threading.Lock()
        self._sync = WriteOptions()
        self._sync.sync = True
        self._closed = False
        self._identity = _identity(self.path)

    def gone(self) -> str | None:
        """Why this store's folder is no longer the one opened, or None. A folder deleted
        under an open RocksDB goes on taking writes into files nobody can open again: a
        store that is gone must stop taking batches (``StoreGone``)."""
        now = _identity(self.path)
        if now is None:
            return f"the store at {self.path} was deleted"
        if now != self._identity:
            return f"the store at {self.path} was replaced by another folder"
        return None

    def get_u64(self, keys: Iterable[bytes]) -> dict[bytes, int]:
        """Values of the keys that exist."""
        out: dict[bytes, int] = {}
        for key in keys:
            value = self._db.get(key)
            if value is not None:
                out[key] = decode_u64(value)
        return out

    def next_offsets(self, topic: str) -> dict[int, int]:
        """The next input offset to apply, per partition of ``topic``."""
        return self._offsets(topic).next_offsets(topic)

    def furthest_offsets(self, topic: str) -> dict[int, int]:
        """Per partition of ``topic``, the furthest next input offset any task has reached
        (``next_offsets`` gives the least: where every task has applied all before it)."""
        state = self._offsets(topic)
        out = state.next_offsets(topic)
        for per_topic in state.task_offsets.values():
            for p, o in per_topic.get(topic, {}).items():
                out[p] = max(out.get(p, o), o)
        return out

    def _offsets(self, topic: str) -> StoreState:
        return decode_entries(self.scan(offset_prefix(topic)) + self.scan(task_offset_prefix(topic)))

    def counted_through_shuffle(self) -> bool:
        """Whether a task of this store has applied a part of a shuffle: it holds a part
        cursor (``codec.task_part_key``)."""
        return bool(self.scan(task_part_prefix()))

    def positions(self) -> dict[int, int]:
        """How far into each changelog partition this store has applied."""
        return decode_entries(self.scan(position_prefix())).positions

    def commit_markers(self) -> dict[int, int]:
        """The batch sequence each changelog partition's last commit marker names."""
        return decode_entries(self.scan(commit_prefix())).commits

    def tasked_partitions(self) -> set[int]:
        """The changelog partitions committed task by task (``codec.tasked_key``)."""
        return decode_entries(self.scan(tasked_prefix())).tasked

    def route_markers(self) -> dict[int, int]:
        """The routing version each changelog partition's last route marker names."""
        return decode_entries(self.scan(route_prefix())).routes

    def last_seq(self) -> int:
        """The sequence number of the last batch this store committed (0: none)."""
        return decode_entries(self.scan(commit_prefix())).last_seq

    def last_batch_ms(self) -> int | None:
        """When the last batch was committed (unix ms), if ever."""
        return self.get_u64([meta_key(LAST_BATCH_MS)]).get(meta_key(LAST_BATCH_MS))

    def local(self, name: str) -> bytes | None:
        """A store-local fact (see the codec), or None when it was never recorded."""
        value = self._db.get(local_key(name))
        return None if value is None else bytes(value)

    def scan(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        """Every entry whose key starts with ``prefix``."""
        out: list[tuple[bytes, bytes]] = []
        with self._lock:
            for key, value in self._db.items(from_key=prefix):
                if not bytes(key).startswith(prefix):  # type: ignore[arg-type]
                    break
                out.append((bytes(key), bytes(value)))  # type: ignore[arg-type]
        return out

    def commit(self, entries: Iterable[Entry], sync: bool = True) -> None:
        """Apply puts (and deletes, value None) atomically."""
        batch = WriteBatch(raw_mode=True)
        for key, value in entries:
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        try:
            with self._lock:
                self._db.write(batch, self._sync if sync else WriteOptions())
        except Exception as exc:  # rocksdict raises plain Exception for I/O errors
            raise StoreWriteError(self.path, exc) from None

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        with self._lock:
            pairs = [(bytes(k), bytes(v)) for k, v in self._db.items()]  # type: ignore[arg-type]
        return iter(pairs)

    def read_all(self) -> StoreState:
        return decode_entries(self.items())

    def key_count(self) -> int:
        with self._lock:
            return sum(1 for _ in self._db.keys())  # noqa: SIM118 - iterating Rdict itself fails in raw mode

    def holds_state(self) -> bool:
        """Whether any published state is here (counts, offsets, markers); store-local
        facts alone do not count."""
        with self._lock:
            it = self._db.iter()
            it.seek_to_first()
            if it.valid() and not is_reserved(bytes(it.key())):
                return True
        return any(self.scan(prefix) for prefix in published_prefixes())

    def is_empty(self) -> bool:
        with self._lock:
            it = self._db.iter()
            it.seek_to_first()
            return not it.valid()

    def flush(self) -> None:
        self._db.flush(wait=True)

    def catch_up(self) -> None:
        """A store opened with ``follow``: see every batch the writer has committed since."""
        try:
            with self._lock:
                self._db.try_catch_up_with_primary()
        except Exception as exc:  # rocksdict raises plain Exception
            raise BrewError(f"cannot follow the store at {self.path}: {_first_line(exc)}") from None

    def _drop_follower_dir(self) -> None:
        if self._follower_dir is not None:
            shutil.rmtree(self._follower_dir, ignore_errors=True)
            self._follower_dir = None

    def close(self) -> None:
        if not self._closed:
            with self._lock:
                try:
                    self._db.close()
                except Exception:
                    # Every write was a synced WAL write, so nothing is lost: the next open
                    # replays the WAL. The error that matters was raised by the write itself.
                    log.debug("closing the store at %s failed", self.path, exc_info=True)
                self._closed = True
            self._drop_follower_dir()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class StoreGone(BrewError):
    """The store's folder was deleted or replaced under a running process."""


class StoreWriteError(BrewError):
    """A write the store refused (a full disk, a read-only file system): nothing of it was applied."""

    def __init__(self, path: Path, exc: BaseException) -> None:
        cause = _first_line(exc)
        hint = disk_problem(cause) or "check the disk under it"
        super().__init__(f"cannot write the store at {path}: {cause}; {hint}; what the changelog holds is "
                         "applied on the next start, so nothing is lost")


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of ``path``, or None when it is not there."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _options() -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    return opts
