"""Follow the top-N snapshots and the window results from the end of their topics.

The reader assigns partitions itself and never commits: every board starts from the
latest snapshot and the last few window results, so nothing is left behind on the
cluster. Topics that do not exist yet are looked for again every few seconds.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from service import pipelines
from service.instance.lease import Announcement
from topics.catalog import Topics
from topics.kafka import METADATA_TIMEOUT_S, KafkaConnection, watermarks
from topics.kafka_config import redact

log = logging.getLogger(__name__)

RETRY_S = 3.0
POLL_S = 0.25
# Window results are written in transactions, so commit markers take offsets too; going
# back a few times the wanted number of records still finds them.
_BACKLOG_FACTOR = 4
_ANNOUNCEMENTS = 500  # read back at start: every instance's recent word


@dataclass(frozen=True)
class FeedView:
    """What the topics said last, as plain JSON-ready values."""

    snapshot: dict[str, Any] | None
    windows: list[dict[str, Any]]
    waiting_for: list[str]
    error: str | None
    instances: list[dict[str, Any]] = field(default_factory=list)  # role of every instance, newest first


@dataclass
class _Seen:
    snapshot: dict[str, Any] | None = None
    windows: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str | None = None
    instances: dict[bytes, tuple[Announcement, int]] = field(default_factory=dict)  # key -> (what, broker ms)


def parse_snapshot(value: bytes | None) -> dict[str, Any] | None:
    """A top-N snapshot cut down to the fields the page uses; None when malformed."""
    try:
        doc = orjson.loads(value or b"")
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("top"), list):
        return None
    top = [{"rank": r["rank"], "drink": r["drink"], "count": r["count"]} for r in doc["top"]
           if isinstance(r, dict) and isinstance(r.get("drink"), str) and _is_int(r.get("count"))
           and _is_int(r.get("rank"))]
    return {"seq": doc.get("seq"), "ts": doc.get("ts"), "processed_orders": doc.get("processed_orders"), "top": top}


def supersedes(snapshot: dict[str, Any], shown: dict[str, Any] | None) -> bool:
    """Pure: whether ``snapshot`` replaces the one ``shown``: snapshots are ordered by their
    ``seq`` (docs/reference/topics.md), not by where they were read; the topic's partitions
    are read one after another, and one grown since holds older snapshots elsewhere."""
    if shown is None:
        return True
    new, old = snapshot.get("seq"), shown.get("seq")
    if not (isinstance(old, int) and _is_int(old)):
        return True
    return isinstance(new, int) and _is_int(new) and new >= old


def parse_window(value: bytes | None) -> dict[str, Any] | None:
    fields = ("kind", "start", "end", "key", "count", "amount", "late_accepted", "emit", "watermark")
    try:
        doc = orjson.loads(value or b"")
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("start"), str) or not isinstance(doc.get("end"), str):
        return None
    return {k: doc.get(k) for k in fields}


def _pipeline_of(topics: Topics, changelog: str) -> str:
    """The name of the pipeline an announcement's changelog belongs to (its topic, if none)."""
    wing = pipelines.of_changelog(topics, changelog)
    return wing.name if wing is not None else changelog


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def keep_recent(windows: dict[str, dict[str, Any]], n: int) -> None:
    """Drop all but the ``n`` windows that end last (ISO times in UTC sort as text)."""
    if len(windows) > n:
        for wid, _doc in sorted(windows.items(), key=lambda kv: (kv[1]["end"], kv[1]["start"], kv[0]))[:-n]:
            del windows[wid]


class TopicFeed:
    """A background reader of ``topics.counts``, ``topics.windows`` and the instances'
    announcements (``topics.instances``)."""

    def __init__(self, conn: KafkaConnection, topics: Topics, recent: int = 8) -> None:
        self.conn = conn
        self.topics = topics
        self.recent = recent
        self._seen = _Seen()
        self._lock = threading.Lock()
        self._assigned: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="board-feed", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def view(self) -> FeedView:
        with self._lock:
            windows = sorted(self._seen.windows.values(), key=lambda d: (d["end"], d["start"]), reverse=True)
            waiting = [t for t in (self.topics.counts, self.topics.windows) if t not in self._assigned]
            now_ms = time.time() * 1000
            instances = [{"instance": a.instance, "pipeline": _pipeline_of(self.topics, a.changelog), "role": a.role,
                          "holds_lease": a.holds_lease, "seq": a.seq, "age_s": round(max(0.0, now_ms - at) / 1000, 1)}
                         for a, at in sorted(self._seen.instances.values(), key=lambda v: -v[1])]
            return FeedView(self._seen.snapshot, windows, waiting, self._seen.error, instances)

    def _run(self) -> None:
        """Read until stopped. A failure while reading (a fatal client error, a record our
        code cannot take) ends one reader, not the feed: the page says why, the reader is
        made anew after ``RETRY_S`` and assigned again from the topics' ends; what was seen
        is kept, and records read twice change nothing (snapshots by ``seq``, windows and
        announcements by key)."""
        while not self._stop.is_set():
            try:
                self._read_until_stopped()
            except Exception as exc:
                log.warning("board feed: reading Kafka failed (%s); reading again in %.0f s", exc, RETRY_S)
                log.debug("board feed failure", exc_info=True)
                self._set_error(f"reading Kafka failed: {exc} (reading again in {RETRY_S:.0f} s)")
                with self._lock:
                    self._assigned.clear()
                self._stop.wait(RETRY_S)

    def _read_until_stopped(self) -> None:
        consumer = self.conn.consumer({"isolation.level": "read_committed", "enable.partition.eof": False})
        try:
            next_lookup = 0.0
            while not self._stop.is_set():
                if len(self._assigned) < 3 and time.monotonic() >= next_lookup:
                    self._assign_existing(consumer)
                    next_lookup = time.monotonic() + RETRY_S
                if self._assigned:
                    for msg in consumer.consume(500, timeout=POLL_S):
                        self._take(msg)
                else:
                    self._stop.wait(POLL_S)
        finally:
            consumer.close()

    def _assign_existing(self, consumer: Consumer) -> None:
        wanted = {self.topics.counts: 2, self.topics.windows: _BACKLOG_FACTOR * self.recent,
                  self.topics.instances: _ANNOUNCEMENTS}
        try:
            meta = consumer.list_topics(timeout=METADATA_TIMEOUT_S)
            for topic, back in wanted.items():
                info = meta.topics.get(topic)
                if topic in self._assigned or info is None or info.error is not None or not info.partitions:
                    continue
                starts = []
                for p in sorted(info.partitions):
                    low, high = watermarks(consumer, topic, p)
                    starts.append(TopicPartition(topic, p, max(low, high - back)))
                consumer.incremental_assign(starts)
                with self._lock:
                    self._assigned.add(topic)
        except KafkaException as exc:
            self._set_error(f"Kafka at {self.conn.bootstrap}: {exc.args[0].str()} (retrying)")
            return
        self._set_error(None)

    def _take(self, msg: Message) -> None:
        err = msg.error()
        if err is not None:
            if err.code() != KafkaError._PARTITION_EOF:
                self._set_error(f"Kafka: {err.str()}")
            return
        if msg.topic() == self.topics.instances:
            what = Announcement.decode(msg.value())
            if what is not None and what.changelog in (self.topics.changelog, self.topics.windows_changelog):
                with self._lock:
                    self._seen.instances[what.key] = (what, msg.timestamp()[1])
        elif msg.topic() == self.topics.counts:
            snapshot = parse_snapshot(msg.value())
            if snapshot is not None:
                with self._lock:
                    if supersedes(snapshot, self._seen.snapshot):
                        self._seen.snapshot = snapshot
        else:
            window = parse_window(msg.value())
            if window is not None:
                wid = (msg.key() or b"").decode(errors="replace")
                with self._lock:
                    self._seen.windows[wid] = window
                    keep_recent(self._seen.windows, self.recent)
        self._set_error(None)

    def _set_error(self, error: str | None) -> None:
        with self._lock:
            self._seen.error = None if error is None else redact(error)  # the page shows it
