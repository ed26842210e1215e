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
count. A lost snapshot is replaced by the next.

The order to keep snapshots in is their ``seq`` (``topn.next_seq``): each registration
reads back the highest ``seq`` committed on the topic and goes on above it, so it rises
across restarts, takeovers and lost disks alike; ``batch`` is the store's batch sequence
the snapshot shows.

Fenced is not always another instance: a transaction coordinator that failed over, or
that timed the board's transaction out while the cluster stalled, bumps the producer's
epoch, and librdkafka reports that as fenced by a newer instance too. So a fenced sender
falls silent only until the lease proves, by an announcement sent after the fencing and
read back, that this instance is still the active one (``resume_after``): then a new
producer registers and the board goes on. While another instance is active, no such
proof comes, and this one stays silent; should it become the proven active again later,
it comes back the same way.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TextIO

from confluent_kafka import KafkaError, KafkaException, Producer

from restorer.changelog import transactional_id
from restorer.store import Store
from service.drink_count.counts import drink_counts
from service.drink_count.topn import SNAPSHOT_KEY, board_text, next_seq, snapshot_record, snapshot_seq, top_n
from service.instance.lease import ActiveProof, always_proven
from service.instance.periodic import Every
from topics.errors import BrewError
from topics.kafka import KafkaConnection, is_transient, max_record_bytes
from topics.records import RECORD_OVERHEAD, close_transactional, fenced_by_newer, is_fenced, read_tail

log = logging.getLogger("brewstream")
FINAL_PROOF_WAIT_S = 3.0
# The last snapshot at a clean stop is worth a few tries of a call that timed out.
FINAL_SEND_WAIT_S = 5.0
# A snapshot's transaction is one record: a killed active's open one holds the topic's
# last stable offset back until the next active registers, or for this long at most.
TXN_TIMEOUT_S = 10.0
# How long one call waits for Kafka (registering, committing) before the snapshot is given
# up. Short, because a stop joins the flush thread (a role change, a wait for Kafka), and
# neither call is lost by it: the next flush resumes one that timed out.
SEND_WAIT_S = 1.0
# Reading back the highest committed seq at registration: the offsets read first (a
# committed snapshot takes two: its record and its commit marker), then more, then all.
# Short for the same reason as SEND_WAIT_S; a read that fails is asked again next flush.
TAIL_BACKS: tuple[int | None, ...] = (16, 1024, None)
TAIL_READ_S = 2.0
# A principal the cluster refuses the board's id to is asked again this often: ACLs get fixed.
REFUSED_RETRY_S = 60.0


# Refusals that say the principal may not use the board's transactional id.
_REFUSED = frozenset({KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                      KafkaError.TOPIC_AUTHORIZATION_FAILED})
FENCED, REFUSED = "fenced", "refused"


@dataclass(frozen=True)
class Silence:
    """Why a sender sends nothing for now, and since when (monotonic)."""

    cause: str  # FENCED or REFUSED
    since: float


def resume_after(silence: Silence, now: float, proven_since: bool) -> bool:
    """Pure: whether a silenced sender registers a new producer now. ``proven_since``: the
    lease proves this instance the active one by an announcement sent after the silence
    began (``Lease.proven_active(since)``). A fencing then was the cluster's (an epoch bump),
    not another instance's: resume at once. A refusal (ACLs) is asked again now and then."""
    if not proven_since:
        return False
    return silence.cause == FENCED or now - silence.since >= REFUSED_RETRY_S


def board_transactional_id(changelog_topic: str) -> str:
    """One per changelog, like the changelog's own (``restorer.changelog.transactional_id``):
    every active spell's board fences the boards of the spells before it."""
    return f"{transactional_id(changelog_topic)}:board"


def committed_seq(conn: KafkaConnection, topic: str, timeout: float = TAIL_READ_S) -> int:
    """The highest ``seq`` among the snapshots committed on ``topic`` (0: none), read back
    ``read_committed`` from the end. Raises ``KafkaException`` or ``BrewError`` when the
    topic cannot be read now."""
    for back in TAIL_BACKS:
        seqs = [s for m in read_tail(conn, topic, back, timeout) if (s := snapshot_seq(m.value())) is not None]
        if seqs:
            return max(seqs)
    return 0


class SnapshotSender:
    """Sends each snapshot in a transaction of its own and never raises: a snapshot the
    cluster refuses is logged and dropped. Fenced (or refused the id), it falls silent
    until ``resume_after`` says otherwise; a producer that failed for good in any other
    way is replaced at once (``_renew``)."""

    def __init__(self, conn: KafkaConnection, topic: str, txn_id: str, proof: ActiveProof = always_proven,
                 last_committed: Callable[[], int] | None = None) -> None:
        self.topic = topic
        self.txn_id = txn_id
        self.silence: Silence | None = None
        self.last_seq = 0  # the highest seq produced by this sender or found committed on the topic
        self._conn = conn
        self._proof = proof
        self._last_committed = last_committed or (lambda: committed_seq(conn, topic))
        self._registered = False
        self._tail_read = False
        self._unfinished: str | None = None  # "commit" or "abort": what the last send left to finish
        self._renewed = 0  # producers replaced since a snapshot last went through
        self._producer: Producer = self._new_producer()

    @property
    def fenced(self) -> bool:
        """Silent for now: fenced, or refused the id."""
        return self.silence is not None

    def _new_producer(self) -> Producer:
        return self._conn.producer({
            "transactional.id": self.txn_id, "transaction.timeout.ms": int(TXN_TIMEOUT_S * 1000),
            "message.timeout.ms": int(TXN_TIMEOUT_S * 1000), "linger.ms": 0})

    def register(self) -> bool:
        """Register the id, which fences every earlier sender of it and aborts what one left
        open, then read back the highest seq committed before; the first ``send`` does it
        otherwise. True once both are done, until silenced."""
        if self.silence is not None:
            if not resume_after(self.silence, time.monotonic(), self._proof(since=self.silence.since)):
                return False
            log.info("the board's transactions as %s register again: the lease proves this instance the active "
                     "one since they were %s", self.txn_id, self.silence.cause)
            self._replace()
            self.silence = None
        if not self._registered:
            try:
                self._producer.init_transactions(SEND_WAIT_S)
                self._registered = True
            except KafkaException as exc:
                self._failed(None, exc)
                return False
        if not self._tail_read:
            # Only now: with every earlier sender fenced and its open transaction aborted,
            # nothing below what is read here can be committed any more.
            try:
                self.last_seq = max(self.last_seq, self._last_committed())
                self._tail_read = True
            except (KafkaException, BrewError) as exc:
                log.debug("the last committed snapshot of %s not read (%s); asked again at the next flush",
                          self.topic, exc)
                return False
        return True

    def send(self, record: Callable[[int], bytes], batch: int = 0,
             before_commit: Callable[[], None] | None = None) -> int | None:
        """The ``seq`` of the snapshot once committed, None when it was not. ``record`` builds
        the snapshot for its seq (``topn.next_seq`` of the last one and ``batch``, the store's
        batch it shows). ``before_commit`` runs between the produce and the commit (drills:
        another instance registering there)."""
        if not self.register():
            return None
        seq = next_seq(self.last_seq, batch)
        p = self._producer
        try:
            self._finish()
            p.begin_transaction()
            self._unfinished = "abort"
            self.last_seq = seq  # taken once produced, whether it commits or not: never sent twice
            p.produce(self.topic, key=SNAPSHOT_KEY, value=record(seq))
            self._unfinished = "commit"
            if before_commit is not None:
                before_commit()
            p.commit_transaction(SEND_WAIT_S)
            self._unfinished = None
            self._renewed = 0
            return seq
        except (BufferError, KafkaException) as exc:
            self._failed(seq, exc)
            return None

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
            if fenced_by_newer(err):
                self._silenced(FENCED, what, err)
            elif err.code() in _REFUSED:
                self._silenced(REFUSED, what, err)
            else:
                self._renew(what, err)
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

    def _silenced(self, cause: str, what: str, err: KafkaError) -> None:
        """Fenced, or refused the id: nothing is sent until ``resume_after`` allows it."""
        self.silence = Silence(cause, time.monotonic())
        close_transactional(self._producer, 0)
        if cause == FENCED:
            log.warning("%s: the board's producer as %s was fenced (%s): another instance registered the board's "
                        "transactions, or the cluster ended one (a coordinator that failed over or timed it out bumps "
                        "the epoch); snapshots resume once the lease proves this instance still the active one, and "
                        "stay off while another instance is", what, self.txn_id, err.str())
        else:
            log.warning("%s: the broker refuses the board's transactions as %s (%s); with ACLs on transactional "
                        "ids, allow this one beside the changelog's (asked again every %.0fs)", what, self.txn_id,
                        err.str(), REFUSED_RETRY_S)

    def _replace(self) -> None:
        close_transactional(self._producer, 0)
        self._producer = self._new_producer()
        self._registered = False
        self._tail_read = False
        self._unfinished = None

    def _renew(self, what: str, err: KafkaError) -> None:
        """A producer that failed for good without being fenced (``INVALID_TXN_STATE`` as a node
        of the cluster was killed, say) ends, not the board: a new one registers before the
        next snapshot. Only the proven active instance sends one (``may_publish``), and a newer
        active's registration fences the new producer as it would have the old."""
        self._replace()
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
                 may_publish: ActiveProof = always_proven, *, changelog_topic: str,
                 last_committed: Callable[[], int] | None = None) -> None:
        self.store = store
        self.topic = topic
        self.n = n
        self.interval_s = interval_s
        self.out = out
        self.clock = clock
        self.on_flush = on_flush
        self.may_publish = may_publish
        self.seq = 0  # of the last snapshot committed
        self._sender = SnapshotSender(conn, topic, board_transactional_id(changelog_topic), may_publish,
                                      last_committed)
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
            # read back), which a busy moment can delay past one flush; and, once proven, a
            # few tries of a call that timed out, or of a registration after a fencing.
            deadline = time.monotonic() + FINAL_PROOF_WAIT_S
            while not self.may_publish() and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.flush() is None and self.may_publish():
                deadline = time.monotonic() + FINAL_SEND_WAIT_S
                while self._snapshot()(False) is None and time.monotonic() < deadline:
                    time.sleep(0.1)
        # Best effort (see above): a stop on the way to wait for Kafka leaves what it cannot send.
        self._sender.close(10 if final_flush else 0)

    def _snapshot(self) -> Callable[[bool], int | None]:
        """Read the store once; the returned call prints the board (when asked) and sends its
        snapshot, returning the seq committed (None: not sent)."""
        state = self.store.read_all()
        counts = drink_counts(state)
        now = self.clock()
        ranked = top_n(counts.counts, self.n)

        def go(printed: bool) -> int | None:
            if printed:
                print(board_text(now, counts.processed_orders, self.n, ranked), file=self.out, flush=True)
            if not self.may_publish():  # asked last, just before the produce
                log.debug("top-N snapshot not sent: this instance is not the proven active one")
                return None
            seq = self._sender.send(
                lambda s: snapshot_record(s, now, counts.processed_orders, ranked, self._max_bytes, state.last_seq),
                state.last_seq)
            if seq is not None:
                self.seq = seq
            return seq
        return go

    def flush(self) -> int | None:
        """Print the board and send its snapshot: the seq committed, or None."""
        started = time.monotonic()
        seq = self._snapshot()(True)
        if self.on_flush is not None:
            self.on_flush(time.monotonic() - started)
        return seq
