"""What makes a running daemon stand still, or put its state at risk, without anything
failing: said once when it begins and once when it ends, and shown in the metrics.

- **An input partition held back by an open upstream transaction.** A read_committed reader
  (every one of brewstream's, invariant 7 in ``restorer``) reads a partition only up to its
  last stable offset (LSO): the first offset of the oldest transaction still open there. A
  producer that leaves one open holds everything after it back until it commits or aborts,
  or the broker aborts it at the producer's ``transaction.timeout.ms``; the other
  partitions go on. Once the store has applied everything up to the LSO and the LSO has
  not moved for ``HELD_BACK_AFTER_S``, the partition is said to be held back (``HeldBack``).
  The instance stays ready: it counts all it may count, and no restart would change that.
- **A changelog that stops keeping every key's last record** (``cleanup.policy`` changed
  to ``delete``, retention turned on) under a running daemon: a restore after a disk loss
  would lack what the broker deletes. Asked at start and every ``changelog_every_s``.

``StallWatch`` asks Kafka on a thread of its own in every daemon; ``brewstream status`` reads
the same facts from Kafka itself (``service.ops.status``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from restorer.reader import retention_line
from restorer.store import Store
from service.instance.health import ACTIVE, FENCED, STANDBY, STOPPED
from service.ops.metrics import Metrics
from service.ops.status import HELD_BACK_AFTER_S, held_back
from topics.clock import utc_iso
from topics.kafka import METADATA_TIMEOUT_S, KafkaConnection, topic_config
from topics.retention import deletes_records

log = logging.getLogger("brewstream")

# How often the input's offsets are asked while active (three list_offsets for all partitions: first
# offsets, LSOs, ends).
WATCH_EVERY_S = 2.0


@dataclass(frozen=True)
class Episode:
    """A partition held back: since when (unix seconds, and monotonic), at which LSO, by how
    many records."""

    partition: int
    lso: int
    records: int
    since: float
    since_mono: float

    def began(self, topic: str, now_mono: float) -> str:
        return (f"input {topic} partition {self.partition} is held back by an open upstream transaction: "
                f"{self.records} records past its last stable offset {self.lso} have waited since "
                f"{utc_iso(self.since)} ({now_mono - self.since_mono:.0f}s); read_committed readers see them once "
                "the producer commits or aborts it (at its transaction.timeout.ms at the latest); the other "
                "partitions go on")

    def ended(self, topic: str, now_mono: float) -> str:
        return (f"input {topic} partition {self.partition} goes on: the upstream transaction that held it back "
                f"ended (held {now_mono - self.since_mono:.0f}s)")


@dataclass
class HeldBack:
    """Pure: which partitions are held back, from one look after another. A partition is
    watched while the store stands at its LSO and records lie past it; it is held back once
    that LSO has stood ``after_s``. An episode ends when the LSO moves (the transaction
    ended; another one open at once starts a new watch) or nothing lies past it."""

    after_s: float = HELD_BACK_AFTER_S
    watching: dict[int, Episode] = field(default_factory=dict)
    said: set[int] = field(default_factory=set)

    def look(self, held: Mapping[int, tuple[int, int]], now: float, now_mono: float
             ) -> tuple[list[Episode], list[Episode]]:
        """``held``: partition -> (LSO, records past it) for each partition held now
        (``status.held_back``). Returns the episodes that begin and those that end."""
        began: list[Episode] = []
        ended: list[Episode] = []
        for p in list(self.watching):
            if p not in held or held[p][0] != self.watching[p].lso:
                episode = self.watching.pop(p)
                if p in self.said:
                    self.said.discard(p)
                    ended.append(episode)
        for p, (lso, records) in held.items():
            seen = self.watching.get(p)
            since, since_mono = (now, now_mono) if seen is None else (seen.since, seen.since_mono)
            episode = self.watching[p] = Episode(p, lso, records, since, since_mono)
            if p not in self.said and now_mono - episode.since_mono >= self.after_s:
                self.said.add(p)
                began.append(episode)
        return began, ended

    def current(self) -> list[Episode]:
        """The episodes said and not ended."""
        return [self.watching[p] for p in sorted(self.said)]

    def forget(self) -> list[Episode]:
        """Watch nothing any more (the instance stopped counting), returning what was said."""
        said = self.current()
        self.watching.clear()
        self.said.clear()
        return said


_UNKNOWN = object()


class StallWatch:
    """The stalls of one daemon (module docstring): asked every ``WATCH_EVERY_S`` on a
    thread of its own, the changelog at start (entering it) and every ``changelog_every_s``.
    A question Kafka does not answer leaves everything as it was until the next. Leaving it
    does not wait for a question under way (the cluster may be down, each taking a few
    timeouts): nothing is said or set after it."""

    def __init__(self, conn: KafkaConnection, metrics: Metrics, input_topic: str, partitions: Iterable[int],
                 changelog: str, store: Callable[[], Store | None], phase: Callable[[], str],
                 changelog_every_s: float) -> None:
        self.conn, self.metrics, self.topic, self.changelog = conn, metrics, input_topic, changelog
        self.changelog_every_s = changelog_every_s
        self.partitions = sorted(partitions)
        self.store, self.phase = store, phase
        self.held = HeldBack()
        self.risk: object = _UNKNOWN  # the changelog's last known deletion risk: str, None, or unknown
        self._admin: AdminClient | None = None
        self._changelog_at = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()  # what is said and set, against the stop
        self._thread = threading.Thread(target=self._loop, name="stall-watch", daemon=True)

    def __enter__(self) -> StallWatch:
        self.check_changelog()  # said at start, before anything else
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(WATCH_EVERY_S):
            try:
                self.tick()
            except Exception as exc:  # a watch must never take the daemon down
                log.debug("the stall watch failed: %s", exc, exc_info=True)

    def tick(self) -> None:
        self.check_input()
        if time.monotonic() - self._changelog_at >= self.changelog_every_s:
            self.check_changelog()

    def check_input(self) -> None:
        """While the instance counts (active), the input's held-back partitions; while it
        counts no more (standby, fenced, stopped), none, its episodes forgotten (the role's
        change is said where it happens); in between (starting or restoring, while Kafka
        heals or the query starts again), nothing changes."""
        m, pipeline = self.metrics, self.metrics.pipeline
        phase, store = self.phase(), self.store()
        if phase in (STANDBY, FENCED, STOPPED):
            for episode in self.held.forget():
                m.held_back.labels(pipeline, str(episode.partition)).set(0)
                m.held_back_seconds.labels(pipeline, str(episode.partition)).set(0)
            return
        if phase != ACTIVE or store is None:
            return
        offsets = self._offsets()
        if offsets is None:
            return
        low, stable, end = offsets
        stored = store.next_offsets(self.topic)
        held = held_back({p: stored.get(p, low[p]) for p in low}, stable, end)
        now, now_mono = time.time(), time.monotonic()
        with self._lock:
            if not self._stop.is_set():
                self._say_input(*self.held.look(held, now, now_mono), now_mono)

    def _say_input(self, began: list[Episode], ended: list[Episode], now_mono: float) -> None:
        m, pipeline = self.metrics, self.metrics.pipeline
        for episode in ended:
            log.info(episode.ended(self.topic, now_mono))
            m.held_back.labels(pipeline, str(episode.partition)).set(0)
            m.held_back_seconds.labels(pipeline, str(episode.partition)).set(0)
        for episode in began:
            log.warning(episode.began(self.topic, now_mono))
        for episode in self.held.current():
            m.held_back.labels(pipeline, str(episode.partition)).set(episode.records)
            m.held_back_seconds.labels(pipeline, str(episode.partition)).set(now_mono - episode.since_mono)

    def _offsets(self) -> tuple[dict[int, int], dict[int, int], dict[int, int]] | None:
        """Each partition's first offset, LSO and end (asked at once), or None when Kafka did
        not say."""
        if self._admin is None:
            self._admin = self.conn.admin()
        admin = self._admin

        def ask(spec: OffsetSpec, isolation: IsolationLevel) -> dict[TopicPartition, Future[Any]]:
            asked = {TopicPartition(self.topic, p): spec for p in self.partitions}
            return admin.list_offsets(asked, isolation_level=isolation, request_timeout=METADATA_TIMEOUT_S)

        asked = [ask(OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED),
                 ask(OffsetSpec.latest(), IsolationLevel.READ_COMMITTED),
                 ask(OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED)]
        try:
            low, stable, end = ({tp.partition: int(f.result().offset) for tp, f in futures.items()}
                                for futures in asked)
        except KafkaException as exc:
            log.debug("the input's offsets were not read: %s", exc)
            return None
        return low, stable, end

    # ---------------------------------------------------------------- the changelog

    def check_changelog(self) -> None:
        self._changelog_at = time.monotonic()
        try:
            how = deletes_records(topic_config(self.conn, self.changelog))
        except KafkaException as exc:
            log.debug("the changelog's settings were not read: %s", exc)  # no right to, or the cluster heals
            return
        with self._lock:
            if not self._stop.is_set():
                self._say_changelog(how)

    def _say_changelog(self, how: str | None) -> None:
        was, self.risk = self.risk, how
        self.metrics.changelog_deletes.labels(self.metrics.pipeline).set(0 if how is None else 1)
        if how == was:
            return
        if how is not None:
            log.warning(retention_line(self.changelog, how) if was is _UNKNOWN else
                        f"the settings of changelog {self.changelog} changed: {retention_line(self.changelog, how)}")
        elif was is not _UNKNOWN:
            log.info("changelog %s keeps every key's last record again (compacted, no retention)", self.changelog)
