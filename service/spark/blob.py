"""Reading the blobs the project's JVM classes hand the driver (``GateCount``,
``CarryRows``): big-endian fields, counts and optional byte strings (pure). Every read
checks the blob's bounds, so a blob that does not follow its layout is a ``ValueError``,
never a short read."""

from __future__ import annotations

import struct


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
