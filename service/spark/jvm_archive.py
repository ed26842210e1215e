"""A class-data archive for Spark's driver JVM, so that a restart skips most class loading.

Every start of a daemon loads and verifies Spark's classes in a fresh JVM. The JVM can
save the classes it loaded into an archive when it exits (``-XX:ArchiveClassesAtExit``,
Java's dynamic class-data sharing) and map that archive at the next start
(``-XX:SharedArchiveFile``), which skips most of the loading (docs/performance-notes.md).

What is relied on, and where it is checked:

- The JVM checks an archive against its own build and class path, and ignores one that
  does not match. So an archive only changes how fast classes load, never what runs.
- It does not check that the file is whole: it maps a truncated archive and dies of
  SIGBUS. So the JVM never sees a file that is still being written or that was cut short.
  It writes ``<key>.<pid>.part`` beside a log of the regions it wrote; a part becomes the
  archive (a rename, under the lock) only once its writer has exited, its header is
  there and the file reaches the end of every region the log names (``_whole``). The
  JVM writes the header last, over a hole left at the start, so a writer killed before
  the end leaves no magic number. The archive's size is kept beside it and checked
  before every use, so a file cut short later is dropped, not mapped.
- One writer at a time: only a process that holds ``<key>.lock`` starts one, and none
  starts while an earlier writer is alive.

The archive sits in ``$BREWSTREAM_JVM_CACHE`` (default ``$XDG_CACHE_HOME/brewstream`` or
``~/.cache/brewstream``), about 170 MB; ``BREWSTREAM_JVM_CACHE=off`` turns it off.
Its name is a digest of the Java binary, pyspark and the jars, so an upgrade starts a new one.
The folder keeps the ``KEEP_ARCHIVES`` archives used last (a start that maps one marks it
used) and drops older ones as a new one is kept: each upgrade would otherwise leave 170 MB
behind. A JVM that maps a dropped archive keeps it (the file lives on while it is mapped);
the next start of that set of jars writes it again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from restorer.file_lock import try_lock
from sandbox.processes import alive
from service.instance.signals import Terminated
from service.spark import driver_jars
from service.spark.cache_files import archive_whole, cache_dir

log = logging.getLogger("brewstream.jvm")

WRITE_WAIT_S = 180.0  # what a stop waits for its JVM to write the archive
# The JVM logs each region it writes: "... region (rw ) 0: 65686800 bytes, ... file offset 0x00001000 ...".
REGION = re.compile(r"region \(\s*\w+\s*\)\s+\d+:\s+(\d+) bytes, .* file offset 0x([0-9a-fA-F]+)")
MAGIC = (0xF00BABA8).to_bytes(4, "little")  # a dynamic archive's first bytes (HotSpot's filemap.hpp)
QUIET = "-Xlog:cds*=off"  # nothing of the archive on the JVM's stdout, whatever happens to it
SAFE_PATH = re.compile(r"[\w./+-]+")
KEEP_ARCHIVES = 4  # a few set-ups on one machine (a local master, a cluster, a test suite) keep theirs


@dataclass
class Plan:
    """What the driver JVM gets: the options, and the part it writes at exit (if it does)."""

    options: str = ""
    part: Path | None = None
    lock_fd: int | None = None

    def writer_started(self, jvm_pid: int | None) -> None:
        """Note the JVM that writes the part, so nobody takes it while that JVM lives."""
        if self.part is not None and jvm_pid is not None:
            _pid_file(self.part).write_text(str(jvm_pid))

    def finish(self, proc: subprocess.Popen[bytes] | None) -> None:
        """After the session stopped: let the JVM exit and write, wait for it, keep the archive.

        Ends the JVM (it exits when its stdin closes), so call it last."""
        if self.part is None:
            return
        try:
            if proc is not None and proc.poll() is None:
                log.info("saving Spark's classes for faster starts (once; up to %.0f s)", WRITE_WAIT_S)
                started = time.monotonic()
                if not end_jvm(proc, WRITE_WAIT_S):
                    # Only the archive waits here: the stop itself is done and clean.
                    log.warning("stopped waiting for Spark's JVM to save its classes; the next start "
                                "takes them if it finished")
                    return
                log.info("Spark's JVM exited in %.1f s", time.monotonic() - started)
            if not _adopt(self.part):
                log.info("Spark's JVM left no whole class archive; a later start tries again")
        finally:
            self.release()

    def release(self) -> None:
        if self.lock_fd is not None:
            os.close(self.lock_fd)  # closing the descriptor releases the flock
            self.lock_fd = None


def end_jvm(proc: subprocess.Popen[bytes] | None, wait_s: float) -> bool:
    """End a driver JVM this process launched and wait up to ``wait_s`` for it to exit
    (pyspark's gateway exits when its stdin closes; the JVM writes a class archive on the
    way). True once it is gone; never raises."""
    if proc is None or proc.poll() is not None:
        return True
    try:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(wait_s)
    except (subprocess.TimeoutExpired, OSError, KeyboardInterrupt, Terminated) as exc:
        log.debug("left Spark's JVM (pid %s) to exit by itself: %s", proc.pid, type(exc).__name__)
        return False
    return True


_SHARING = re.compile(r"-Xshare:\w+|-XX:(SharedArchiveFile|ArchiveClassesAtExit)=.*|-XX:[+-]AutoCreateSharedArchive")


def shares_classes(java_options: str) -> bool:
    """Whether the user's Java options set class sharing themselves (their archive, or
    none): then brewstream's would contend with theirs, and stays out."""
    return any(_SHARING.fullmatch(option) for option in java_options.split())


def plan(jars: list[Path], write: bool, class_path: Iterable[Path] = (), on_class_path: bool = False) -> Plan:
    """Map the archive if there is a whole one; else, with ``write``, have this JVM write it.
    ``class_path``: the JVM's class path beyond Spark's jars (``spark_conf.driver_class_path``);
    ``on_class_path``: brewstream's ``jars`` are on it too (a local master), not in spark.jars.

    Never raises: without a usable cache the JVM starts as it would without this module."""
    try:
        folder = cache_dir()
        # The paths go into Java options, split at blanks, and into -Xlog, split at ':'.
        if folder is None or not SAFE_PATH.fullmatch(str(folder)):
            return Plan()
        if (blocker := next((p for p in class_path if _holds_files(p)), None)) is not None:
            # Java's class sharing takes no class path with a folder that holds files: the
            # JVM neither maps an archive then nor writes one, and an attempt to write costs
            # every stop about a second and 2-3 CPU-s (docs/performance-notes.md).
            log.info("no class archive for Spark's JVM: its class path holds the folder %s, which Java's "
                     "class sharing cannot archive (start-up takes a few seconds more)", blocker)
            return Plan()
        folder.mkdir(parents=True, exist_ok=True)
        base = folder / f"spark-driver-{_key(jars, on_class_path)}"
        archive = base.with_suffix(".jsa")
        try:
            lock_fd = try_lock(base.with_suffix(".lock"))
        except OSError:
            lock_fd = None  # a folder without flock (some network file systems): map, never write
        held = Plan(lock_fd=lock_fd)
        try:
            mine = held.lock_fd is not None  # only the lock's holder adopts, drops or writes
            if mine:
                for part in _parts(base):
                    _adopt(part)
            if _usable(archive, drop=mine):
                _mark_used(archive)
                return Plan(f"-XX:SharedArchiveFile={archive} {QUIET}")
            if not mine or not write or any(_writing(p) for p in _parts(base)) \
                    or shutil.disk_usage(folder).free < 1 << 30:
                return Plan()
            part = base.parent / f"{base.name}.{os.getpid()}.part"
            log.info("Spark's JVM saves its classes to %s as it exits (once: later starts are faster)", archive)
            writing = Plan(f"-XX:ArchiveClassesAtExit={part} {QUIET} -Xlog:cds=info:file={_log_file(part)}",
                           part, held.lock_fd)
            held.lock_fd = None  # the writer's plan holds the lock until its JVM has written
            return writing
        finally:
            held.release()
    except (OSError, RuntimeError) as exc:  # RuntimeError: no home directory to find
        log.debug("no class archive for Spark's JVM: %s", exc)
        return Plan()


def _holds_files(path: Path) -> bool:
    """A folder with anything in it: the JVM refuses to archive with one ("non-empty directory")."""
    try:
        return path.is_dir() and any(path.iterdir())
    except OSError:
        return False


def java_binary(env: Mapping[str, str] | None = None) -> str | None:
    """spark-class's choice of Java: ``$JAVA_HOME/bin/java``, else ``java`` on the PATH
    (None: there is none)."""
    env = os.environ if env is None else env
    if env.get("JAVA_HOME"):
        return str(Path(env["JAVA_HOME"]) / "bin" / "java")
    return shutil.which("java", path=env.get("PATH"))


def _key(jars: list[Path], on_class_path: bool) -> str:
    """What an archive depends on: the Java binary the launcher runs, pyspark, the jars,
    whether they are on the class path and how Spark's are named (the JVM maps no archive
    written for another class path)."""
    import pyspark

    java = Path(java_binary() or "java")
    parts = [pyspark.__version__, str(Path(pyspark.__file__).parent), f"class path: {on_class_path}",
             driver_jars.FORM]
    for path in [java.resolve(), *jars]:
        try:
            st = path.stat()
            parts.append(f"{path}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            parts.append(str(path))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _usable(archive: Path, drop: bool) -> bool:
    """A whole archive: its size is the one recorded when it was kept. With ``drop`` (under
    the lock, so that no adoption is half done), one that is not goes."""
    if archive_whole(archive):
        return True
    if drop:
        for path in (archive, archive.with_suffix(".json")):
            path.unlink(missing_ok=True)
    return False


def _adopt(part: Path) -> bool:
    """Make a finished part the archive (True), or drop it; leave one whose writer still lives."""
    if _writing(part):
        return False
    size = _whole(part)
    if size is not None:
        archive = part.parent / (part.name.split(".", 1)[0] + ".jsa")
        archive.with_suffix(".json").write_text(json.dumps({"size": size}))
        os.replace(part, archive)
        log.info("kept Spark's class archive %s (%d MB)", archive, size >> 20)
        _prune(archive)
    for path in (part, _log_file(part), _pid_file(part)):
        path.unlink(missing_ok=True)
    return size is not None


def _mark_used(archive: Path) -> None:
    """The archive's record says when a start last mapped it (its mtime), for ``_prune``."""
    with contextlib.suppress(OSError):  # a read-only cache: the archive may be dropped sooner
        os.utime(archive.with_suffix(".json"))


def _prune(kept: Path) -> None:
    """Drop the archives beside ``kept`` beyond the ``KEEP_ARCHIVES`` used last, each under
    its own lock (one being adopted or checked is left for a later prune)."""
    def last_used(archive: Path) -> float:
        try:
            return archive.with_suffix(".json").stat().st_mtime
        except OSError:
            return 0.0  # no record: _usable would drop it anyway

    others = sorted((a for a in kept.parent.glob("spark-driver-*.jsa") if a != kept), key=last_used, reverse=True)
    for archive in others[KEEP_ARCHIVES - 1:]:
        try:
            lock_fd = try_lock(archive.with_suffix(".lock"))
        except OSError:
            continue
        if lock_fd is None:
            continue
        try:
            for path in (archive, archive.with_suffix(".json")):
                path.unlink(missing_ok=True)
            log.info("dropped Spark's class archive %s, the least recently used of %d", archive.name,
                     len(others) + 1)
        finally:
            os.close(lock_fd)


def _whole(part: Path) -> int | None:
    """The part's size if its header is written and it reaches the end of every region
    its writer logged, else None."""
    try:
        text = _log_file(part).read_text(errors="replace")
        size = part.stat().st_size
        with part.open("rb") as f:
            head = f.read(len(MAGIC))
    except OSError:
        return None
    ends = [int(offset, 16) + int(length) for length, offset in REGION.findall(text)]
    return size if head == MAGIC and ends and size >= max(ends) else None


def _writing(part: Path) -> bool:
    """Whether the JVM that writes ``part`` is still running."""
    try:
        pid = int(_pid_file(part).read_text())
    except (OSError, ValueError):
        return False
    try:
        return alive(pid) and str(part) in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def _parts(base: Path) -> list[Path]:
    """Every writer's part, by any file it left: a writer killed early leaves only its log."""
    names = {path.with_suffix(".part") for path in base.parent.glob(f"{base.name}.*.*")
             if path.suffix in (".part", ".log", ".pid")}
    return sorted(names)


def _log_file(part: Path) -> Path:
    return part.with_suffix(".log")


def _pid_file(part: Path) -> Path:
    return part.with_suffix(".pid")
