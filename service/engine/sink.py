"""What every pipeline's foreachBatch sink shares: one batch at a time, none after a stop
or one of our own refusals, the batch's end offsets as Spark planned them, and the
timings of its phases. The commit itself is ``restorer.commit``; each wing
(``drink_count``, ``windows``) writes its data path on top.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from restorer.changelog import ChangelogWriter, Fenced, OutputRecord
from restorer.codec import LAST_BATCH_MS, Entry, encode_u64, meta_key
from restorer.commit import commit_batch
from restorer.faults import FaultPlan
from restorer.store import Store
from service.engine.outage import batch_allowance
from service.engine.start_point import PlannedBatch, planned_batch
from service.records.limits import MAX_NAME_BYTES
from topics.errors import BrewError
from topics.kafka import KafkaConnection

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("brewstream")


class SinkClosed(RuntimeError):
    """Raised for a batch that arrives while the daemon shuts down: Spark must not commit it."""


# Every batch line of every pipeline starts ``batch N (seq M)`` and ends with the phases.
ANY_BATCH = re.compile(r"\bbatch \d+ \(seq \d+\)")
PHASES_PATTERN = r"aggregate (?P<aggregate_s>[\d.]+)s changelog (?P<changelog_s>[\d.]+)s store (?P<store_s>[\d.]+)s"


@dataclass(frozen=True)
class PhaseTimes:
    """Seconds one batch spent counting in Spark, in the transaction and in the store."""

    aggregate_s: float
    changelog_s: float
    store_s: float

    def phases(self) -> dict[str, float]:
        return {"aggregate": self.aggregate_s, "changelog": self.changelog_s, "store": self.store_s}

    def fields(self) -> dict[str, float]:
        """For structured logs: ``aggregate_s``, ``changelog_s``, ``store_s``."""
        return {f"{phase}_s": round(seconds, 4) for phase, seconds in self.phases().items()}

    def __str__(self) -> str:
        return f"aggregate {self.aggregate_s:.2f}s changelog {self.changelog_s:.3f}s store {self.store_s:.3f}s"


@dataclass(frozen=True)
class SinkOptions:
    """What a sink needs beyond the store and the changelog."""

    conn: KafkaConnection
    checkpoint_dir: Path | None = None  # where Spark logs each batch's planned end offsets
    max_name_bytes: int = MAX_NAME_BYTES
    dlq_record_bytes: int = 1_000_000
    takeover_timeout_s: float | None = None  # a commit paused longer than this may have been taken over


class OrderedCommitSink:
    """What every pipeline's sink shares: one batch at a time, none after ``close`` or a
    failure, and steps 3 and 4 in the only safe order, with the fault points between them."""

    def __init__(self, store: Store, changelog: ChangelogWriter, faults: FaultPlan,
                 options: SinkOptions | None = None) -> None:
        self.store = store
        self.changelog = changelog
        self.faults = faults
        self.options = options
        self.seq = store.last_seq()
        self.failure: BaseException | None = None  # what stopped this sink, for a one-line error
        self._lock = threading.Lock()
        self._closed = False
        self._batch_started: float | None = None  # monotonic start of the batch in flight
        self._last_batch_s: float | None = None  # how long the last batch that went through took

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        with self._lock:
            if self._closed:
                raise SinkClosed(f"shutting down; batch {batch_id} left for the next start")
            self._batch_started = started = time.monotonic()
            try:
                self._apply(df, batch_id)
            except BaseException as exc:
                self._failed(exc)
                raise
            finally:
                self._batch_started = None
            self._last_batch_s = time.monotonic() - started

    def computing(self) -> bool:
        """A batch is in flight and has not outlived what a batch may take
        (``engine.outage.batch_allowance``): slow is not stalled."""
        started = self._batch_started
        return started is not None and time.monotonic() - started < batch_allowance(self._last_batch_s)

    def close(self, timeout_s: float = -1) -> bool:
        """Refuse new batches, and wait for the batch in flight to commit (at most
        ``timeout_s`` when given); False when it was still running then."""
        self._closed = True  # read under the lock by the next batch
        if not self._lock.acquire(timeout=timeout_s):
            return False
        self._lock.release()
        return True

    @property
    def fenced(self) -> bool:
        return isinstance(self.failure, Fenced)

    def _failed(self, exc: BaseException) -> None:
        # A fenced instance never commits again, and none of our own refusals (a full disk,
        # a changed changelog) may let a later batch slip in before the query stops. A
        # Spark job that failed inside the batch fails the query by itself; the runner may
        # start it again (``retry``).
        if self.failure is None:
            self.failure = exc
        if isinstance(exc, BrewError):
            self._closed = True

    def fence(self, reason: str) -> None:
        """Another instance took over: take no batch again (the one in flight finishes
        first, and its transaction fails as fenced)."""
        with self._lock:
            if self.failure is None:
                self.failure = Fenced(f"{reason}: this instance was fenced out and stops writing")
            self._closed = True

    def stop_with(self, failure: BrewError) -> None:
        """Take no batch again, and end with ``failure`` (the batch in flight finishes first)."""
        with self._lock:
            if self.failure is None:
                self.failure = failure
            self._closed = True

    def retry(self) -> None:
        """Take batches again after a failure the runner decided to start over from."""
        with self._lock:
            if not isinstance(self.failure, BrewError):
                self.failure = None

    def _apply(self, df: DataFrame, batch_id: int) -> None:
        raise NotImplementedError

    def planned(self, batch_id: int, topic: str) -> PlannedBatch:
        """Where Spark planned this batch to start and end in ``topic``: what its rows are
        filtered by (``replay_filter``), the offsets it brings the store to (``ends``), and
        whether it reads anything at all (``reads_nothing``). A batch that reads nothing
        needs no Spark job: its jobs would read nothing, yet they planned, generated and
        compiled the batch's code in a cold JVM (a start over an empty input ended 1.15 s
        sooner without them)."""
        return planned_batch(self.options.checkpoint_dir if self.options is not None else None, batch_id, topic)

    def _commit(self, entries: list[Entry], outputs: Iterable[OutputRecord],
                aggregate_s: float) -> tuple[list[Entry], PhaseTimes]:
        """3. + 4. for one batch: returns the entries committed and the time of each step."""
        stamp = (meta_key(LAST_BATCH_MS), encode_u64(int(time.time() * 1000)))
        # The stamp's task may be another instance's (a writer of some tasks): then it is
        # this store's own fact, kept out of the changelog.
        published = self.changelog.partition_of(stamp[0]) in self.changelog.owned
        done = commit_batch(self.store, self.changelog, [*entries, stamp] if published else entries, outputs,
                            self.faults, local=() if published else [stamp],
                            max_gap_s=self.options.takeover_timeout_s if self.options else None)
        self.seq = done.seq
        return done.entries, PhaseTimes(aggregate_s, done.changelog_s, done.store_s)


