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
    """Whether a failed query's whole text says Kafka could not serve its source for now."""
    return bool(_KAFKA_TROUBLE.search(failure))


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
