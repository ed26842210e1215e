"""Watch brewstream's committed store from outside, read-only, as a client would.

Every ``interval`` a follower of the store (opened once beside the running daemon,
``Store(follow=True)``) catches up with it, and its next input offsets and
processed-order counter are read. A sample is kept only when they changed, stamped with
the time of the read. An order at (partition, offset) is committed at the first sample
whose next offset for that partition is above its offset: the resolution is the poll
interval.

The polls share the benchmark's process with a feed of 5,000 orders a second. When each
poll opened the store read-only and decoded all of it, a poll took 10 ms at the median
and 53 ms at p99, and a sample came 17 ms (median) and 64 ms (p99) after the daemon had
logged the batch's commit; the follower's poll takes 1.7 ms and 13 ms, and its samples
come 14 and 30 ms after the line (docs/performance-notes.md, "Start-up and latency").
A store deleted or replaced under the follower (a restore) is followed again from its new
files.
"""

from __future__ import annotations

import bisect
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from restorer.codec import meta_key
from restorer.store import Store
from service.drink_count.counts import PROCESSED_ORDERS
from service.instance.periodic import Every
from topics.errors import BrewError

PROCESSED_KEY = meta_key(PROCESSED_ORDERS)


@dataclass(frozen=True)
class Sample:
    t: float
    next_offsets: dict[int, int]
    processed: int


class StoreWatcher:
    def __init__(self, store_path: Path, topic: str, interval_s: float) -> None:
        self.store_path = store_path
        self.topic = topic
        self.samples: list[Sample] = []
        self._lock = threading.Lock()
        self._view: Store | None = None
        self._every = Every(interval_s, self.poll, "store-watch")

    def start(self) -> None:
        self.poll()
        self._every.start()

    def stop(self) -> None:
        self._every.stop()
        self._drop()

    def poll(self) -> Sample | None:
        try:
            view = self._follow()
            if view is None:
                return None
            view.catch_up()
            offsets = view.next_offsets(self.topic)
            processed = view.get_u64([PROCESSED_KEY]).get(PROCESSED_KEY, 0)
        except BrewError:
            # The daemon may be creating or replacing the store right now (start-up, restore).
            self._drop()
            return None
        now = time.monotonic()
        with self._lock:
            last = self.samples[-1] if self.samples else None
            if last is None or last.next_offsets != offsets or last.processed != processed:
                self.samples.append(Sample(now, offsets, processed))
        return self.latest

    def _follow(self) -> Store | None:
        if self._view is not None and self._view.gone() is not None:
            self._drop()
        if self._view is None and (self.store_path / "CURRENT").exists():
            self._view = Store(self.store_path, follow=True)
        return self._view

    def _drop(self) -> None:
        if self._view is not None:
            self._view.close()
            self._view = None

    @property
    def latest(self) -> Sample | None:
        with self._lock:
            return self.samples[-1] if self.samples else None

    def index(self) -> CommitIndex:
        with self._lock:
            return CommitIndex(list(self.samples))

    def committed(self, placed: dict[int, int]) -> bool:
        """Whether the store holds everything up to these next offsets per partition."""
        last = self.latest
        return last is not None and all(last.next_offsets.get(p, 0) >= o for p, o in placed.items())


class CommitIndex:
    """When each (partition, offset) was first seen committed, by binary search."""

    def __init__(self, samples: list[Sample]) -> None:
        self._samples = samples
        partitions = {p for s in samples for p in s.next_offsets}
        self._by_partition = {p: [s.next_offsets.get(p, 0) for s in samples] for p in partitions}

    def first_sample(self, partition: int, offset: int) -> Sample | None:
        nexts = self._by_partition.get(partition)
        if nexts is None:
            return None
        i = bisect.bisect_right(nexts, offset)  # first sample whose next offset > offset
        return self._samples[i] if i < len(self._samples) else None
