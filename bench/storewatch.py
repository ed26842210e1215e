"""Watch brewstream's committed store from outside, read-only, as a client would.

Every ``interval`` the store is opened read-only (which works beside the running
daemon) and its next input offsets and processed-order counter are read. A sample is
kept only when they changed, stamped with the time of the read. An order at
(partition, offset) is committed at the first sample whose next offset for that
partition is above its offset: the resolution is the poll interval.
"""

from __future__ import annotations

import bisect
import contextlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from restorer.store import Store
from service.drink_count.counts import drink_counts
from service.instance.periodic import Every
from topics.errors import BrewError


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
        self._every = Every(interval_s, self.poll, "store-watch")

    def start(self) -> None:
        self.poll()
        self._every.start()

    def stop(self) -> None:
        self._every.stop()

    def poll(self) -> Sample | None:
        if not (self.store_path / "CURRENT").exists():
            return None
        # The daemon may be creating or replacing the store right now (start-up, restore).
        with contextlib.suppress(BrewError):
            with Store(self.store_path, read_only=True) as store:
                state = drink_counts(store.read_all())
            now = time.monotonic()
            offsets = state.state.next_offsets(self.topic)
            with self._lock:
                last = self.samples[-1] if self.samples else None
                if last is None or last.next_offsets != offsets or last.processed != state.processed_orders:
                    self.samples.append(Sample(now, offsets, state.processed_orders))
            return self.latest
        return None

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
