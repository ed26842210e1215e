"""A description of the machine and the software versions, stored with every result."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.config import REPO


def describe(quix_version: str | None) -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_gib": round(_mem_total_kib() / 2**20, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "java": _java_version(),
        "kafka_broker": _jar_version(REPO / ".cache" / "jars" / "broker", r"kafka_2\.13-([\d.]+)\.jar"),
        "pyspark": _dist("pyspark"),
        "confluent_kafka": _dist("confluent-kafka"),
        "rocksdict": _dist("rocksdict"),
        "orjson": _dist("orjson"),
        "msgspec": _dist("msgspec"),
        "quixstreams": quix_version,
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total_kib() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _java_version() -> str:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except OSError:
        return "unknown"
    first = (out.stderr or out.stdout).strip().splitlines()
    return first[0] if first else "unknown"


def _jar_version(folder: Path, pattern: str) -> str | None:
    for jar in sorted(folder.glob("*.jar")) if folder.is_dir() else []:
        m = re.fullmatch(pattern, jar.name)
        if m:
            return m[1]
    return None


def _dist(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def describe_commit() -> str | None:
    """The commit the benchmark ran at (short hash, "+changes" when the tree differs from it)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=30)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, timeout=30)
    except OSError:
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + (" +changes" if dirty.stdout.strip() else "")
