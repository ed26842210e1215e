"""Bad input to the DLQ: the original bytes (cut only when too big for one record), the
reason, and where the record came from, so anyone can fetch the original.

Runs on the driver, inside the batch's transaction: records whose bytes stayed on the
executors are read back from the source topic here, one at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence

from restorer.changelog import OutputRecord
from service.records.badrecords import BadRecord
from topics.kafka import KafkaConnection
from topics.records import fit_record, read_at

log = logging.getLogger("brewstream")

UNAVAILABLE = "value-unavailable"


def dlq_records(conn: KafkaConnection, dlq_topic: str, source_topic: str, bad: Sequence[BadRecord],
                max_record_bytes: int) -> Iterator[OutputRecord]:
    """The DLQ records of one batch, in source order, produced lazily."""
    by_position = {(b.partition, b.offset): b for b in bad if not b.carried}
    for b in bad:
        if b.carried:
            yield _record(dlq_topic, source_topic, b, b.key, b.value, max_record_bytes)
    for fetched in read_at(conn, source_topic, sorted(by_position)):
        b = by_position[(fetched.partition, fetched.offset)]
        if fetched.message is None:
            yield _record(dlq_topic, source_topic, b, None, None, max_record_bytes,
                          [(UNAVAILABLE, b"the record is no longer in the source topic")])
        else:
            yield _record(dlq_topic, source_topic, b, fetched.message.key(), fetched.message.value(),
                          max_record_bytes)


def source_headers(reason: str, source_topic: str, partition: int, offset: int) -> list[tuple[str, bytes]]:
    return [
        ("error", reason.encode()),
        ("source-topic", source_topic.encode()),
        ("source-partition", str(partition).encode()),
        ("source-offset", str(offset).encode()),
    ]


def _record(dlq_topic: str, source_topic: str, b: BadRecord, key: bytes | None, value: bytes | None,
            max_record_bytes: int, extra: list[tuple[str, bytes]] | None = None) -> OutputRecord:
    headers = source_headers(b.reason, source_topic, b.partition, b.offset) + (extra or [])
    sizes = (b.key_size, b.value_size) if b.carried else (None, None)
    key, value, headers = fit_record(key, value, headers, max_record_bytes, *sizes)
    return OutputRecord(dlq_topic, key, value, headers)


def warn_internal(reasons: Mapping[str, int]) -> None:
    """Records that hit an unexpected error went to the DLQ like any bad record; say so loudly."""
    internal = {reason: n for reason, n in reasons.items() if reason.startswith("internal: ")}
    if internal:
        log.warning("%d records hit an unexpected error and went to the DLQ (%s); the batch went on",
                    sum(internal.values()), ", ".join(sorted(internal)))
