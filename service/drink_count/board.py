"""The top-N board: every flush interval, a consistent read of the store becomes a
printed table and one JSON snapshot on the output topic. It runs on its own thread and
only reads the store, so flushing never holds up a batch.

Only the active instance's snapshots reach a ``read_committed`` reader, and in order:
each snapshot is its own transaction under a ``transactional.id`` derived from the
changelog's (``board_transactional_id``), registered by each active spell before its
first snapshot. A process woken after a takeover is thus fenced by the broker, whatever
it was doing when it froze: a snapshot it had built, queued or even sent uncommitted is
refused or aborted, never put after the new active's. ``may_publish`` (the lease's proof
that this instance is the active one) only saves the work of a snapshot that could not
count. A lost snapshot is replaced by the next; ``seq`` counts snapshots of this process,
and consumers that need order across restarts use ``ts``.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import TextIO

from confluent_kafka import KafkaError, KafkaException, Producer

from restorer.changelog import transactional_id
from restorer.store import Store
from service.drink_count.counts import drink_counts
from service.drink_count.topn import SNAPSHOT_KEY, board_text, snapshot_record, top_n
from service.instance.periodic import Every
from topics.kafka import KafkaConnection, is_transient, max_record_bytes
from topics.records import RECORD_OVERHEAD, close_transactional, fenced_by_newer, is_fenced

log = logging.getLogger("brewstream")
FINAL_PROOF_WAIT_S = 3.0
# A snapshot's transaction is one record: a killed active's open one holds the topic's
# last stable offset back until the next active registers, or for this long at most.
TXN_TIMEOUT_S = 10.0
# How long one call waits for Kafka (registering, committing) before the snapshot is given
# up. Short, because a stop joins the flush thread (a role change, a wait for Kafka), and
# neither call is lost by it: the next flush resumes one that timed out.
SEND_WAIT_S = 1.0


# Refusals that say the principal may not use the board's transactional id.
_REFUSED = frozenset({KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                      KafkaError.TOPIC_AUTHORIZATION_FAILED})


def board_transactional_id(changelog_topic: str) -> str:
    """One per changelog, like the changelog's own (``restorer.changelog.transactional_id``):
    every active spell's board fences the boards of the spells before it."""
    return f"{transactional_id(changelog_topic)}:board"


class SnapshotSender:
    """Sends each snapshot in a transaction of its own and never raises: a snapshot the
    cluster refuses is logged and dropped. Once fenced (another active registered the same
    id, or the principal may not use it), it sends nothing more; a producer that failed for
    good in any other way is replaced (``_renew``)."""

    def __init__(self, conn: KafkaConnection, topic: str, txn_id: str) -> None:
        self.topic = topic
        self.txn_id = txn_id
        self.fenced = False
        self._conn = conn
        self._registered = False
        self._unfinished: str | None = None  # "commit" or "abort": what the last send left to finish
        self._renewed = 0  # producers replaced since a snapshot last went through
        self._producer: Producer = self._new_producer()

    def _new_producer(self) -> Producer:
        return self._conn.producer({
            "transactional.id": self.txn_id, "transaction.timeout.ms": int(TXN_TIMEOUT_S * 1000),
            "message.timeout.ms": int(TXN_TIMEOUT_S * 1000), "linger.ms": 0})

    def register(self) -> bool:
        """Register the id, which fences every earlier sender of it and aborts what one left
        open; the first ``send`` does it otherwise. True once registered, until fenced."""
        if not (self._registered or self.fenced):
            try:
                self._producer.init_transactions(SEND_WAIT_S)
                self._registered = True
            except KafkaException as exc:
                self._failed(None, exc)
        return self._registered and not self.fenced

    def send(self, seq: int, record: bytes, before_commit: Callable[[], None] | None = None) -> bool:
        """True once the snapshot is committed. ``before_commit`` runs between the produce and
        the commit (drills: another instance registering there)."""
        if not self.register():
            return False
        p = self._producer
        try:
            self._finish()
            p.begin_transaction()
            self._unfinished = "abort"
            p.produce(self.topic, key=SNAPSHOT_KEY, value=record)
            self._unfinished = "commit"
            if before_commit is not None:
                before_commit()
            p.commit_transaction(SEND_WAIT_S)
            self._unfinished = None
            self._renewed = 0
            return True
        except (BufferError, KafkaException) as exc:
            self._failed(seq, exc)
            return False

    def _finish(self) -> None:
        """What a failed send left open. A commit that timed out may be asked again (its
        snapshot is older than the one about to go, so the order holds); a transaction in
        error is aborted."""
        if self._unfinished == "commit":
            self._producer.commit_transaction(SEND_WAIT_S)
        elif self._unfinished == "abort":
            self._producer.abort_transaction(SEND_WAIT_S)
        self._unfinished = None

    def _failed(self, seq: int | None, exc: BufferError | KafkaException) -> None:
        err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
        what = "the board's transactions not registered" if seq is None else f"top-N snapshot {seq} not sent"
        if isinstance(err, KafkaError) and is_fenced(err):
            if not (fenced_by_newer(err) or err.code() in _REFUSED):
                self._renew(what, err)
                return
            self.fenced = True
            why = ("another instance registered the board's transactions as %s" if fenced_by_newer(err) else
                   "the broker refuses the board's transactions as %s (with ACLs on transactional ids, allow "
                   "this one beside the changelog's)")
            log.warning("%s: " + why + " (%s); this one sends no more snapshots", what, self.txn_id, err.str())
            return
        if isinstance(err, KafkaError):
            if err.txn_requires_abort():
                self._unfinished = "abort"
            elif err.code() == KafkaError._STATE:
                # Nothing of ours is open where the call expected it (an abort of what the
                # cluster had already ended): start clean next time.
                self._unfinished = None
            # Otherwise (retriable: the cluster away) the same step is asked again next time.
        # A full local queue (BufferError) comes from the produce, with "abort" already set.
        # Snapshots are best effort by design (see above): the next one replaces this. The
        # cluster being away is said once by the daemon's outage lines, not at every flush.
        level = logging.DEBUG if isinstance(err, KafkaError) and is_transient(err) else logging.WARNING
        log.log(level, "%s: %s", what, err.str() if isinstance(err, KafkaError) else exc)

    def _renew(self, what: str, err: KafkaError) -> None:
        """A producer that failed for good without being fenced (``INVALID_TXN_STATE`` as a node
        of the cluster was killed, say) ends, not the board: a new one registers before the
        next snapshot. Only the proven active instance sends one (``may_publish``), and a newer
        active's registration fences the new producer as it would have the old."""
        close_transactional(self._producer, 0)
        self._producer = self._new_producer()
        self._registered = False
        self._unfinished = None
        # Said once per run of failures: a cluster that fails every new producer would
        # otherwise fill the log at every flush.
        level = logging.WARNING if self._renewed == 0 else logging.DEBUG
        self._renewed += 1
        log.log(level, "%s: the producer of the board's transactions as %s failed (%s); a new one registers "
                "for the next snapshot", what, self.txn_id, err.str())

    def close(self, timeout_s: float) -> None:
        err = close_transactional(self._producer, timeout_s)
        if err is not None:
            log.debug("closing the board's producer: %s", err.str())


class BoardFlusher:
    def __init__(self, store: Store, conn: KafkaConnection, topic: str, n: int, interval_s: float,
                 out: TextIO = sys.stdout, clock: Callable[[], datetime] = datetime.now,
                 on_flush: Callable[[float], None] | None = None,
                 may_publish: Callable[[], bool] = lambda: True, *, changelog_topic: str) -> None:
        self.store = store
        self.topic = topic
        self.n = n
        self.interval_s = interval_s
        self.out = out
        self.clock = clock
        self.on_flush = on_flush
        self.may_publish = may_publish
        self.seq = 0
        self._sender = SnapshotSender(conn, topic, board_transactional_id(changelog_topic))
        self._max_bytes = max_record_bytes(conn, topic) - RECORD_OVERHEAD
        # Registered as the flush thread starts, beside the query's start: not on the way to
        # the first batch, and done before a short run's last snapshot.
        self._every = Every(interval_s, self.flush, "top-N flush", first=self._sender.register)

    def start(self) -> None:
        self._every.start()

    def stop(self, final_flush: bool = True) -> None:
        self._every.stop()
        if final_flush:
            # The last word is worth a short wait for the lease's proof (its own announcement
            # read back), which a busy moment can delay past one flush.
            deadline = time.monotonic() + FINAL_PROOF_WAIT_S
            while not self.may_publish() and time.monotonic() < deadline:
                time.sleep(0.05)
            self.flush()
        # Best effort (see above): a stop on the way to wait for Kafka leaves what it cannot send.
        self._sender.close(10 if final_flush else 0)

    def flush(self) -> None:
        started = time.monotonic()
        state = drink_counts(self.store.read_all())
        now = self.clock()
        ranked = top_n(state.counts, self.n)
        self.seq += 1
        print(board_text(now, state.processed_orders, self.n, ranked), file=self.out, flush=True)
        record = snapshot_record(self.seq, now, state.processed_orders, ranked, self._max_bytes)
        if not self.may_publish():  # asked last, just before the produce
            log.debug("top-N snapshot %d not sent: this instance is not the proven active one", self.seq)
            return
        self._sender.send(self.seq, record)
        if self.on_flush is not None:
            self.on_flush(time.monotonic() - started)
