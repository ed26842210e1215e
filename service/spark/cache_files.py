"""Files of the JVM cache folder made once and kept for later starts, of which only the
last modified are kept: the launcher's commands (each renewed when a start uses it, so the
ones used last) and the unsigned jar copies (never touched, the class archive checks their
mtime: so the ones made last)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path


def keep_newest(files: Iterable[Path], keep: int) -> None:
    """Remove every file of ``files`` but the ``keep`` modified last. Other starts share the
    folder: a file one of them removed meanwhile is simply gone, never an error."""
    dated: list[tuple[float, Path]] = []
    for path in files:
        with contextlib.suppress(OSError):
            dated.append((path.stat().st_mtime, path))
    dated.sort(key=lambda item: item[0], reverse=True)
    for _, old in dated[max(keep, 0):]:
        with contextlib.suppress(OSError):
            old.unlink(missing_ok=True)
