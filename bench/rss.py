"""Peak resident memory of a whole process tree, sampled with psutil.

RSS is summed over the root process and every descendant, so for brewstream it covers
the Python driver, the Spark JVM it launched and the Python workers the JVM forks.
Pages shared between forked workers are counted once per process, as RSS does; the
figure is an upper bound of what the tree holds.
"""

from __future__ import annotations

import contextlib

import psutil

from service.periodic import Every

SAMPLE_EVERY_S = 0.2


class RssSampler:
    def __init__(self, pid: int, interval_s: float = SAMPLE_EVERY_S) -> None:
        self.pid = pid
        self.peak = 0
        self.peak_parts: dict[str, int] = {}
        self._every = Every(interval_s, self.sample, f"rss-{pid}")

    def start(self) -> None:
        self.sample()
        self._every.start()

    def stop(self) -> None:
        self._every.stop()

    def sample(self) -> None:
        parts = tree_rss(self.pid)
        total = sum(parts.values())
        if total > self.peak:
            self.peak, self.peak_parts = total, parts


def tree_rss(pid: int) -> dict[str, int]:
    """RSS by role: the root process, JVMs, and every other descendant."""
    parts: dict[str, int] = {}
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return parts
    for proc in procs:
        # A worker may exit between listing and reading; it simply is not counted.
        with contextlib.suppress(psutil.Error):
            role = "root" if proc.pid == pid else ("jvm" if proc.name() == "java" else "children")
            parts[role] = parts.get(role, 0) + proc.memory_info().rss
    return parts
