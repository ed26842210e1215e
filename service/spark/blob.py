"""Reading the blobs the project's JVM classes hand the driver (``GateCount``,
``CarryRows``): how they cross from the JVM (``handed_over``), then big-endian fields,
counts and optional byte strings (pure). Every read checks the blob's bounds, so a blob
that does not follow its layout is a ``ValueError``, never a short read."""

from __future__ import annotations

import contextlib
import os
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path

_PREFIX = "brewstream-blob-"
_swept: list[bool] = []  # whether this process has swept the temporary folder yet


def _of_a_live_process(name: str) -> bool:
    """Whether the blob file ``name`` (``brewstream-blob-<pid>-…``) belongs to a running
    process; a name without a pid is kept, as is one of a process we may not signal."""
    pid = name[len(_PREFIX):].split("-", 1)[0]
    if not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True
    return True


def sweep_blob_files(folder: Path) -> list[Path]:
    """Remove the blob files of processes that no longer run (a driver killed between the
    JVM writing a blob and Python removing it leaves one); return what was removed."""
    removed = []
    with contextlib.suppress(OSError):
        for path in folder.glob(_PREFIX + "*"):
            if not _of_a_live_process(path.name):
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed.append(path)
    return removed


def handed_over(call: Callable[[str | None], object], what: str) -> bytes:
    """The blob a JVM method hands over (``Blobs.handOver``, which says why through a
    file): ``call`` gets a fresh temporary file's path, or None when none can be made, and
    answers the blob's length once it wrote it there, or the blob itself. The file is
    gone when this returns; one left by a killed driver goes at the next driver's first blob."""
    if not _swept:
        _swept.append(True)
        sweep_blob_files(Path(tempfile.gettempdir()))
    try:
        fd, path = tempfile.mkstemp(prefix=f"{_PREFIX}{os.getpid()}-")
        os.close(fd)
    except OSError:
        path = None  # the JVM answers the blob itself: slower, as whole
    try:
        got = call(path)
        if isinstance(got, bytes | bytearray):
            return bytes(got)
        if path is None or not isinstance(got, int):
            raise ValueError(f"{what} came as {type(got).__name__}, neither bytes nor a length")
        with open(path, "rb") as f:
            blob = f.read()
        if len(blob) != got:
            raise ValueError(f"{what}: {len(blob)} bytes in its file, {got} written")
        return blob
    finally:
        if path is not None:
            with contextlib.suppress(OSError):
                os.unlink(path)


class BlobReader:
    def __init__(self, blob: bytes, what: str) -> None:
        self.blob, self.at, self.what = blob, 0, what

    def take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.blob):
            raise ValueError(f"{self.what} ends at byte {len(self.blob)}, short of {self.at + n}")
        out = self.blob[self.at:self.at + n]
        self.at += n
        return out

    def unpack(self, fmt: str) -> tuple[int, ...]:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))

    def count(self) -> int:
        n = self.unpack(">i")[0]
        if n < 0:
            raise ValueError(f"a negative count ({n}) in {self.what}")
        return n

    def optional(self) -> bytes | None:
        """Bytes after their length, or None for the length -1."""
        n = self.unpack(">i")[0]
        return None if n == -1 else self.take(n)

    def done(self) -> None:
        """``ValueError`` unless the whole blob has been read."""
        if self.at < len(self.blob):
            raise ValueError(f"{len(self.blob) - self.at} bytes after the end of {self.what}")
