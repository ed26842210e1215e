"""Reads of a running brewstream process tree's memory, for ``bench.memory``: every
process's RSS (and PSS, anonymous and file-backed parts when /proc shows them), the
driver JVM's Native Memory Tracking summary, and the RocksDB store's own figures.

A read that fails (a worker that exited, a JVM without tracking, a /proc file this
kernel hides) leaves its figure out instead of failing the run: a partial breakdown
still says where most of the memory is.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.nmt import (
    HeapInfo,
    NmtError,
    NmtSummary,
    parse_heap_info,
    parse_jstat,
    parse_nmt,
    parse_smaps,
    parse_smaps_rollup,
    resident_within,
)
from bench.rss import role_of, tree_processes  # the roles the benchmark's RSS split uses

JCMD_TIMEOUT_S = 30.0
# RocksDB's figures (``DB::GetProperty``) read from the store, in bytes.
ROCKSDB_PROPERTIES = ("rocksdb.cur-size-all-mem-tables", "rocksdb.size-all-mem-tables",
                      "rocksdb.block-cache-capacity", "rocksdb.block-cache-usage",
                      "rocksdb.block-cache-pinned-usage", "rocksdb.estimate-table-readers-mem",
                      "rocksdb.total-sst-files-size")
# What the driver imports: its RSS with these alone is the part of the driver that does not
# depend on the load (no pandas or pyarrow: tests/integration/test_driver_imports.py).
DRIVER_IMPORTS = "import pyspark.sql, pyspark.sql.streaming, rocksdict, confluent_kafka, service.engine.runner, " \
                 "service.drink_count.pipeline"


@dataclass(frozen=True)
class ProcMemory:
    pid: int
    role: str  # driver, jvm, python workers, other
    rss: int
    pss: int | None  # None where smaps_rollup is unreadable
    anon: int | None  # RssAnon: heap, stacks, arenas
    file: int | None  # RssFile: mapped libraries, jars, the class archive
    threads: int


@dataclass
class TreeMemory:
    procs: list[ProcMemory] = field(default_factory=list)

    def of(self, role: str) -> list[ProcMemory]:
        return [p for p in self.procs if p.role == role]

    def rss(self, role: str | None = None) -> int:
        return sum(p.rss for p in self.procs if role is None or p.role == role)

    def pss(self, role: str | None = None) -> int | None:
        values = [p.pss for p in self.procs if role is None or p.role == role]
        return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def read_tree(pid: int) -> TreeMemory:
    """Every process of the tree rooted at ``pid``, as it is now."""
    out = TreeMemory()
    for proc in tree_processes(pid):
        with contextlib.suppress(psutil.Error):
            out.procs.append(_read(proc, role_of(proc, pid)))
    return out


def _read(proc: psutil.Process, role: str) -> ProcMemory:
    status = _status(proc.pid)
    rollup = _rollup(proc.pid)
    return ProcMemory(proc.pid, role, proc.memory_info().rss, rollup.get("Pss"), status.get("RssAnon"),
                      status.get("RssFile"), proc.num_threads())


def _rollup(pid: int) -> dict[str, int]:
    try:
        return parse_smaps_rollup(Path(f"/proc/{pid}/smaps_rollup").read_text())
    except OSError:
        return {}


def _status(pid: int) -> dict[str, int]:
    # /proc/PID/status has the same "Key:  N kB" lines as smaps_rollup.
    try:
        return parse_smaps_rollup(Path(f"/proc/{pid}/status").read_text())
    except OSError:
        return {}


def jcmd_for(pid: int) -> str | None:
    """The jcmd of the JDK the JVM runs from (an attach from another version's may fail),
    else one on the PATH."""
    with contextlib.suppress(OSError):
        exe = Path(f"/proc/{pid}/exe").resolve()
        candidate = exe.parent / "jcmd"
        if candidate.is_file():
            return str(candidate)
    from shutil import which

    return which("jcmd")


def _jcmd(pid: int, *command: str) -> tuple[str, str]:
    """(stdout, why it failed, if it did) of one jcmd command to the JVM ``pid``."""
    jcmd = jcmd_for(pid)
    if jcmd is None:
        return "", "no jcmd found next to the JVM or on the PATH"
    try:
        done = subprocess.run([jcmd, str(pid), *command], capture_output=True, text=True,
                              timeout=JCMD_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return "", f"jcmd failed: {exc}"
    return done.stdout, "" if done.returncode == 0 else f"jcmd exited {done.returncode}: {done.stderr.strip()[:200]}"


def native_memory(pid: int) -> tuple[NmtSummary | None, str]:
    """The JVM's NMT summary, or None and why not."""
    out, problem = _jcmd(pid, "VM.native_memory", "summary")
    try:
        return parse_nmt(out), ""
    except NmtError as exc:
        return None, f"{exc} ({problem})" if problem else str(exc)


def gc_counts(pid: int) -> dict[str, float]:
    """The JVM's collections so far and their seconds (``jstat -gcutil``); empty if unreadable."""
    jcmd = jcmd_for(pid)
    if jcmd is None:
        return {}
    try:
        done = subprocess.run([str(Path(jcmd).with_name("jstat")), "-gcutil", str(pid)], capture_output=True,
                              text=True, timeout=JCMD_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return {}
    return parse_jstat(done.stdout)


def heap_info(pid: int) -> HeapInfo | None:
    """The JVM's heap, committed and in use, by its collector's own count."""
    out, _ = _jcmd(pid, "GC.heap_info")
    return parse_heap_info(out)


def rocksdb_figures(store: Path) -> dict[str, int]:
    """RocksDB's own figures for the store, from a read-only open of it beside the daemon.
    That instance replays the same write-ahead log, so its memtables hold what the
    daemon's do; its block cache is its own (the daemon's cache usage is not visible from
    another process), so the capacity is the figure that bounds the daemon's."""
    from rocksdict import AccessType, Options, Rdict

    out: dict[str, int] = {}
    if not (store / "CURRENT").exists():
        return out
    try:
        db = Rdict(str(store), Options(raw_mode=True), access_type=AccessType.read_only())
    except Exception:  # rocksdict raises plain Exception for I/O errors
        return out
    try:
        for name in ROCKSDB_PROPERTIES:
            with contextlib.suppress(Exception):
                value = db.property_int_value(name)
                if value is not None:
                    out[name] = int(value)
    finally:
        db.close()
    return out


def import_baseline_rss() -> int | None:
    """RSS of a fresh Python that imported what the daemon's driver imports, and nothing else."""
    code = f"{DRIVER_IMPORTS}\nimport psutil; print(psutil.Process().memory_info().rss)"
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
        return int(done.stdout.split()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class JvmMaps:
    heap: int | None  # resident bytes of the Java heap, None where its range is unknown
    class_archive: int  # resident bytes of the mapped class archives (.jsa), the JDK's own and Spark's


def jvm_maps(pid: int, heap: HeapInfo | None) -> JvmMaps | None:
    """Resident bytes of the JVM's heap (its mappings within the range the heap spans) and of
    its class archives, from /proc/PID/smaps; None where that is unreadable."""
    try:
        maps = parse_smaps(Path(f"/proc/{pid}/smaps").read_text())
    except OSError:
        return None
    resident = (resident_within(maps, heap.low, heap.high)
                if heap is not None and heap.low is not None and heap.high is not None else None)
    return JvmMaps(resident, sum(m.rss for m in maps if m.path.endswith(".jsa")))
