"""``brewstream dlq replay``: DLQ records back to their input topic, each exactly once.

For bad records that were not bad after all (a rule since changed, such as a raised
``--max-name-bytes``, or an upstream fix): each selected record is produced again to the
topic it came from, key and value byte for byte (and to its partition), with a
``dlq-source`` header naming the original. The daemon then treats it like any input: it
is counted, or it lands in the DLQ again with its reason.

Exactly once, even when a replay is interrupted and run again: every replayed record and
a ledger record keyed by its source (``topic:partition:offset``, on the compacted
``brew.orders.dlq-replays``) are produced in one Kafka transaction, and the daemon and
every replay read with read_committed. A run first registers the replay's
``transactional.id`` (one per ledger), which aborts whatever an interrupted run left open
and fences one still running, then reads the ledger and skips what it holds.

Bytes come from the DLQ when it holds them whole. A record cut to fit the DLQ is read
from its source topic, and so is an event (the windows pipeline needs its ``event-time``
header, which the DLQ does not keep); one the source no longer holds is skipped and said so.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson
from confluent_kafka import KafkaError, KafkaException, Message

from restorer.faults import FaultPlan
from service.dlq.read import DlqRecord, NotDlq, Selection, read_dlq
from topics.catalog import Topics
from topics.clock import utc_iso
from topics.dlq_lines import SOURCE_HEADER
from topics.errors import BrewError
from topics.kafka import KafkaConnection, deletion_risk, max_record_bytes, partitions_of, topic_exists
from topics.records import call_until, close_transactional, headers_of, is_fenced, produce_waiting, read_at, read_from
from topics.retention import keep_records_fix

log = logging.getLogger("brewstream")

POINTS = ("replay-mid-transaction", "replay-after-commit")
TXN_TIMEOUT_S = 60.0  # for each call on the transaction
# A transaction stays open while the next records are read back from their source topics,
# which may take a while for big ones; the broker allows up to 15 minutes by default.
TXN_OPEN_S = 300.0
DEFAULT_BATCH = 500

ALREADY = "already replayed"
NOT_OURS = "not written by brewstream"
GONE = "cut in the DLQ, and the source no longer holds the original"
EVENT_GONE = "an event whose source no longer holds it (its event-time header is not in the DLQ)"


def transactional_id(ledger_topic: str) -> str:
    """One per ledger, so two replays of one DLQ fence each other."""
    return f"brewstream-dlq-replay:{ledger_topic}"


@dataclass
class ReplayResult:
    selected: int = 0
    replayed: int = 0  # or, in a dry run, would be
    skipped: Counter[str] = field(default_factory=Counter)
    targets: Counter[str] = field(default_factory=Counter)
    planned: list[str] = field(default_factory=list)  # a dry run's records, "source  reason"

    def summary(self, dry_run: bool) -> str:
        verb = "would replay" if dry_run else "replayed"
        where = ", ".join(f"{n} to {t}" for t, n in sorted(self.targets.items())) or "none"
        skipped = "; ".join(f"{n} {why}" for why, n in sorted(self.skipped.items()))
        return f"dlq replay: {self.selected} selected; {verb} {self.replayed} ({where})" + \
            (f"; skipped {skipped}" if skipped else "")


def read_ledger(conn: KafkaConnection, ledger_topic: str, missing_ok: bool = False) -> set[str]:
    """The sources every committed replay sent back (none when ``missing_ok`` and the ledger
    topic was never created: nothing was ever replayed)."""
    if missing_ok and not topic_exists(conn, ledger_topic):
        return set()
    return {(msg.key() or b"").decode("utf-8", "replace") for msg in read_from(conn, ledger_topic) if msg.key()}


def replay(conn: KafkaConnection, topics: Topics, selection: Selection, dry_run: bool = False,
           batch: int = DEFAULT_BATCH, faults: FaultPlan | None = None) -> ReplayResult:
    inputs = {topics.orders: partitions_of(conn, topics.orders), topics.events: partitions_of(conn, topics.events)}
    partitions_of(conn, topics.dlq_replays)  # a missing ledger is a clear error before anything is sent
    how = deletion_risk(conn, topics.dlq_replays)
    if how is not None:
        log.warning("the replay ledger %s %s: a replay it has forgotten, run again, sends its records a second "
                    "time; %s", topics.dlq_replays, how, keep_records_fix(topics.dlq_replays))
    result = ReplayResult()
    sender = None if dry_run else Sender(conn, topics.dlq_replays, batch, max(
        max_record_bytes(conn, t) for t in inputs), faults)
    try:
        done = read_ledger(conn, topics.dlq_replays)  # after the sender aborted what a killed run left open

        def emit(record: DlqRecord, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]]) -> None:
            result.replayed += 1
            result.targets[record.source_topic] += 1
            if sender is None:
                result.planned.append(f"{record.source}  {record.reason}")
                return
            partition = record.source_partition if record.source_partition in inputs[record.source_topic] else None
            sender.send(record, partition, key, value, [*headers, (SOURCE_HEADER, record.source.encode())])

        fetch: dict[str, dict[tuple[int, int], DlqRecord]] = {}
        for record in read_dlq(conn, topics.dlq, selection.since_ms):
            if not selection.wants(record):
                continue
            result.selected += 1
            if isinstance(record, NotDlq):
                result.skipped[NOT_OURS] += 1
                continue
            why = _skip(record, done, inputs)
            if why is not None:
                result.skipped[why] += 1
                continue
            done.add(record.source)  # the same source twice in the DLQ goes back once
            if record.whole and record.source_topic != topics.events:
                emit(record, record.key, record.value, [])
            else:
                fetch.setdefault(record.source_topic, {})[record.position] = record
        for topic, wanted in fetch.items():
            for fetched in read_at(conn, topic, sorted(wanted)):
                record = wanted[(fetched.partition, fetched.offset)]
                if fetched.message is not None:
                    emit(record, fetched.message.key(), fetched.message.value(), _headers(fetched.message))
                else:
                    result.skipped[GONE if not record.whole else EVENT_GONE] += 1
        if sender is not None:
            sender.finish()
    finally:
        if sender is not None:
            sender.close()
    return result


def _skip(record: DlqRecord, done: set[str], inputs: dict[str, list[int]]) -> str | None:
    if record.source in done:
        return ALREADY
    if record.source_topic not in inputs:
        return f"from {record.source_topic}, not an input of this --topic-prefix"
    return None


def _headers(msg: Message) -> list[tuple[str, bytes]]:
    """The original's headers (an event's event-time), minus an older replay's mark."""
    return [(name, value) for name, value in headers_of(msg).items() if name != SOURCE_HEADER]


class Sender:
    """Replayed records and their ledger entries, ``batch`` at a time in one transaction."""

    def __init__(self, conn: KafkaConnection, ledger_topic: str, batch: int, record_bytes: int,
                 faults: FaultPlan | None) -> None:
        self.ledger, self.batch = ledger_topic, batch
        self.faults = faults
        self._open = 0
        self._failures: list[str] = []
        self._producer = conn.producer({
            "transactional.id": transactional_id(ledger_topic),
            "transaction.timeout.ms": int(TXN_OPEN_S * 1000),
            "linger.ms": 5,
            "message.max.bytes": max(1_000_000, min(record_bytes + 4096, 1_000_000_000)),
        })
        self._call(lambda: self._producer.init_transactions(TXN_TIMEOUT_S), "start the replay's transactions")

    def send(self, record: DlqRecord, partition: int | None, key: bytes | None, value: bytes | None,
             headers: list[tuple[str, bytes]]) -> None:
        if self._open == 0:
            self._call(self._producer.begin_transaction, "begin a transaction")
        entry = orjson.dumps({"dlq": f"{record.dlq_partition}:{record.dlq_offset}", "to": record.source_topic,
                              "reason": record.reason, "at": utc_iso(time.time(), millis=True)})
        # Waiting for room polls the producer, which raises a fatal error (fenced) once.
        self._call(lambda: produce_waiting(self._producer, record.source_topic, key, value, partition=partition,
                                           headers=headers, on_delivery=self._delivered), "write a record")
        self._call(lambda: produce_waiting(self._producer, self.ledger, record.source.encode(), entry,
                                           on_delivery=self._delivered), "write a ledger entry")
        self._open += 1
        if self._open >= self.batch:
            self.finish()

    def finish(self) -> None:
        """Commit the open transaction, if any."""
        if self._open == 0:
            return
        if self.faults is not None:
            # so the fault point finds the records in the log, uncommitted
            self._call(lambda: self._producer.flush(TXN_TIMEOUT_S), "flush")
            self.faults.reached("replay-mid-transaction")
        self._call(lambda: call_until(self._producer.commit_transaction, time.monotonic() + TXN_TIMEOUT_S), "commit")
        if self._failures:  # a committed transaction has no failed records; stay safe anyway
            raise BrewError(f"a replayed record failed: {self._failures[0]}")
        self._open = 0
        if self.faults is not None:
            self.faults.reached("replay-after-commit")

    def close(self) -> None:
        if self._open:
            self._call(lambda: self._producer.abort_transaction(TXN_TIMEOUT_S), "abort", quiet=True)
        err = close_transactional(self._producer)
        if err is not None:
            log.debug("closing the replay's producer: %s", err.str())

    def _delivered(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self._failures.append(err.str())

    def _call(self, step: Callable[[], object], what: str, quiet: bool = False) -> None:
        try:
            step()
        except KafkaException as exc:
            err = exc.args[0]
            if quiet:
                log.warning("could not %s the replay's transaction: %s", what, err.str())
                return
            if is_fenced(err):
                raise BrewError("another `brewstream dlq replay` of this DLQ took over and this one stopped; what "
                                "it committed stays replayed") from None
            raise BrewError(f"the replay could not {what}: {err.str()}"
                            + (f" ({self._failures[0]})" if self._failures else "")
                            + "; what was committed before stays replayed, run it again for the rest") from None
