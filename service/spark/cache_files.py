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
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return False


def keep_text(path: Path, text: str, kept: int, mode: int = 0o666) -> None:
    """Write ``path`` whole (a temporary file of this process renamed over it, created with
    ``mode`` less the umask), then remove all but the ``kept`` files of its folder with its
    suffix modified last (``keep_newest``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_suffix(f".{os.getpid()}.part")
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    part.replace(path)
    keep_newest(path.parent.glob(f"*{path.suffix}"), kept)
