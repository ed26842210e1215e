"""``brewstream dlq export``: DLQ records as JSON lines (``topics.dlq_lines``), to repair
with any tool and feed back with ``seed-orders --file``.

A record the DLQ holds whole is written from the DLQ. One cut to fit the DLQ is read back
whole from its source topic; when the source no longer holds it, the part the DLQ has is
written with ``"truncated": true``, which ``seed-orders`` refuses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from service.dlq.read import DlqRecord, NotDlq, Selection, read_dlq
from topics.clock import utc_iso
from topics.dlq_lines import ExportLine, encode_line
from topics.kafka import KafkaConnection
from topics.records import read_at


@dataclass
class ExportResult:
    written: int = 0
    read_back: int = 0  # cut in the DLQ, written whole from the source topic
    partial: int = 0  # cut in the DLQ and gone from the source: "truncated": true
    foreign: int = 0  # records brewstream did not write, left out

    def summary(self, where: str) -> str:
        text = f"dlq export: {self.written} records to {where}"
        if self.read_back:
            text += f" ({self.read_back} cut in the DLQ, written whole from their source topic)"
        if self.partial:
            text += (f"; {self.partial} only in part (\"truncated\": true: the source no longer holds them, and "
                     "seed-orders refuses such lines)")
        if self.foreign:
            text += f"; {self.foreign} records brewstream did not write left out"
        return text


def export(conn: KafkaConnection, dlq_topic: str, selection: Selection,
           write: Callable[[bytes], object]) -> ExportResult:
    result = ExportResult()

    def emit(record: DlqRecord, key: bytes | None, value: bytes | None, truncated: bool) -> None:
        write(encode_line(ExportLine(record.source_topic, record.source_partition, record.source_offset,
                                     record.reason, key, value, truncated, record.dlq_partition, record.dlq_offset,
                                     utc_iso(record.timestamp_ms / 1000, millis=True))) + b"\n")
        result.written += 1

    fetch: dict[str, dict[tuple[int, int], DlqRecord]] = {}
    for record in read_dlq(conn, dlq_topic, selection.since_ms):
        if not selection.wants(record):
            continue
        if isinstance(record, NotDlq):
            result.foreign += 1
        elif record.whole:
            emit(record, record.key, record.value, False)
        else:
            fetch.setdefault(record.source_topic, {})[record.position] = record
    for topic, wanted in fetch.items():
        for fetched in read_at(conn, topic, sorted(wanted)):
            record = wanted[(fetched.partition, fetched.offset)]
            if fetched.message is not None:
                emit(record, fetched.message.key(), fetched.message.value(), False)
                result.read_back += 1
            else:
                emit(record, record.key, record.value, True)
                result.partial += 1
    return result
