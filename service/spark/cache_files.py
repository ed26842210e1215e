"""The JVM cache folder and its files, made once and kept for later starts, of which only
the last modified are kept: the launcher's commands (each renewed when a start uses it, so
the ones used last), the commands started ahead (``service.spark.head_start``) and the
unsigned jar copies (never touched, the class archive checks their mtime: so the ones made
last).

Imported by the command line's first step, before anything else: only the standard library."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

CACHE_ENV = "BREWSTREAM_JVM_CACHE"
OFF = "off"


def cache_dir() -> Path | None:
    """The folder (``BREWSTREAM_JVM_CACHE``, else the user's cache folder); None when that
    variable says ``off``."""
    where = os.environ.get(CACHE_ENV, "")
    if where.strip().lower() == OFF:
        return None
    if where:
        return Path(where)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "brewstream"


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


def archive_whole(archive: Path) -> bool:
    """A class archive of the folder (``service.spark.jvm_archive``) whose size is the one
    recorded when it was kept: never one cut short, which would kill the JVM mapping it."""
    try:
        return archive.stat().st_size == json.loads(archive.with_suffix(".json").read_text())["size"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
