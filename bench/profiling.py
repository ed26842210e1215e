"""py-spy over a brewstream run: where the Python side of the daemon spends its CPU.

``py-spy record --subprocesses`` follows the driver and every Python process below it
(the Spark JVM forks the PySpark daemon, which forks the workers that parse orders), and
writes collapsed stacks. Only samples of threads on a CPU are kept (no ``--idle``), so
the driver's waits on the JVM do not show; ``--nonblocking`` keeps py-spy from pausing
the processes it samples. The summary ranks functions by self and inclusive samples per
process role.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any

RATE_HZ = 100
TOP = 15
# Where a sample's CPU went, by the first rule its stack matches (most specific first):
# a stack importing a module counts as an import wherever the import was triggered.
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("module imports", ("_find_and_load (",)),
    ("worker set-up: import caches of pyspark.zip", ("setup_spark_files (",)),
    ("Spark session start (build_session)", ("build_session (",)),
    ("order parsing: count_drinks", ("count_drinks (",)),
    ("highest offsets: track_highest", ("track_highest (",)),
    ("partial_counts loop", ("partial_counts (",)),
    ("Arrow (de)serialisation", ("serializers.py)",)),
    ("sink: changelog + store", ("restorer/changelog.py)", "restorer/store.py)", "restorer/commit.py)")),
    ("py4j calls to the JVM", ("py4j/",)),
)
_PROCESS = re.compile(r'^process \d+:"(.*)"$', re.S)
_FRAME_LINE = re.compile(r":\d+\)$")


def executable() -> str | None:
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.exists() else shutil.which("py-spy")


def available() -> bool:
    return executable() is not None


def record_args(output: Path) -> list[str]:
    """The command prefix that runs a program under py-spy."""
    exe = executable()
    if exe is None:
        raise RuntimeError("py-spy is not installed")
    return [exe, "record", "--subprocesses", "--nonblocking", "--rate", str(RATE_HZ), "--format", "raw",
            "--output", str(output), "--"]


def role_of(cmdlines: list[str]) -> str:
    """The role of a stack from its chain of processes, root first: the root is the
    program py-spy started (the driver); PySpark's daemon and the workers it forks run
    ``-m pyspark.daemon``; anything else (a shell between them) is "other"."""
    if any("pyspark.daemon" in c or "pyspark.worker" in c for c in cmdlines):
        return "python workers"
    return "driver" if len(cmdlines) == 1 else "other"


def parse(text: str) -> list[tuple[str, list[str], int]]:
    """(role, frames root-first, samples) per collapsed stack. A process' command line
    may span lines, so a stack ends only at a line ending in its sample count."""
    stacks: list[tuple[str, list[str], int]] = []
    pending = ""
    for line in text.splitlines():
        pending = f"{pending}\n{line}" if pending else line
        head, sep, count = pending.rpartition(" ")
        if not sep or not count.isdigit():
            continue
        pending = ""
        processes: list[str] = []
        frames: list[str] = []
        for part in head.split(";"):
            m = _PROCESS.match(part)
            if m:
                processes.append(m[1])
            else:
                frames.append(_FRAME_LINE.sub(")", part))
        stacks.append((role_of(processes), frames, int(count)))
    return stacks


def summarize(path: Path) -> dict[str, Any]:
    stacks = parse(path.read_text(errors="replace"))
    roles: dict[str, dict[str, Any]] = {}
    for role in sorted({r for r, _, _ in stacks}):
        mine = [(f, n) for r, f, n in stacks if r == role]
        total = sum(n for _, n in mine)
        own: Counter[str] = Counter()
        inclusive: Counter[str] = Counter()
        for frames, n in mine:
            if frames:
                own[frames[-1]] += n
            for frame in set(frames):
                inclusive[frame] += n
        roles[role] = {
            "samples": total,
            "categories": _categories(mine, total),
            "cpu_s": total / RATE_HZ,
            "top_self": [(f, n, n / total) for f, n in own.most_common(TOP)],
            "top_inclusive": [(f, n, n / total) for f, n in inclusive.most_common(TOP * 2)],
        }
    return {"rate_hz": RATE_HZ, "roles": roles}


def _categories(stacks: list[tuple[list[str], int]], total: int) -> list[tuple[str, float, float]]:
    """(category, CPU-s, share) for every category with samples, largest first."""
    seconds: Counter[str] = Counter()
    for frames, n in stacks:
        joined = ";".join(frames)
        name = next((c for c, needles in CATEGORIES if any(x in joined for x in needles)), "other")
        seconds[name] += n
    return [(c, n / RATE_HZ, n / total) for c, n in seconds.most_common()]
