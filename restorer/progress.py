"""Restore progress for people: live bars on a terminal, a line every few seconds otherwise."""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

LINE_EVERY_S = 5.0


class RestoreProgress:
    """Feed it ``update(partition, start, position, end)``; it shows progress per partition.

    Offsets stand in for records: compaction and transaction markers leave gaps, so the
    bars count offsets covered, which is what bounds the remaining work.
    """

    def __init__(self, label: str, stream: TextIO = sys.stderr) -> None:
        self.label = label
        self.stream = stream
        self._live = stream.isatty()
        self._progress: Progress | None = None
        self._tasks: dict[int, TaskID] = {}
        self._done: dict[int, int] = {}
        self._total: dict[int, int] = {}
        self._t0 = time.monotonic()
        self._last_line = self._t0

    def __enter__(self) -> RestoreProgress:
        if self._live:
            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                console=Console(file=self.stream), transient=False,
            )
            self._progress.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.stop()

    def update(self, partition: int, start: int, position: int, end: int) -> None:
        self._done[partition] = position - start
        self._total[partition] = end - start
        elapsed = max(time.monotonic() - self._t0, 1e-6)
        rate = f"{self._done[partition] / elapsed:,.0f}/s"
        if self._progress is not None:
            if partition not in self._tasks:
                self._tasks[partition] = self._progress.add_task(
                    f"{self.label} p{partition}", total=self._total[partition], rate=rate)
            self._progress.update(self._tasks[partition], completed=self._done[partition],
                                  total=self._total[partition], rate=rate)
        elif time.monotonic() - self._last_line >= LINE_EVERY_S:
            self._last_line = time.monotonic()
            done, total = sum(self._done.values()), sum(self._total.values())
            print(f"{self.label}: {done:,}/{total:,} offsets ({done / elapsed:,.0f}/s)",
                  file=self.stream, flush=True)
