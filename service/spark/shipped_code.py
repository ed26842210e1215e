"""The code the executors run, shipped by the driver instead of installed on every worker.

On a cluster the executors unpickle brewstream's batch functions and import the modules
they live in (``service.drink_count.aggregate``, ``service.windows.aggregate`` and what
those import). Rather than asking for brewstream on every worker at the same path, the
driver zips the ``.py`` files of its own packages, as installed right now, and hands the
zip to Spark (``addPyFile``), which puts it on every Python worker's path. A worker then
needs Python with ``EXECUTOR_PACKAGES``, nothing of ours.

The zip is built at run time, never committed; only sources go in (no bytecode), so an
executor on another Python version compiles them itself. Its name is a digest of its
content: two processes running the same code share one file, and a changed checkout
gets a new one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import tempfile
import zipfile
from pathlib import Path

from topics.errors import BrewError

PACKAGES = ("service", "restorer", "topics", "sandbox")
# What the batch code imports beyond the standard library: an executor's Python needs
# them (pyspark at the driver's version). Its imports are checked where it is warmed up.
EXECUTOR_PACKAGES = ("pyspark", "pyarrow", "orjson", "msgspec")
# Fixed entry times make the bytes (and so the name) depend on the code only.
_EPOCH = (1980, 1, 1, 0, 0, 0)


def package_sources(packages: tuple[str, ...] = PACKAGES) -> list[tuple[str, bytes]]:
    """(path inside the zip, bytes) of every .py file of the packages, sorted."""
    out: list[tuple[str, bytes]] = []
    for name in packages:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise BrewError(f"cannot find the installed package {name!r} to ship to the executors")
        root = Path(next(iter(spec.submodule_search_locations)))
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" not in path.parts:
                out.append((f"{name}/{path.relative_to(root).as_posix()}", path.read_bytes()))
    return out


def zip_bytes(files: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for arcname, data in files:
            info = zipfile.ZipInfo(arcname, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    return buf.getvalue()


def code_zip(folder: Path | None = None) -> Path:
    """Write (once per content) the zip of brewstream's packages; its path."""
    data = zip_bytes(package_sources())
    folder = folder or default_folder()
    path = folder / f"brewstream-{hashlib.sha256(data).hexdigest()[:16]}.zip"
    if path.exists() and path.stat().st_size == len(data):
        return path
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Written beside and renamed into place: a process reading it never sees half a zip.
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".part")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        raise BrewError(f"cannot write the code for the executors to {folder}: {exc.strerror}") from None
    return path


def default_folder() -> Path:
    """A folder of this user's under the temp dir (one zip per code version, a few
    hundred KB each)."""
    folder = Path(tempfile.gettempdir()) / f"brewstream-{os.getuid()}" / "executor-code"
    for part in (folder.parent, folder):
        if part.exists() and part.stat().st_uid != os.getuid():
            raise BrewError(f"{part} belongs to another user; set TMPDIR to a folder of your own")
    return folder
