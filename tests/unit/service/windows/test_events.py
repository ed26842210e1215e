"""parse_event is total, and agrees with an oracle written from its docstring and bounds."""

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.records.event_time import MAX_AHEAD_LIMIT_NS, MAX_EVENT_NS, BadTime, ahead_fault, event_time_ns, span_text
from service.records.limits import MAX_NAME_BYTES
from service.windows.events import (
    MAX_AMOUNT,
    BadEvent,
    Event,
    parse_event,
)
from tests.support.orders import (
    PROPERTY,
    NotJSON,
    assert_short_reason,
    check_total,
    json_text,
    render_object,
    strict_json,
    to_bytes,
    verdicts,
)
from topics.event_time import decode_event_time, encode_event_time

pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")

GOOD = b'{"shop_id": "shop-07", "drink": "latte", "amount": 4.5}'
T = 1_700_000_000 * 10**9  # a plausible event time


def event_with(shop: str = '"shop-07"', drink: str = '"latte"', amount: str = "4.5") -> bytes:
    return f'{{"shop_id": {shop}, "drink": {drink}, "amount": {amount}}}'.encode()


def reason_of(value: bytes | None, header: bytes | None = None, kafka_ts_ns: int = T) -> str:
    with pytest.raises(BadEvent) as exc:
        parse_event(value, header, kafka_ts_ns)
    assert_short_reason(str(exc.value))
    return str(exc.value)


def test_a_good_event_with_and_without_the_header() -> None:
    assert parse_event(GOOD, encode_event_time(T), T + 5) == Event("shop-07", "latte", 450, T, True)
    assert parse_event(GOOD, None, T) == Event("shop-07", "latte", 450, T, False)


def test_the_bounds() -> None:
    assert datetime(2100, 1, 1, tzinfo=UTC).timestamp() * 10**9 == MAX_EVENT_NS
    # Room under 2^63 for a window of a century added to the latest event time.
    assert MAX_EVENT_NS + 100 * 366 * 86_400 * 10**9 < 2**63
    assert MAX_AMOUNT == 1_000_000
    assert MAX_NAME_BYTES == 256


# --- the defects seen in production, one by one --------------------------------------

def test_event_time_header_beyond_the_bound() -> None:
    assert "event time 18446744073709551615 ns out of range" in reason_of(GOOD, bytes([255] * 8))
    assert "out of range" in reason_of(GOOD, encode_event_time(MAX_EVENT_NS + 1))
    assert "out of range" in reason_of(GOOD, encode_event_time(2**63))
    assert parse_event(GOOD, encode_event_time(MAX_EVENT_NS), MAX_EVENT_NS).event_ns == MAX_EVENT_NS
    assert parse_event(GOOD, encode_event_time(0), 0).event_ns == 0


def test_event_time_header_of_the_wrong_size_or_null() -> None:
    assert reason_of(GOOD, b"\x00" * 7) == "event-time header has 7 bytes; expected 8"
    assert reason_of(GOOD, b"") == "event-time header has 0 bytes; expected 8"
    assert reason_of(GOOD, b"\x00" * 9) == "event-time header has 9 bytes; expected 8"
    assert reason_of(GOOD, "12345678") == "event-time header is not bytes"  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="event-time header is null"):
        decode_event_time(None)
    with pytest.raises(BadTime, match="7 bytes"):
        event_time_ns(b"\x00" * 7, T, 0)
    assert event_time_ns(bytearray(encode_event_time(T)), T, 0) == (T, True)


def test_kafka_timestamp_fallback_beyond_the_bound() -> None:
    assert reason_of(GOOD, None, -1) == "Kafka timestamp -1 ns out of range 0..4102444800000000000"
    assert "out of range" in reason_of(GOOD, None, MAX_EVENT_NS + 1)
    assert "Kafka timestamp -huge ns" in reason_of(GOOD, None, -(10**5000))
    assert reason_of(GOOD, None, None) == "Kafka timestamp is not an integer"  # type: ignore[arg-type]
    assert reason_of(GOOD, None, True) == "Kafka timestamp is not an integer"
    assert parse_event(GOOD, None, 0).event_ns == 0
    assert parse_event(GOOD, None, MAX_EVENT_NS).event_ns == MAX_EVENT_NS


@pytest.mark.parametrize(("amount", "reason"), [
    ("1e300", "amount 1e+300 out of range -1000000..1000000"),
    ("-1e300", "amount -1e+300 out of range"),
    ("1000000.01", "amount 1000000.01 out of range"),
    ("1000001", "amount 1000001 out of range"),
    (str(2**64), "amount 18446744073709551616 out of range"),
    (str(-(2**64) - 5), "amount -1844674407370955... out of range"),
    ("9" * 300, "amount 99999999999999999... out of range"),
    ("9" * 350, "amount 99999999999999999... out of range"),  # an int beyond a double
    ("-" + "9" * 399, "amount -9999999999999999... out of range"),
    ("9" * 5000, "amount 99999999999999999... out of range"),
    ("-" + "9" * 5000, "amount -9999999999999999... out of range"),
    ("1e400", "amount is not a finite number"),
    ("NaN", "amount is not a finite number"),
    ("-Infinity", "amount is not a finite number"),
    ("true", "amount is missing or not a number"),
    ('"4.5"', "amount is missing or not a number"),
    ("null", "amount is missing or not a number"),
    ("[4.5]", "amount is missing or not a number"),
])
def test_amounts_the_state_cannot_hold(amount: str, reason: str) -> None:
    assert reason in reason_of(event_with(amount=amount))


@pytest.mark.parametrize(("amount", "cents"), [
    ("1000000", 100_000_000), ("-1000000", -100_000_000), ("1000000.0", 100_000_000), ("1e6", 100_000_000),
    ("-0", 0), ("-0.0", 0), ("4.5", 450), ("1e-400", 0), ("0.1", 10),
])
def test_amounts_within_the_bound(amount: str, cents: int) -> None:
    assert parse_event(event_with(amount=amount), None, T).amount_cents == cents


def test_names_the_state_cannot_hold() -> None:
    assert reason_of(event_with(shop='"' + "s" * 70_000 + '"')) == "shop_id is 70000 bytes, over the 256-byte limit"
    assert reason_of(event_with(drink='"' + "d" * 257 + '"')) == "drink is 257 bytes, over the 256-byte limit"
    assert reason_of(event_with(drink=json.dumps("\u00e9" * 129))) == "drink is 258 bytes, over the 256-byte limit"
    assert parse_event(event_with(drink=json.dumps("\u00e9" * 128)), None, T).drink == "\u00e9" * 128
    assert reason_of(event_with(shop='"\\ud800"')) == "shop_id is not valid Unicode"
    assert reason_of(event_with(drink='"x\\udfff"')) == "drink is not valid Unicode"
    assert reason_of(event_with(shop='""')) == "shop_id is missing or not a non-empty string"
    assert reason_of(event_with(drink="5")) == "drink is missing or not a non-empty string"


def test_the_name_limit_is_a_parameter() -> None:
    assert parse_event(GOOD, None, T, max_name_bytes=7).shop_id == "shop-07"
    with pytest.raises(BadEvent, match="shop_id is 7 bytes, over the 6-byte limit"):
        parse_event(GOOD, None, T, max_name_bytes=6)
    for bad_limit in (0, -5):
        with pytest.raises(ValueError, match="max_name_bytes"):
            parse_event(GOOD, None, T, max_name_bytes=bad_limit)


@pytest.mark.parametrize(("value", "reason"), [
    (None, "null value"),
    (b"", "empty value"),
    (b" ", "not JSON"),
    (bytes([255]) + b"{}", "invalid UTF-8"),
    (event_with(shop='"X"').replace(b"X", b"\xed\xa0\x80"), "invalid UTF-8"),
    (b"\xef\xbb\xbf" + GOOD, "not JSON"),
    (b"\x00" * 8, "not JSON"),
    (b"[" * 100_000, "not JSON"),
    (b'{"a":' * 50_000, "not JSON"),
    (b"[" * 1025 + b"]" * 1025, "not JSON"),
    (b"[" * 1000 + b"]" * 1000, "not a JSON object"),
    (b"1" * 100_000, "not a JSON object"),
    (b"[]", "not a JSON object"),
    (b"-0", "not a JSON object"),
    (b"1e999", "not a JSON object"),
    (b"{}", "shop_id is missing or not a non-empty string"),
    (GOOD[:-1] + b', "note": NaN}', "a number is not finite"),
    (GOOD[:-1] + b', "note": "\\udc00"}', "a string is not valid Unicode"),
    (GOOD[:-1] + b', "note": 1' + b"0" * 400 + b"}", "a number is out of range"),
    ("{}", "value is not bytes"),
])
def test_values_that_are_not_events(value: Any, reason: str) -> None:
    assert reason in reason_of(value, encode_event_time(T))


def test_duplicate_keys_keep_the_last_value() -> None:
    raw = b'{"shop_id": "a", "drink": "latte", "amount": "x", "amount": 1, "shop_id": "b"}'
    assert parse_event(raw, None, T) == Event("b", "latte", 100, T, False)
    assert reason_of(b'{"shop_id": "a", "drink": "latte", "amount": 1, "amount": true}') == \
        "amount is missing or not a number"
    # A lone surrogate spoils the text even in a value a repeated key drops.
    assert reason_of(b'{"shop_id": "\\ud800", "shop_id": "a", "drink": "latte", "amount": 1}') == "not JSON"


def test_a_bad_value_is_reported_before_a_bad_header() -> None:
    assert reason_of(b"{}", b"\x00") == "shop_id is missing or not a non-empty string"


# --- property-based, against an oracle from the docstring and the bounds ----------------

ORACLE_MAX_NS = int((datetime(2100, 1, 1, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds()) * 10**9


def oracle_event(value: bytes | None, header: bytes | None, kafka_ts_ns: int) -> tuple[Any, ...] | None:
    """(shop_id, drink, amount in cents, event time, has header), or None for a bad event."""
    if not value:
        return None
    try:
        doc = strict_json(value)
    except NotJSON:
        return None
    if not isinstance(doc, dict):
        return None
    shop, drink, amount = doc.get("shop_id"), doc.get("drink"), doc.get("amount")
    for name in (shop, drink):
        if not isinstance(name, str) or name == "" or len(name.encode("utf-8")) > 256:
            return None
    if isinstance(amount, bool) or not isinstance(amount, int | float) or abs(amount) > 1_000_000:
        return None  # strict_json has no NaN or infinity
    if header is None:
        ns = kafka_ts_ns
    elif len(header) == 8:
        ns = int.from_bytes(header, "big")
    else:
        return None
    if not 0 <= ns <= ORACLE_MAX_NS:
        return None
    if header is not None and not (isinstance(kafka_ts_ns, int) and not isinstance(kafka_ts_ns, bool)
                                   and 0 <= kafka_ts_ns <= ORACLE_MAX_NS and ns - kafka_ts_ns <= 60 * 10**9):
        return None  # a header's time more than a minute ahead of the record's timestamp, or no timestamp
    return shop, drink, round(amount * 100), ns, header is not None


def check_event(value: bytes | None, header: bytes | None, kafka_ts_ns: int) -> None:
    got = check_total(lambda: parse_event(value, header, kafka_ts_ns), BadEvent)
    fields = None if got is None else tuple(vars(got).values())
    assert fields == oracle_event(value, header, kafka_ts_ns), (value[:300] if value else value, header, kafka_ts_ns)


in_range_ns = st.integers(0, MAX_EVENT_NS)
edge_ns = st.sampled_from([0, 1, MAX_EVENT_NS, MAX_EVENT_NS + 1, 2**63 - 1, 2**63, 2**64 - 1])
headers = st.one_of(
    st.none(),
    st.one_of(in_range_ns, edge_ns).map(lambda ns: ns.to_bytes(8, "big")),
    st.binary(max_size=10),
)
kafka_timestamps = st.one_of(in_range_ns, edge_ns, st.sampled_from([-1, -(2**63)]), st.integers())
BOUND = 60 * 10**9  # the default --max-event-time-ahead


@st.composite
def stamps(draw: st.DrawFn) -> tuple[bytes | None, int]:
    """An event-time header (or none) and a Kafka timestamp: unrelated, or near each other
    (the header's time up to two hours behind the timestamp, or a little ahead, around the bound)."""
    header = draw(headers)
    if header is None or len(header) != 8 or draw(st.booleans()):
        return header, draw(kafka_timestamps)
    ahead = draw(st.one_of(st.integers(-2 * 3600 * 10**9, 2 * BOUND),
                           st.sampled_from([BOUND - 1, BOUND, BOUND + 1, 0, -1, 1])))
    return header, int.from_bytes(header, "big") - ahead

good_name = st.one_of(
    st.sampled_from(["shop-07", "latte", "caf\u00e9", "x" * MAX_NAME_BYTES, "\u00e9" * 128]),
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=12),
)
good_amount = st.one_of(
    st.floats(-MAX_AMOUNT, MAX_AMOUNT).map(repr),
    st.integers(-MAX_AMOUNT, MAX_AMOUNT).map(str),
    st.sampled_from(["4.5", "0", "-0", "-0.0", "1e6", "-1000000", "1000000.0", "0.005", "1E2", "1e-400"]),
)
BAD_AMOUNTS = ["1000000.0000001", "1000001", "-1000001", "1e300", "1e400", "NaN", "Infinity", "true", '"4.5"', "null",
               str(2**64), "9" * 5000]
MUTATIONS = ["shop_id", "drink", "amount", "drop", "repeat", "extra", "name limit", "amount range", "whole"]


@st.composite
def near_valid_events(draw: st.DrawFn) -> bytes:
    mutation = draw(st.one_of(st.just("none"), st.sampled_from(MUTATIONS)))
    fields = {"shop_id": json.dumps(draw(good_name), ensure_ascii=draw(st.booleans())),
              "drink": json.dumps(draw(good_name), ensure_ascii=draw(st.booleans())),
              "amount": draw(good_amount)}
    field = draw(st.sampled_from(sorted(fields)))
    if mutation in fields:
        fields[mutation] = draw(json_text)
    elif mutation == "drop":
        del fields[field]
    elif mutation == "name limit":
        fields[draw(st.sampled_from(["shop_id", "drink"]))] = json.dumps(
            draw(st.sampled_from(["x" * 257, "\u00e9" * 129, "\u2615" * 86, "", "s" * 70_000])))
    elif mutation == "amount range":
        fields["amount"] = draw(st.sampled_from(BAD_AMOUNTS))
    elif mutation == "whole":
        return to_bytes(draw(json_text))
    pairs = list(fields.items())
    if mutation == "repeat":  # a key written twice: the last one counts
        pairs.insert(draw(st.integers(0, len(pairs))), (field, draw(json_text)))
    elif mutation == "extra":
        pairs.insert(draw(st.integers(0, len(pairs))), ("note", draw(json_text)))
    return to_bytes(render_object(draw, pairs))


@PROPERTY
@given(st.binary(max_size=300), stamps())
def test_any_bytes(value: bytes, stamp: tuple[bytes | None, int]) -> None:
    check_event(value, *stamp)


@PROPERTY
@given(st.sampled_from([b"", b"{", b'{"shop_id": "s", "drink": "d", "amount": ', GOOD]), st.binary(max_size=100))
def test_any_bytes_after_a_json_prefix(prefix: bytes, tail: bytes) -> None:
    check_event(prefix + tail, None, T)


@PROPERTY
@given(json_text.map(to_bytes), stamps())
def test_any_json_document_agrees_with_the_oracle(value: bytes, stamp: tuple[bytes | None, int]) -> None:
    check_event(value, *stamp)


@settings(PROPERTY, max_examples=600)
@given(near_valid_events(), stamps())
def test_near_valid_events_agree_with_the_oracle(value: bytes, stamp: tuple[bytes | None, int]) -> None:
    check_event(value, *stamp)


def test_the_generators_make_good_and_bad_events() -> None:
    good = verdicts(st.tuples(near_valid_events(), stamps()), lambda ex: oracle_event(ex[0], *ex[1]) is not None)
    assert len(good) >= 200
    assert 0.2 <= sum(good) / len(good) <= 0.8, sum(good) / len(good)


def test_json_whitespace_is_skipped() -> None:
    assert parse_event(b'\r\n {"shop_id"\t:\n"s" ,"drink":"d",\r"amount" : 1 }\n', None, T).amount_cents == 100


# --- event times ahead of their record's Kafka timestamp ---------------------------------

YEAR = 365 * 86_400 * 10**9
HOUR = 3600 * 10**9


def test_an_event_time_far_ahead_of_its_record_is_a_bad_record() -> None:
    assert reason_of(GOOD, encode_event_time(T + YEAR), T) == \
        "event time 365d0h ahead of the record's Kafka timestamp, over the 1m limit"
    assert reason_of(GOOD, encode_event_time(T + HOUR), T) == \
        "event time 1h0m ahead of the record's Kafka timestamp, over the 1m limit"
    assert reason_of(GOOD, encode_event_time(T + BOUND + 1), T) == \
        "event time 1m ahead of the record's Kafka timestamp, over the 1m limit"
    assert parse_event(GOOD, encode_event_time(T + BOUND), T).event_ns == T + BOUND  # the bound itself is fine
    # 2^63 - 1 and 2^63 ns are beyond what the state holds: refused for their range first.
    assert "event time 9223372036854775807 ns out of range" in reason_of(GOOD, encode_event_time(2**63 - 1), T)
    assert "event time 9223372036854775808 ns out of range" in reason_of(GOOD, encode_event_time(2**63), T)


def test_an_event_time_behind_its_record_is_late_not_bad() -> None:
    # An offline till flushing its orders: however old, the watermark decides, not the parser.
    for behind in (1, HOUR, 3 * HOUR, YEAR, T):
        assert parse_event(GOOD, encode_event_time(T - behind), T).event_ns == T - behind


def test_the_bound_needs_a_kafka_timestamp() -> None:
    assert reason_of(GOOD, encode_event_time(T), -1) == "Kafka timestamp -1 ns out of range 0..4102444800000000000"
    assert reason_of(GOOD, encode_event_time(T), None) == "Kafka timestamp is not an integer"  # type: ignore[arg-type]
    assert reason_of(GOOD, encode_event_time(0), MAX_EVENT_NS + 1).startswith("Kafka timestamp")


def test_the_bound_is_a_parameter() -> None:
    assert parse_event(GOOD, encode_event_time(T + HOUR), T, max_ahead_ns=HOUR).event_ns == T + HOUR
    with pytest.raises(BadEvent, match="over the 59m limit"):
        parse_event(GOOD, encode_event_time(T + HOUR), T, max_ahead_ns=HOUR - 60 * 10**9)
    assert parse_event(GOOD, encode_event_time(T), T, max_ahead_ns=0).event_ns == T
    for bad_bound in (-1, MAX_AHEAD_LIMIT_NS + 1):
        with pytest.raises(ValueError, match="max_ahead_ns"):
            parse_event(GOOD, encode_event_time(T), T, max_ahead_ns=bad_bound)


def oracle_ahead(event_ns: object, kafka_ts_ns: object, bound: int) -> bool:
    """Bad, by the rule as written in the README: no usable timestamp, or the event more than
    the bound after it."""
    ints = all(isinstance(x, int) and not isinstance(x, bool) for x in (event_ns, kafka_ts_ns))
    return not ints or not 0 <= kafka_ts_ns <= ORACLE_MAX_NS or event_ns > kafka_ts_ns + bound  # type: ignore


any_time = st.one_of(st.integers(), edge_ns, in_range_ns, st.integers(-(2**70), 2**70),
                     st.sampled_from([None, True, 1.5, "1", b"\x00" * 8]))


@PROPERTY
@given(any_time, any_time, st.one_of(st.integers(0, MAX_AHEAD_LIMIT_NS), st.sampled_from([0, BOUND, HOUR])))
def test_the_bound_is_total_and_agrees_with_its_oracle(event_ns: object, kafka_ts_ns: object, bound: int) -> None:
    fault = ahead_fault(event_ns, kafka_ts_ns, bound)
    assert (fault is not None) == oracle_ahead(event_ns, kafka_ts_ns, bound), (event_ns, kafka_ts_ns, bound)
    if fault is not None:
        assert_short_reason(fault)


@PROPERTY
@given(in_range_ns, st.integers(-(2**63), 2**64), st.integers(0, MAX_AHEAD_LIMIT_NS))
def test_the_bound_near_its_edge(event_ns: int, offset: int, bound: int) -> None:
    kafka_ts_ns = event_ns - bound + offset % 3 - 1  # the event bound-1, bound or bound+1 ahead
    assert (ahead_fault(event_ns, kafka_ts_ns, bound) is not None) == oracle_ahead(event_ns, kafka_ts_ns, bound)


@PROPERTY
@given(st.one_of(st.integers(0, 2**64), st.integers(0, 10**30)))
def test_spans_read_in_one_short_line(ns: int) -> None:
    text = span_text(ns)
    assert text and len(text) <= 20 and text.isascii() and " " not in text.replace("over 3000 years", "x"), text
