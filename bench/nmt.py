"""Pure parsers for the memory figures ``bench.memory`` reads: a JVM's Native Memory
Tracking summary (``jcmd PID VM.native_memory summary``) and a process's
``/proc/PID/smaps_rollup``.

Both take whatever text they are given: the summary parser raises ``NmtError`` (and
nothing else) for text that holds no summary, the rollup parser keeps the lines it
understands and ignores the rest, so a kernel that adds a field breaks nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

UNITS = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3}
_AMOUNT = r"(\d+)\s*(B|KB|MB|GB)?"
_TOTAL = re.compile(rf"^\s*Total:\s*reserved={_AMOUNT},\s*committed={_AMOUNT}", re.M)
# "-                 Java Heap (reserved=524288KB, committed=81920KB)"
_CATEGORY = re.compile(rf"^-\s*(?P<name>[^(\n]*?)\s*\(reserved={_AMOUNT},\s*committed={_AMOUNT}\)", re.M)
# "Native Memory Tracking:" then, when the JVM runs without it, "... not enabled".
_NOT_ENABLED = re.compile(r"Native memory tracking is not enabled", re.I)


class NmtError(ValueError):
    """Text that holds no Native Memory Tracking summary; the message says why."""


@dataclass(frozen=True)
class NmtCategory:
    reserved: int  # bytes
    committed: int  # bytes


@dataclass(frozen=True)
class NmtSummary:
    reserved: int  # bytes, over every category
    committed: int
    categories: dict[str, NmtCategory] = field(default_factory=dict)

    def committed_of(self, name: str) -> int:
        """A category's committed bytes; 0 for one the JVM did not list (it omits tiny ones)."""
        category = self.categories.get(name)
        return category.committed if category is not None else 0


def _bytes(number: str, unit: str | None) -> int:
    # jcmd prints KB unless asked for another scale; a bare number is KB too.
    return int(number) * UNITS[unit or "KB"]


def parse_nmt(text: str) -> NmtSummary:
    """The totals and every category of a ``VM.native_memory summary`` output, in bytes."""
    if _NOT_ENABLED.search(text):
        raise NmtError("the JVM runs without Native Memory Tracking (-XX:NativeMemoryTracking=summary)")
    total = _TOTAL.search(text)
    if total is None:
        raise NmtError("no 'Total: reserved=…, committed=…' line")
    categories: dict[str, NmtCategory] = {}
    for m in _CATEGORY.finditer(text):
        name = m["name"].strip()
        if name:
            categories[name] = NmtCategory(_bytes(m[2], m[3]), _bytes(m[4], m[5]))
    return NmtSummary(_bytes(total[1], total[2]), _bytes(total[3], total[4]), categories)


# "Rss:              123456 kB"
_ROLLUP = re.compile(r"^(?P<key>[A-Za-z_]+):\s+(?P<value>\d+)\s*kB\s*$", re.M)


def parse_smaps_rollup(text: str) -> dict[str, int]:
    """The ``kB`` fields of ``/proc/PID/smaps_rollup`` (Rss, Pss, Pss_Anon, Pss_File,
    Anonymous, Swap…), in bytes; empty for text that has none."""
    return {m["key"]: int(m["value"]) * 1024 for m in _ROLLUP.finditer(text)}


# " PSYoungGen      total 152576K, used 71710K [0x…, 0x…, 0x…)" (and " def new generation   total …",
# " garbage-first heap   total …"): one line per generation, or one for a G1 heap; the
# brackets hold the generation's start, its committed end and its reserved end.
_HEAP = re.compile(r"^\s*(?P<name>[A-Za-z][\w -]*?)\s+total\s+(\d+)K,\s*used\s+(\d+)K"
                   r"(?:\s*\[(?P<range>[0-9a-fA-Fx, ]*)\))?", re.M)


@dataclass(frozen=True)
class HeapInfo:
    committed: int  # bytes, over the generations
    used: int
    low: int | None = None  # the heap's reserved address range, where the JVM printed it
    high: int | None = None


def parse_heap_info(text: str) -> HeapInfo | None:
    """Committed and used heap of ``jcmd PID GC.heap_info``, summed over the generations,
    and the address range the generations span; None for text that names none."""
    found = list(_HEAP.finditer(text))
    if not found:
        return None
    addresses = [int(a, 16) for m in found if m["range"] for a in re.findall(r"0x([0-9a-fA-F]+)", m["range"])]
    return HeapInfo(sum(int(m[2]) for m in found) * 1024, sum(int(m[3]) for m in found) * 1024,
                    min(addresses) if addresses else None, max(addresses) if addresses else None)


# "7f1c2a000000-7f1c2a021000 rw-p 00000000 00:00 0    [heap]" then "Rss:   132 kB" lines.
_MAPPING = re.compile(r"^(?P<start>[0-9a-f]+)-(?P<end>[0-9a-f]+)\s+\S+\s+\S+\s+\S+\s+\d+\s*(?P<path>.*)$")


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    path: str  # "" for anonymous memory
    rss: int  # bytes


def parse_smaps(text: str) -> list[Mapping]:
    """Every mapping of ``/proc/PID/smaps`` with its resident bytes; lines it does not
    understand are skipped."""
    out: list[Mapping] = []
    head: re.Match[str] | None = None
    for line in text.splitlines():
        m = _MAPPING.match(line)
        if m is not None:
            head = m
            continue
        if head is not None and line.startswith("Rss:"):
            rss = re.match(r"Rss:\s+(\d+)\s*kB", line)
            if rss is not None:
                out.append(Mapping(int(head["start"], 16), int(head["end"], 16), head["path"].strip(),
                                   int(rss[1]) * 1024))
            head = None
    return out


def resident_within(mappings: list[Mapping], low: int, high: int) -> int:
    """Resident bytes of the mappings inside [low, high) (the heap is mapped there, in one
    or several pieces; a mapping that only overlaps counts in proportion)."""
    total = 0
    for m in mappings:
        overlap = min(m.end, high) - max(m.start, low)
        if overlap > 0 and m.end > m.start:
            total += m.rss * overlap // (m.end - m.start)
    return total


def parse_jstat(text: str) -> dict[str, float]:
    """``jstat -gcutil PID``'s two lines (column names, then values) as a dict; the columns
    with a number (``-`` marks one the collector has not) only, empty for anything else.
    YGC/FGC count young and full collections, YGCT/FGCT/GCT their seconds."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    if len(lines) < 2 or len(lines[0]) != len(lines[1]):
        return {}
    out: dict[str, float] = {}
    for name, value in zip(lines[0], lines[1], strict=True):
        try:
            out[name] = float(value)
        except ValueError:
            continue
    return out
