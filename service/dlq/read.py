"""The DLQ as records: what each one says (decoded from its headers, pure), which ones a
command selects, and reading them from the topic.

A DLQ record (``service.dlq.records``) holds the original key and value, cut only when too big for
the DLQ (headers ``truncated``, ``original-size``, ``original-key-size``), and headers
``error`` (the reason), ``source-topic``, ``source-partition`` and ``source-offset``. A
record that the driver could not read back holds no bytes and ``value-unavailable``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from service.dlq.records import UNAVAILABLE
from service.records.limits import printable
from topics.clock import parse_duration
from topics.kafka import KafkaConnection
from topics.records import ORIGINAL_SIZE, TRUNCATED, headers_of, read_from

Headers = Sequence[tuple[str, bytes | str | None]]
_NUMBER = re.compile(r"\d{1,19}")


@dataclass(frozen=True)
class DlqRecord:
    dlq_partition: int
    dlq_offset: int
    timestamp_ms: int
    reason: str
    source_topic: str
    source_partition: int
    source_offset: int
    key: bytes | None
    value: bytes | None
    cut: tuple[str, ...] = ()  # "key" and/or "value": only their beginning is here
    original_size: int | None = None
    unavailable: bool = False  # no bytes here: the source no longer had the record

    @property
    def whole(self) -> bool:
        """The DLQ holds the record's key and value exactly as they were."""
        return not self.cut and not self.unavailable

    @property
    def source(self) -> str:
        return f"{self.source_topic}:{self.source_partition}:{self.source_offset}"

    @property
    def position(self) -> tuple[int, int]:
        return self.source_partition, self.source_offset


@dataclass(frozen=True)
class NotDlq:
    """A record in the DLQ topic that brewstream did not write (no usable source headers)."""

    dlq_partition: int
    dlq_offset: int
    problem: str


def decode_dlq(partition: int, offset: int, timestamp_ms: int, key: bytes | None, value: bytes | None,
               headers: Headers) -> DlqRecord | NotDlq:
    """Whatever the headers hold, a record or the reason it is not one (never an exception)."""
    named: dict[str, bytes] = {}
    for name, raw in headers:
        named[name] = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else (raw or b"")
    missing = [h for h in ("error", "source-topic", "source-partition", "source-offset") if h not in named]
    if missing:
        return NotDlq(partition, offset, f"no {' or '.join(missing)} header")
    topic = named["source-topic"].decode("utf-8", "replace")
    part, off = named["source-partition"].decode("ascii", "replace"), named["source-offset"].decode("ascii", "replace")
    if not topic or not _NUMBER.fullmatch(part) or not _NUMBER.fullmatch(off):
        return NotDlq(partition, offset, "source headers that name no record")
    cut = tuple(c for c in named.get(TRUNCATED, b"").decode("ascii", "replace").split(",") if c in ("key", "value"))
    size = named.get(ORIGINAL_SIZE, b"").decode("ascii", "replace")
    return DlqRecord(partition, offset, timestamp_ms, named["error"].decode("utf-8", "replace"), topic, int(part),
                     int(off), key, value, cut, int(size) if _NUMBER.fullmatch(size) else None,
                     UNAVAILABLE in named)


def read_dlq(conn: KafkaConnection, topic: str, since_ms: int | None = None) -> Iterator[DlqRecord | NotDlq]:
    """The DLQ's committed records (from ``since_ms``) up to its end when the read starts."""
    for msg in read_from(conn, topic, since_ms):
        _kind, stamp = msg.timestamp()
        yield decode_dlq(msg.partition() or 0, msg.offset() or 0, stamp, msg.key(), msg.value(),
                         list(headers_of(msg).items()))


@dataclass(frozen=True)
class Selection:
    """Which DLQ records a command works on."""

    reason: str | None = None  # part of the reason, any case
    since_ms: int | None = None

    def wants(self, record: DlqRecord | NotDlq) -> bool:
        if isinstance(record, NotDlq):
            return self.reason is None
        return self.reason is None or self.reason.casefold() in record.reason.casefold()


def parse_since(text: str, now_s: float) -> int:
    """Unix ms from a duration back from now (``30m``, ``2h``) or an ISO 8601 time with its
    zone (``2026-11-23T10:00:00Z``)."""
    text = text.strip()
    try:
        return int((now_s - parse_duration(text)) * 1000)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        moment = None
    try:
        if moment is not None and moment.tzinfo is not None:
            return int(moment.timestamp() * 1000)
    except (OverflowError, ValueError):
        pass
    raise ValueError(f"{text[:60]!r} is neither a duration back from now (30m, 2h) nor a time with its zone "
                     "(2026-11-23T10:00:00Z)")


def preview(raw: bytes | None, limit: int = 80) -> str:
    """The start of some bytes on one line, for people."""
    if raw is None:
        return "null"
    text = printable(raw[:limit * 4].decode("utf-8", "replace"))
    return text if len(text) <= limit else text[:limit] + "…"
