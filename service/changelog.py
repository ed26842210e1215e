"""One Kafka transaction per batch: changelog entries, commit markers and output records
(DLQ, window results, late events).

The transactional.id is stable per instance, so starting a new instance fences the one
before it and aborts whatever transaction it left open. A reader with
isolation.level=read_committed therefore sees every batch whole, or not at all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from service.aggregate import BadRecord
from service.codec import Entry, changelog_partition_of, commit_key, encode_u64
from service.errors import BrewError
from service.kafka import KafkaConnection, produce_waiting

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OutputRecord:
    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None = None


def dlq_records(dlq_topic: str, source_topic: str, bad: Sequence[BadRecord]) -> list[OutputRecord]:
    """Bad input, bytes untouched, with the reason and where it came from."""
    return [OutputRecord(dlq_topic, b.key, b.value, [
        ("error", b.reason.encode()),
        ("source-topic", source_topic.encode()),
        ("source-partition", str(b.partition).encode()),
        ("source-offset", str(b.offset).encode()),
    ]) for b in bad]


TXN_TIMEOUT_S = 60.0
COMMIT_RETRIES = 5


class ChangelogWriter:
    def __init__(self, conn: KafkaConnection, topic: str, transactional_id: str, partitions: Sequence[int]) -> None:
        self.topic = topic
        self.partitions = list(partitions)
        self.transactional_id = transactional_id
        self._producer: Producer = conn.producer({
            "transactional.id": transactional_id,
            "transaction.timeout.ms": int(TXN_TIMEOUT_S * 1000),
            "linger.ms": 5,
            # Java-compatible hashing, so other clients agree on where a key lives.
            "partitioner": "murmur2_random",
        })

    def start(self) -> None:
        """Register the transactional.id: fences older instances, aborts their open txn."""
        try:
            self._producer.init_transactions(TXN_TIMEOUT_S)
        except KafkaException as exc:
            raise BrewError(f"cannot start changelog transactions as {self.transactional_id}: "
                            f"{exc.args[0].str()}") from None

    def commit_markers(self, seq: int) -> list[Entry]:
        """The entries that mark batch ``seq`` in every changelog partition."""
        return [(commit_key(p), encode_u64(seq)) for p in self.partitions]

    def publish(self, entries: Sequence[Entry], outputs: Sequence[OutputRecord] = (),
                before_commit: Callable[[], None] | None = None) -> dict[int, int]:
        """Produce ``entries`` and ``outputs`` in one transaction and commit it.

        Returns, per changelog partition written, the offset just past this batch's
        records: the store's position once it has applied them.
        """
        producer = self._producer
        positions: dict[int, int] = {}

        def delivered(err: KafkaError | None, msg: Message) -> None:
            p, o = msg.partition(), msg.offset()
            if err is None and p is not None and o is not None and o + 1 > positions.get(p, 0):
                positions[p] = o + 1

        try:
            producer.begin_transaction()
            for key, value in entries:
                produce_waiting(producer, self.topic, key, value, partition=changelog_partition_of(key),
                                on_delivery=delivered)
            for out in outputs:
                produce_waiting(producer, out.topic, out.key, out.value, headers=out.headers)
            if before_commit is not None:
                before_commit()
            self._commit()  # serves every delivery report before it returns
        except KafkaException as exc:
            err = exc.args[0]
            if err.txn_requires_abort():
                self._abort()
            raise BrewError(f"changelog transaction failed: {err.str()}") from None
        return positions

    def _commit(self) -> None:
        for attempt in range(1, COMMIT_RETRIES + 1):
            try:
                self._producer.commit_transaction(TXN_TIMEOUT_S)
                return
            except KafkaException as exc:
                if not exc.args[0].retriable() or attempt == COMMIT_RETRIES:
                    raise
                log.warning("changelog commit attempt %d failed (%s); retrying", attempt, exc.args[0].str())

    def _abort(self) -> None:
        try:
            self._producer.abort_transaction(TXN_TIMEOUT_S)
        except KafkaException as exc:
            log.warning("aborting the changelog transaction failed: %s", exc.args[0].str())

    def close(self) -> None:
        self._producer.flush(10)

