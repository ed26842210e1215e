"""The local RocksDB store and the state dir that holds it.

A state dir contains ``brewstream.lock`` (an flock held by the one process that owns
the dir) and ``store/`` (RocksDB).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType

from rocksdict import AccessType, Options, Rdict, WriteBatch, WriteOptions

from service.codec import Entry, StoreState, decode_entries, decode_u64
from service.errors import BrewError


class StateDir:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock_fd: int | None = None

    @property
    def store_path(self) -> Path:
        return self.path / "store"

    def lock(self) -> StateDir:
        """Take the dir for this process; a second owner gets a clear error."""
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path / "brewstream.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise BrewError(
                f"state dir {self.path} is in use by another brewstream process (pid {holder}); "
                "stop it first or pass another --state-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_fd = fd
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

    def __init__(self, path: Path, read_only: bool = False) -> None:
        """``read_only`` opens a point-in-time view that works beside a running writer."""
        self.path = Path(path)
        if read_only and not (self.path / "CURRENT").exists():
            raise BrewError(f"no store at {self.path}; run `brewstream run` or `brewstream restore` first")
        try:
            if read_only:
                self._db = Rdict(str(self.path), _options(), access_type=AccessType.read_only())
            else:
                self._db = Rdict(str(self.path), _options())
        except Exception as exc:  # rocksdict raises plain Exception for I/O errors
            raise BrewError(f"cannot open the store at {self.path}: {exc}") from None
        self._lock = threading.Lock()
        self._sync = WriteOptions()
        self._sync.sync = True
        self._closed = False

    def get_u64(self, keys: Iterable[bytes]) -> dict[bytes, int]:
        """Values of the keys that exist."""
        out: dict[bytes, int] = {}
        for key in keys:
            value = self._db.get(key)
            if value is not None:
                out[key] = decode_u64(value)
        return out

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
        with self._lock:
            self._db.write(batch, self._sync if sync else WriteOptions())

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        with self._lock:
            pairs = [(bytes(k), bytes(v)) for k, v in self._db.items()]  # type: ignore[arg-type]
        return iter(pairs)

    def read_all(self) -> StoreState:
        return decode_entries(self.items())

    def key_count(self) -> int:
        with self._lock:
            return sum(1 for _ in self._db.keys())  # noqa: SIM118 - iterating Rdict itself fails in raw mode

    def is_empty(self) -> bool:
        with self._lock:
            it = self._db.iter()
            it.seek_to_first()
            return not it.valid()

    def flush(self) -> None:
        self._db.flush(wait=True)

    def close(self) -> None:
        if not self._closed:
            with self._lock:
                self._db.close()
                self._closed = True

    def __enter__(self) -> Store:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _options() -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    return opts
