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
from collections.abc import Callable, Sequence
from typing import TypeVar

from confluent_kafka import KafkaException

from topics.auth import from_java
from topics.errors import KafkaUnavailable
from topics.kafka import KafkaConnection, serving_problem, unavailable

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


# While the query runs, the active asks whether Kafka serves it once no batch has
# committed for QUIET_S (``ServingWatch``), every WATCH_EVERY_S.
QUIET_S = 5.0
WATCH_EVERY_S = 2.0
BEGIN, END = "begin", "end"


def watch_decision(waiting: bool, committed_lately: bool, problem: str | None) -> str | None:
    """Pure: what an active instance whose query runs does about Kafka now. BEGIN: an
    episode starts (say so once, not ready); END: it is over (a batch committed, or the
    cluster serves again); None: as it was. ``problem`` is ``serving_problem``'s answer,
    asked only when no batch committed lately."""
    if committed_lately or problem is None:
        return END if waiting else None
    return None if waiting else BEGIN


class ServingWatch:
    """While the query runs, say when Kafka cannot serve it, instead of waiting for Spark's
    source to fail the query (its client timeouts and retries: up to a minute): one line
    when an episode starts (``Outage``), /readyz not ready with the reason meanwhile, and
    ready again with the next committed batch. Nothing else changes: the query goes on,
    and picks up by itself once the cluster heals."""

    def __init__(self, committed: Callable[[], int], problem: Callable[[], str | None],
                 on_begin: Callable[[str], None], on_end: Callable[[], None]) -> None:
        self.committed, self.problem, self.on_begin, self.on_end = committed, problem, on_begin, on_end
        self.waiting = False
        self._seq = committed()
        self._at = time.monotonic()
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
        seq = self.committed()
        if seq != self._seq:
            self._seq, self._at = seq, time.monotonic()
        lately = time.monotonic() - self._at < QUIET_S
        problem = None if lately else self.problem()
        with self._lock:
            if self._stop.is_set():
                return
            decision = watch_decision(self.waiting, lately, problem)
            if decision == BEGIN and problem is not None:
                self.waiting = True
                self.on_begin(problem)
            elif decision == END:
                self.waiting = False
                self.on_end()

    def _loop(self) -> None:
        while not self._stop.wait(WATCH_EVERY_S):
            try:
                self.check()
            except Exception as exc:  # a watch must never take the daemon down
                log.debug("the Kafka watch failed: %s", exc)


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
