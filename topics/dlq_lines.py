"""The JSON line ``brewstream dlq export`` writes for each DLQ record, and reads back in
``seed-orders --file`` (pure).

    {"source_topic": "brew.orders.v1", "source_partition": 1, "source_offset": 345,
     "reason": "item 0: drink is 300 bytes, over the 256-byte limit", "dlq_partition": 0,
     "dlq_offset": 17, "timestamp": "2026-11-23T10:00:01.250Z", "truncated": false,
     "key": "shop-07", "value": "{\"order_id\": …}"}

``key`` and ``value`` hold the bytes as text when they are UTF-8, else ``key_base64`` /
``value_base64`` hold them in base64; null is a record without one. So a line can be
repaired with any tool (``jq '.value |= …'``), and one nobody touched goes back byte for
byte. ``truncated`` is true only when the DLQ held part of the record and the source
topic no longer had the original: such a line cannot go back in.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

import orjson

from topics.errors import BrewError

# Present in every export line and in no order: how a line of a file is recognised.
MARKERS = ("source_topic", "source_partition", "source_offset")
# On a record that goes back in (a replay, a repaired line): the record it stands for,
# ``topic:partition:offset``, so its history can be followed.
SOURCE_HEADER = "dlq-source"


@dataclass(frozen=True)
class ExportLine:
    source_topic: str
    source_partition: int
    source_offset: int
    reason: str
    key: bytes | None
    value: bytes | None
    truncated: bool = False
    dlq_partition: int | None = None
    dlq_offset: int | None = None
    timestamp: str | None = None

    @property
    def source(self) -> str:
        """``topic:partition:offset``, the name of the record this line came from."""
        return f"{self.source_topic}:{self.source_partition}:{self.source_offset}"


def encode_line(line: ExportLine) -> bytes:
    doc: dict[str, object] = {
        "source_topic": line.source_topic, "source_partition": line.source_partition,
        "source_offset": line.source_offset, "reason": line.reason, "dlq_partition": line.dlq_partition,
        "dlq_offset": line.dlq_offset, "timestamp": line.timestamp, "truncated": line.truncated,
    }
    doc.update(_bytes_field("key", line.key))
    doc.update(_bytes_field("value", line.value))
    return orjson.dumps(doc)


def _bytes_field(name: str, raw: bytes | None) -> dict[str, object]:
    if raw is None:
        return {name: None}
    try:
        return {name: raw.decode("utf-8")}
    except UnicodeDecodeError:
        return {f"{name}_base64": base64.b64encode(raw).decode()}


class BadExportLine(BrewError):
    """A line that is an export line but cannot go back in; the message says why."""


def decode_line(raw: bytes) -> ExportLine | None:
    """The export line in ``raw``, or None when it is not one (an order, sent verbatim)."""
    if b'"source_offset"' not in raw:  # cheap: most lines of most files are orders
        return None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict) or not all(k in doc for k in MARKERS):
        return None
    topic, partition, offset = (doc[k] for k in MARKERS)
    if not isinstance(topic, str) or not _is_int(partition) or not _is_int(offset):
        raise BadExportLine("source_topic must be text, source_partition and source_offset whole numbers")
    reason = doc.get("reason")
    truncated = doc.get("truncated", False)
    if not isinstance(truncated, bool):
        raise BadExportLine("truncated must be true or false")
    return ExportLine(topic, partition, offset, reason if isinstance(reason, str) else "",
                      _read_bytes(doc, "key"), _read_bytes(doc, "value"), truncated)


def _read_bytes(doc: dict[str, object], name: str) -> bytes | None:
    coded = f"{name}_base64"
    if name in doc and coded in doc:
        raise BadExportLine(f"{name} and {coded} are both set; keep one")
    if coded in doc:
        text = doc[coded]
        if not isinstance(text, str):
            raise BadExportLine(f"{coded} must be base64 text")
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise BadExportLine(f"{coded} is not valid base64") from None
    text = doc.get(name)
    if text is None:
        return None
    if not isinstance(text, str):
        raise BadExportLine(f"{name} must be text or null (put other JSON in it as text: jq's tojson)")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadExportLine(f"{name} is not valid Unicode") from None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
