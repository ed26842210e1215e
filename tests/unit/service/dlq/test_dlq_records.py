"""The DLQ tools' parsers (pure): DLQ headers, export lines both ways, --since, the summary,
and seed-orders reading an export file. Property tests for each parser."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.dlq.read import DlqRecord, NotDlq, Selection, decode_dlq, parse_since
from service.dlq.records import source_headers
from service.dlq.show import summarize, summary_json, summary_text
from topics.dlq_lines import SOURCE_HEADER, BadExportLine, ExportLine, decode_line, encode_line
from topics.errors import BrewError
from topics.feed import file_records
from topics.records import fit_record

_TOPIC = st.from_regex(r"[a-z][a-z0-9._-]{0,30}", fullmatch=True)
_BYTES = st.none() | st.binary(max_size=300)
_HEADER_NAMES = st.sampled_from(["error", "source-topic", "source-partition", "source-offset", "truncated",
                                 "original-size", "original-key-size", "value-unavailable", "other"])


@given(st.lists(st.tuples(_HEADER_NAMES | st.text(max_size=10), st.none() | st.binary(max_size=30) |
                          st.text(max_size=30)), max_size=10), _BYTES, _BYTES)
def test_any_headers_decode_to_a_record_or_a_reason(headers: list[tuple[str, bytes | str | None]],
                                                    key: bytes | None, value: bytes | None) -> None:
    decoded = decode_dlq(2, 7, 1000, key, value, headers)
    if isinstance(decoded, NotDlq):
        assert decoded.problem and (decoded.dlq_partition, decoded.dlq_offset) == (2, 7)
    else:
        assert decoded.source_partition >= 0 and decoded.source_offset >= 0 and decoded.source_topic


@given(_BYTES, _BYTES, st.text(min_size=1, max_size=80), _TOPIC, st.integers(0, 10_000), st.integers(0, 2**62),
       st.integers(1500, 3000))
def test_what_the_sink_writes_decodes_to_what_it_means(key: bytes | None, value: bytes | None, reason: str,
                                                       topic: str, partition: int, offset: int, limit: int) -> None:
    headers = source_headers(reason, topic, partition, offset)
    kept_key, kept_value, fitted = fit_record(key, value, headers, limit)
    record = decode_dlq(0, 1, 1000, kept_key, kept_value, fitted)
    assert isinstance(record, DlqRecord)
    assert (record.reason, record.source_topic, record.position) == (reason, topic, (partition, offset))
    assert record.source == f"{topic}:{partition}:{offset}"
    assert record.whole == (kept_key == key and kept_value == value)
    if not record.whole:
        assert record.original_size == len(value or b"")
        assert (value or b"").startswith(kept_value or b"") and (key or b"").startswith(kept_key or b"")


def test_foreign_records_are_named_not_decoded() -> None:
    assert decode_dlq(0, 3, 0, None, b"x", []) == NotDlq(0, 3, "no error or source-topic or source-partition or "
                                                              "source-offset header")
    headers = source_headers("r", "t", 1, 2)
    assert isinstance(decode_dlq(0, 3, 0, None, b"x", [*headers[:3], ("source-offset", b"-5")]), NotDlq)
    gone = decode_dlq(0, 3, 0, None, None, [*headers, ("value-unavailable", b"the record is no longer there")])
    assert isinstance(gone, DlqRecord) and gone.unavailable and not gone.whole


@given(_TOPIC, st.integers(0, 1000), st.integers(0, 2**62), st.text(max_size=60), _BYTES, _BYTES, st.booleans())
def test_export_lines_read_back_byte_for_byte(topic: str, partition: int, offset: int, reason: str,
                                              key: bytes | None, value: bytes | None, truncated: bool) -> None:
    line = ExportLine(topic, partition, offset, reason, key, value, truncated, 0, 5, "2026-11-23T10:00:00.000Z")
    encoded = encode_line(line)
    assert b"\n" not in encoded
    back = decode_line(encoded)
    assert back is not None
    assert (back.source, back.key, back.value, back.truncated) == (line.source, key, value, truncated)


@given(st.binary(max_size=200))
def test_any_line_is_an_order_an_export_line_or_refused(raw: bytes) -> None:
    try:
        decoded = decode_line(raw)
    except BadExportLine as exc:
        assert "\n" not in str(exc)
    else:
        assert decoded is None or decoded.source_offset >= 0


def test_orders_are_not_export_lines_and_broken_export_lines_say_why() -> None:
    assert decode_line(b'{"order_id": "o-1", "shop_id": "shop-07", "items": []}') is None
    assert decode_line(b'{"source_offset": 1}') is None  # not all three markers: an order like any other
    base = {"source_topic": "brew.orders.v1", "source_partition": 0, "source_offset": 4, "reason": "r"}
    for extra, why in [({"value": "a", "value_base64": "YQ=="}, "both set"),
                       ({"value_base64": "%%%"}, "not valid base64"),
                       ({"value": {"order_id": 1}}, "must be text or null"),
                       ({"truncated": "no"}, "true or false"),
                       ({"source_partition": -1}, "whole numbers")]:
        with pytest.raises(BadExportLine, match=why):
            decode_line(json.dumps({**base, **extra}).encode())


_INSTANTS = st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC))


@given(st.integers(0, 10**6), _INSTANTS)
def test_since_reads_durations_back_from_now_and_zoned_times(seconds: int, moment: datetime) -> None:
    now = 1_763_892_000.0
    assert parse_since(f"{seconds}s", now) == int((now - seconds) * 1000)
    assert parse_since(moment.isoformat(), now) == int(moment.timestamp() * 1000)
    assert parse_since(moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), now) == int(moment.timestamp() * 1000)


@given(st.text(max_size=30))
def test_since_is_a_time_or_a_one_line_refusal(text: str) -> None:
    try:
        parse_since(text, 1_763_892_000.0)
    except ValueError as exc:
        assert "\n" not in str(exc) and "2026-11-23T10:00:00Z" in str(exc)


def test_since_refuses_a_time_without_its_zone() -> None:
    with pytest.raises(ValueError, match="neither a duration"):
        parse_since("2026-11-23T10:00:00", 0)
    assert parse_since("2h", 7200.5) == 500


def _record(offset: int, reason: str, stamp: int = 1_763_892_000_000) -> DlqRecord:
    return DlqRecord(0, offset, stamp, reason, "orders", 1, 100 + offset, b"shop-1", b'{"order_id": "o"}')


def test_the_summary_groups_reasons_without_their_numbers() -> None:
    records: list[DlqRecord | NotDlq] = [
        _record(0, "item 0: drink is 300 bytes, over the 256-byte limit"),
        _record(1, "item 2: drink is 280 bytes, over the 256-byte limit", 1_763_892_060_000),
        _record(2, "not JSON"), NotDlq(1, 9, "no error header")]
    summary = summarize("dlq", records, replayed={"orders:1:101"}, samples=1)
    doc = summary_json(summary)
    assert doc["total"] == 4
    assert [(g["reason"], g["count"], g["replayed"], len(g["samples"])) for g in doc["reasons"]] == [
        ("drink is N bytes, over the N-byte limit", 2, 1, 1), ("not JSON", 1, 0, 1)]
    assert doc["reasons"][0]["first"] == "2025-11-23T10:00:00Z" and doc["reasons"][0]["last"] == "2025-11-23T10:01:00Z"
    text = summary_text(summary)
    assert text.splitlines()[0] == "dlq: 4 records, 2 reasons"
    assert "orders:1:100  item 0: drink is 300 bytes, over the 256-byte limit" in text
    assert "not written by brewstream" in text
    assert Selection(reason="OVER THE").wants(records[0]) and not Selection(reason="x").wants(records[3])


def test_seed_orders_feeds_export_lines_as_their_records_and_refuses_partial_ones(tmp_path: Path) -> None:
    order = b'{"order_id": "o-1", "shop_id": "shop-07", "items": [{"drink": "latte", "quantity": 1}]}'
    line = encode_line(ExportLine("p.brew.orders.v1", 2, 40, "r", b"shop-07", b"\xffraw"))
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(order + b"\n" + line + b"\nnot json")
    assert list(file_records(path)) == [(b"shop-07", order), (b"shop-07", b"\xffraw", [(SOURCE_HEADER,
                                                                                        b"p.brew.orders.v1:2:40")]),
                                        (None, b"not json")]
    partial = encode_line(ExportLine("brew.orders.v1", 2, 41, "r", b"k", b"cut", truncated=True))
    events = encode_line(ExportLine("brew.order-events.v1", 0, 1, "r", b"k", b"{}"))
    for bad, why in [(partial, "only part of the record"), (events, "dlq replay")]:
        path.write_bytes(order + b"\n" + bad + b"\n")
        with pytest.raises(BrewError, match=f"line 2 of {path}.*{why}"):
            list(file_records(path))
