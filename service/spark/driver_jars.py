"""Spark's jars on the driver's class path, named one by one instead of Spark's
``<SPARK_HOME>/jars/*``, so that a start pays only for what brewstream uses:

- **Left out** (``UNUSED``): spark-mllib declares a session extension
  (``org.apache.spark.sql.ml.InternalFunctionRegistration``) that Spark finds with a
  ServiceLoader over the class path and runs as it builds every session. It registers
  MLlib's SQL functions through Scala's runtime reflection, whose own start-up is most of
  that second. No brewstream query calls them, and no other jar of Spark's declares an
  extension.
- **Copied unsigned**: Java verifies a signed jar's classes as they load, and its class
  sharing archives none of them (``service.spark.jvm_archive``): Spark's code generator
  (janino, commons-compiler) was loaded and verified again by every start's first batch.
  The copy holds the same entries, less the signature files, in the JVM cache folder.

The order is the folder's, as the file system lists it: the JVM expands a wildcard in that
order too, so a class found in two jars comes from the same one.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import zipfile
from collections.abc import Callable
from pathlib import Path

from service.spark.cache_files import keep_newest

log = logging.getLogger("brewstream.jvm")

UNUSED = ("spark-mllib_",)
# How the class path is built, part of the class archive's key: the JVM maps no archive
# written with another class path, and one that exists is never written again.
FORM = f"jars named, less {','.join(UNUSED)}, signed ones copied unsigned"
# A class path this long stays a wildcard: one argument of a command may be 128 KiB at most.
MAX_CLASS_PATH = 100_000
_SIGNATURE = re.compile(r"META-INF/[^/]+\.(SF|RSA|DSA|EC)", re.IGNORECASE)
_KEPT_COPIES = 16  # unsigned copies kept; the oldest beyond that are removed


def named(command: list[str], jars: Path, listed: list[str], unsigned: Callable[[Path], Path]) -> list[str]:
    """``command`` with the ``<jars>/*`` entry of its class path (``-cp``) replaced by the
    jars ``listed`` there (the folder's names, in its order), less ``UNUSED``, each as
    ``unsigned`` gives it. Unchanged when there is no such entry, or the class path would
    grow too long for one argument."""
    found = _class_path(command)
    if found is None:
        return command
    at, entries = found
    wildcard = str(jars / "*")
    if wildcard not in entries:
        return command
    kept = [str(unsigned(jars / name)) for name in listed
            if name.lower().endswith(".jar") and not name.startswith(UNUSED)]
    at_wildcard = entries.index(wildcard)
    class_path = os.pathsep.join([*entries[:at_wildcard], *kept, *entries[at_wildcard + 1:]])
    if len(class_path) > MAX_CLASS_PATH:
        return command
    return [*command[:at], class_path, *command[at + 1:]]


def listed(folder: Path) -> list[str]:
    """The names in ``folder`` in the order the file system lists them (readdir's, which
    the JVM's wildcard expansion reads too)."""
    return [entry.name for entry in os.scandir(folder) if entry.is_file()]


def is_signature(name: str) -> bool:
    """A jar entry that signs the jar: a signature file or a signature block."""
    return bool(_SIGNATURE.fullmatch(name))


def unsigned_copy(folder: Path | None) -> Callable[[Path], Path]:
    """A jar as the driver should load it: itself when unsigned, else its unsigned copy in
    ``folder`` (made once, whole). Itself whenever there is no folder or
    the copy cannot be made: the JVM then verifies it, as it always did."""
    def choose(jar: Path) -> Path:
        if folder is None:
            return jar
        try:
            with zipfile.ZipFile(jar) as source:
                if not any(is_signature(name) for name in source.namelist()):
                    return jar
                stat = jar.stat()
                key = hashlib.sha256(f"{jar.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
                copy = folder / f"{jar.stem}-{key}.jar"
                if copy.is_file():  # never touched: the class archive checks each jar's mtime
                    return copy
                folder.mkdir(parents=True, exist_ok=True)
                part = copy.with_suffix(f".{os.getpid()}.part")
                try:
                    with zipfile.ZipFile(part, "w") as target:
                        for info in source.infolist():
                            if not is_signature(info.filename):
                                target.writestr(info, source.read(info))
                    # Linked, not renamed over: a copy another start made meanwhile stays
                    # the one its JVM (and the archive it writes) saw.
                    with contextlib.suppress(FileExistsError):
                        os.link(part, copy)
                finally:
                    part.unlink(missing_ok=True)
                keep_newest(folder.glob("*.jar"), _KEPT_COPIES)
                return copy
        except (OSError, zipfile.BadZipFile) as exc:
            log.debug("the driver loads %s signed: %s", jar, exc)
            return jar
    return choose


def copies_present(command: list[str], folder: Path) -> bool:
    """Whether every jar of ``command``'s class path in ``folder`` (a copy) is still there."""
    found = _class_path(command)
    return found is None or all(Path(e).is_file() for e in found[1] if Path(e).parent == folder)


def _class_path(command: list[str]) -> tuple[int, list[str]] | None:
    """Where ``command``'s class path (``-cp``) is, and its entries; None without one."""
    try:
        at = command.index("-cp") + 1
        return at, command[at].split(os.pathsep)
    except (ValueError, IndexError):
        return None
