"""Riding out Kafka's own failures without stopping.

A replicated cluster that loses a broker, a partition leader, a transaction coordinator
or its controller, or whose in-sync replicas fall below min.insync.replicas, heals by
itself within its own election and session timeouts. Meanwhile any Kafka call may fail
with a transient error (``topics.kafka.is_transient``, raised as ``KafkaUnavailable``),
and Spark's Kafka source may fail the query (``query_failed_on_kafka``).

The daemon treats all of them alike: the role is given up where it stands, it waits
until the cluster serves its topics again, saying so once per episode, and starts the
role again the way it starts at launch. Nothing half-done survives that the start-up
order does not repair (invariants 1-6 in ``restorer``): an open transaction is aborted
when the writer starts again, a committed one that the store missed is applied by the
catch-up, and the replayed batch counts only rows above the store's offsets. So no
refused or retried produce can reach the store twice.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from confluent_kafka import Consumer, KafkaException

from topics.auth import from_java
from topics.errors import KafkaUnavailable
from topics.kafka import KafkaConnection, serving_problem, unavailable, watermarks

if TYPE_CHECKING:
    from restorer.store import Store

log = logging.getLogger("brewstream")
T = TypeVar("T")

# How often a waiting daemon asks whether the cluster serves again.
CHECK_EVERY_S = 0.5

# What Spark's Kafka source (the Java client) fails a query with while the cluster heals.
_KAFKA_TROUBLE = re.compile(
    r"org\.apache\.kafka\.common\.errors\.(TimeoutException|NotLeaderOrFollowerException|"
    r"LeaderNotAvailableException|NetworkException|DisconnectException|NotEnoughReplicas\w*Exception|"
    r"KafkaStorageException|BrokerNotAvailableException|CoordinatorNotAvailableException|"
    r"NotCoordinatorException|FencedLeaderEpochException|UnknownLeaderEpochException|"
    r"OffsetNotAvailableException|ReplicaNotAvailableException)"
    r"|Timeout of \d+ms expired before|Cannot fetch record for offset \d+ in \d+ milliseconds")


def trouble(exc: BaseException) -> KafkaUnavailable | None:
    """``exc`` as ``KafkaUnavailable`` when it is the cluster healing, else None."""
    if isinstance(exc, KafkaUnavailable):
        return exc
    if isinstance(exc, KafkaException):
        return unavailable("a Kafka request failed", exc)
    return None


def query_failed_on_kafka(failure: str) -> bool:
    """Whether a failed query's whole text says Kafka could not serve its source for now;
    never when Kafka refused the source (``topics.auth``: a login, a certificate, an ACL),
    whatever time-outs the text also names: no wait ends a refusal."""
    return from_java(failure) is None and bool(_KAFKA_TROUBLE.search(failure))


def refusal_causes(exc: BaseException) -> str:
    """When a failed query's text says Kafka refused its source (``topics.auth``), the Java
    causes below, one line each (``cause: …``), else nothing: the query's own text names
    only the top exception (``SslAuthenticationException: SSL handshake failed``), and which
    check failed (a certificate that does not verify, say) is in a cause."""
    if from_java(str(exc)) is None:
        return ""
    trace = str(getattr(exc, "_stackTrace", "") or "")  # pyspark's captured JVM trace
    causes = [ln.strip()[len(_CAUSED_BY):] for ln in trace.splitlines() if ln.strip().startswith(_CAUSED_BY)]
    return "".join(f"\ncause: {cause[:300]}" for cause in causes)


_CAUSED_BY = "Caused by: "


def through_outages(step: Callable[[], T], stop: threading.Event,
                    wait_out: Callable[[str], bool]) -> tuple[bool, T | None]:
    """Run ``step`` until it goes through, waiting out each failure that is Kafka's trouble
    with ``wait_out(reason)`` (False when asked to stop meanwhile); any other failure is
    raised. ``(True, result)``, or ``(False, None)`` when asked to stop first: a step's own
    None (most steps return nothing) never reads as a stop."""
    while not stop.is_set():
        try:
            result = step()
        except Exception as exc:
            kafka = trouble(exc)
            if kafka is None:
                raise
            if not wait_out(str(kafka)):
                return False, None
            continue
        return True, result
    return False, None


# The readiness rule of an active instance whose query runs, stated here once: it is
# ready while its batches make progress, and not ready once input has waited STALL_S with
# no batch committed (``stalled_for``): a batch in flight that long, or records past the
# store's offsets that no batch took, or end offsets of the input that cannot be read.
# An idle instance (nothing waits) stays ready. The watch asks every WATCH_EVERY_S, and
# asks Kafka only once no batch has committed for STALL_S: /readyz says 503 within
# STALL_S + WATCH_EVERY_S + BACKLOG_ASK_S of the last commit while input waits.
STALL_S = 5.0
WATCH_EVERY_S = 1.0
# A batch that is still computing is progress, not a stall, for as long as a batch may
# take: a query's first one (a cold JVM compiling while it reads a backlog: 5.6 s for 3,000
# orders here) up to FIRST_BATCH_S, later ones SLOW_BATCH_FACTOR times the last one's time
# (a catch-up's batches of a million records take seconds each), and never less than
# STALL_S. Beyond that, and for a query that cannot even plan a batch, the rule above holds.
FIRST_BATCH_S = 60.0
SLOW_BATCH_FACTOR = 3.0
# One question for the input's end offsets: a leader that answers does so in milliseconds.
BACKLOG_ASK_S = 2.0
BEGIN, END = "begin", "end"


def stalled_for(now: float, committed_at: float, idle_at: float, waiting: bool) -> float:
    """Pure: how long input has waited with no batch committed: since the later of the last
    commit and the last time nothing waited; 0 when nothing waits now. Times are monotonic."""
    return max(0.0, now - max(committed_at, idle_at)) if waiting else 0.0


def batch_allowance(last_batch_s: float | None) -> float:
    """Pure: how long a batch in flight may run before it counts as stalled (see above);
    ``last_batch_s`` None: no batch of this query has committed yet."""
    if last_batch_s is None:
        return FIRST_BATCH_S
    return max(STALL_S, SLOW_BATCH_FACTOR * last_batch_s)


def watch_decision(in_episode: bool, stalled_s: float) -> str | None:
    """Pure: what an active instance whose query runs does now. BEGIN: input has waited
    STALL_S with no batch committed, an episode starts (said once, not ready); END: a batch
    committed, or nothing waits any more; None: as it was."""
    if stalled_s >= STALL_S:
        return None if in_episode else BEGIN
    return END if in_episode else None


def backlog_text(topic: str, stored: Mapping[int, int], ends: Mapping[int, int]) -> str | None:
    """Pure: what waits for the query in ``topic`` (records past the store's next offsets,
    ``stored``, up to the end offsets ``ends``), or None when nothing does."""
    behind = {p: e - stored.get(p, 0) for p, e in sorted(ends.items()) if e > stored.get(p, 0)}
    if not behind:
        return None
    parts = ", ".join(f"{p}: {n}" for p, n in behind.items())
    return f"{sum(behind.values())} records of {topic} wait (per partition {parts})"


class Backlog(Protocol):
    def __call__(self) -> str | None: ...

    def close(self) -> None: ...


class InputBacklog:
    """What waits for the query in its input (``backlog_text``), asked of Kafka with one
    read_committed client kept for the watch's life; or why that cannot be told."""

    def __init__(self, conn: KafkaConnection, store: Store, topic: str, partitions: Sequence[int]) -> None:
        self.conn, self.store, self.topic, self.partitions = conn, store, topic, list(partitions)
        self._consumer: Consumer | None = None

    def __call__(self) -> str | None:
        if self._consumer is None:
            self._consumer = self.conn.consumer({"isolation.level": "read_committed"})
        deadline = time.monotonic() + BACKLOG_ASK_S  # one bound for the whole question
        ends: dict[int, int] = {}
        for p in self.partitions:
            try:
                ends[p] = watermarks(self._consumer, self.topic, p, max(0.05, deadline - time.monotonic()))[1]
            except KafkaException as exc:
                return (f"the end offset of {self.topic} partition {p} cannot be read "
                        f"({exc.args[0].str() if exc.args else exc})")
        return backlog_text(self.topic, self.store.next_offsets(self.topic), ends)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


class ServingWatch:
    """While the query runs, keep the readiness rule above: one line when an episode starts
    (through ``on_begin``: ``Outage``, /readyz not ready with the reason), and ready again
    with the next committed batch or once nothing waits (``on_end``). Progress decides, not
    the cluster's metadata: a paused broker goes on being named leader and coordinator until
    its session times out, and once it has, the query's clients may still wait on it.
    Nothing else changes: the query goes on, and picks up by itself once the cluster heals.
    ``problem`` (``serving_problem``) only names the cause, once an episode began."""

    def __init__(self, committed: Callable[[], int], backlog: Backlog, problem: Callable[[], str | None],
                 on_begin: Callable[[str], None], on_end: Callable[[], None],
                 computing: Callable[[], bool] = lambda: False) -> None:
        self.committed, self.backlog, self.problem = committed, backlog, problem
        self.computing = computing  # a batch runs, within its allowance (``batch_allowance``)
        self.on_begin, self.on_end = on_begin, on_end
        self.waiting = False  # an episode is under way
        self._seq = committed()
        self._committed_at = self._idle_at = time.monotonic()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="kafka-watch", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """No word from it after this returns; a question to Kafka under way (it may take a
        few timeouts while the cluster is down) is not waited for."""
        with self._lock:
            self._stop.set()

    def check(self) -> None:
        now = time.monotonic()
        seq = self.committed()
        if seq != self._seq:
            self._seq, self._committed_at = seq, now
        waiting: str | None = None
        if now - self._committed_at >= STALL_S:  # Kafka is asked only then
            waiting = self.backlog()
            now = time.monotonic()  # the question takes up to BACKLOG_ASK_S
            if waiting is None:
                self._idle_at = now
        stalled = stalled_for(now, self._committed_at, self._idle_at, waiting is not None)
        with self._lock:
            if self._stop.is_set():
                return
            decision = watch_decision(self.waiting, stalled)
            if decision == BEGIN and self.computing():
                decision = None  # slow, not stalled: said only once the batch outlives its allowance
            if decision == BEGIN:
                self.waiting = True
                self.on_begin(f"no batch committed for {stalled:.0f}s while {waiting}")
            elif decision == END:
                self.waiting = False
                self.on_end()
        if decision == BEGIN:
            cause = self.problem()  # may take a few timeouts: asked after /readyz says so
            with self._lock:
                if cause is not None and self.waiting and not self._stop.is_set():
                    self.on_begin(f"{cause}; no batch committed for {stalled:.0f}s")

    def _loop(self) -> None:
        try:
            while not self._stop.wait(WATCH_EVERY_S):
                try:
                    self.check()
                except Exception as exc:  # a watch must never take the daemon down
                    log.debug("the Kafka watch failed: %s", exc)
        finally:
            self.backlog.close()


class Outage:
    """Episodes of Kafka trouble: one line when one starts, one when it ends."""

    def __init__(self, on_change: Callable[[str | None], None] = lambda _reason: None) -> None:
        self.since: float | None = None  # monotonic start of the episode under way
        self.episodes = 0
        self._on_change = on_change

    def begin(self, reason: str) -> None:
        if self.since is not None:
            return
        self.since = time.monotonic()
        self.episodes += 1
        log.warning("Kafka cannot serve this instance now (%s); waiting for the cluster to heal, then "
                    "resuming by itself", reason)
        self._on_change(reason)

    def end(self) -> None:
        if self.since is None:
            return
        log.info("Kafka serves again after %.1fs; resuming", time.monotonic() - self.since)
        self.since = None
        self._on_change(None)

    def wait(self, conn: KafkaConnection, topics: Sequence[str], stop: threading.Event) -> bool:
        """Until the cluster serves ``topics`` (True) or ``stop`` is set (False)."""
        while not stop.is_set():
            problem = serving_problem(conn, topics)
            if problem is None:
                return True
            log.debug("still waiting for Kafka: %s", problem)
            stop.wait(CHECK_EVERY_S)
        return False
