"""Peak resident memory and CPU time of a whole process tree, sampled with psutil.

RSS is summed over the root process and every descendant, so for brewstream it covers
the Python driver, the Spark JVM it launched and the Python workers the JVM forks.
Pages shared between forked workers are counted once per process, as RSS does; the
figure is an upper bound of what the tree holds.

CPU time (user + system) is kept per process at its last sample and summed by role:
the driver (the root), the JVM, the Python workers (PySpark's daemon and what it forks)
and anything else. A process that exits between two samples loses at most one
interval's worth.
"""

from __future__ import annotations

import contextlib

import psutil

from service.instance.periodic import Every

SAMPLE_EVERY_S = 0.2


class RssSampler:
    def __init__(self, pid: int, interval_s: float = SAMPLE_EVERY_S) -> None:
        self.pid = pid
        self.peak = 0
        self.peak_parts: dict[str, int] = {}
        self._cpu: dict[int, tuple[str, float]] = {}  # pid -> (role, CPU seconds at its last sample)
        self._every = Every(interval_s, self.sample, f"rss-{pid}")

    def start(self) -> None:
        self.sample()
        self._every.start()

    def stop(self) -> None:
        self._every.stop()

    def sample(self) -> None:
        parts = tree_rss(self.pid, self._cpu)
        total = sum(parts.values())
        if total > self.peak:
            self.peak, self.peak_parts = total, parts

    def cpu_s(self) -> dict[str, float]:
        """CPU seconds by role so far."""
        out: dict[str, float] = {}
        for role, seconds in self._cpu.values():
            out[role] = out.get(role, 0.0) + seconds
        return {role: round(s, 2) for role, s in sorted(out.items())}


def tree_rss(pid: int, cpu: dict[int, tuple[str, float]] | None = None) -> dict[str, int]:
    """RSS by role: the root process, JVMs, and every other descendant; with ``cpu``, also
    each process's CPU seconds by its role (driver, jvm, python workers, other)."""
    parts: dict[str, int] = {}
    for proc in tree_processes(pid):
        # A worker may exit between listing and reading; it simply is not counted.
        with contextlib.suppress(psutil.Error):
            role = role_of(proc, pid)
            if role == "other" and cpu is not None and proc.pid in cpu:
                # A worker that has exited but not been reaped shows no command line and
                # would pass for "other"; it keeps its role. (A role can change the other
                # way: the JVM's pid starts as spark-class's bash, which execs java.)
                role = cpu[proc.pid][0]
            part = RSS_PART.get(role, "children")
            parts[part] = parts.get(part, 0) + proc.memory_info().rss
            if cpu is not None:
                times = proc.cpu_times()
                cpu[proc.pid] = (role, times.user + times.system)
    return parts


RSS_PART = {"driver": "root", "jvm": "jvm"}  # the rest of the tree is "children" in the RSS split


def role_of(proc: psutil.Process, root: int) -> str:
    """What a process of the tree rooted at ``root`` is: driver, jvm, python workers, other."""
    if proc.pid == root:
        return "driver"
    if proc.name() == "java":
        return "jvm"
    return "python workers" if "pyspark.daemon" in " ".join(proc.cmdline()) else "other"


def tree_processes(pid: int) -> list[psutil.Process]:
    """The process ``pid`` and every descendant, as they are now; none once it is gone."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def cpu_seconds(pid: int) -> float:
    """One process's CPU seconds so far (the broker's, around a run)."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return times.user + times.system
