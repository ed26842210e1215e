"""A menu record's parser: total over any bytes, and agreeing with a plain oracle."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.revenue.menu import MAX_PRICE_CENTS, BadMenu, MenuUpdate, parse_menu
from topics.event_time import encode_event_time

NOW = 1_790_000_000 * 10**9
AHEAD = 60 * 10**9


def parse(key: object, value: object, header: object = None, ts: object = NOW) -> MenuUpdate:
    return parse_menu(key, value, header, ts, currency="EUR", max_ahead_ns=AHEAD)


def record(drink: str = "latte", price: object = 420, currency: object = "EUR") -> bytes:
    return json.dumps({"drink": drink, "price_cents": price, "currency": currency}).encode()


def test_a_price_from_its_header_or_its_timestamp() -> None:
    assert parse(b"latte", record()) == MenuUpdate("latte", NOW, 420)
    assert parse(b"latte", record(), encode_event_time(NOW - 5)) == MenuUpdate("latte", NOW - 5, 420)


@pytest.mark.parametrize("value", [b"", None])
def test_an_empty_value_withdraws_the_drink(value: bytes | None) -> None:
    assert parse(b"mocha", value) == MenuUpdate("mocha", NOW, None)


@pytest.mark.parametrize(("key", "value", "header", "reason"), [
    (b"latte", record(price=0), None, "price_cents 0 out of range"),
    (b"latte", record(price=-5), None, "out of range"),
    (b"latte", record(price=4.2), None, "price_cents is not an integer"),
    (b"latte", record(price=True), None, "price_cents is not an integer"),
    (b"latte", record(price="420"), None, "price_cents is not an integer"),
    (b"latte", record(price=MAX_PRICE_CENTS + 1), None, "out of range"),
    (b"latte", b'{"drink":"latte","price_cents":123456789012345678901234567890,"currency":"EUR"}', None,
     "out of range"),
    (b"latte", record(currency="USD"), None, "currency 'USD'; this pipeline sums EUR"),
    (b"latte", record(drink="mocha"), None, "drink differs from the record's key"),
    (b"latte", b"{", None, ".+"),
    (None, record(), None, "no key"),
    (b"\xff", record(), None, "key is not UTF-8"),
    (b"latte", record(), encode_event_time(NOW + 365 * 86_400 * 10**9), "ahead of the record's Kafka timestamp"),
    (b"latte", record(), b"\x00" * 3, "3 bytes"),
])
def test_what_is_refused_and_why(key: object, value: object, header: object, reason: str) -> None:
    with pytest.raises(BadMenu, match=reason):
        parse(key, value, header)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.none(), st.binary(max_size=40), st.text(max_size=10).map(str.encode)),
       st.one_of(st.none(), st.binary(max_size=80), st.builds(record, st.text(max_size=8),
                                                             st.one_of(st.integers(), st.floats(), st.text()),
                                                             st.sampled_from(["EUR", "USD", None]))),
       st.one_of(st.none(), st.binary(max_size=9)), st.one_of(st.none(), st.integers(-2**70, 2**70)))
def test_total_and_agrees_with_an_oracle(key: object, value: object, header: object, ts: object) -> None:
    try:
        got = parse(key, value, header, ts)
    except BadMenu:
        return
    # Whatever it accepts is what a plain reading says.
    assert isinstance(key, bytes) and key.decode("utf-8") == got.drink
    if not value:
        assert got.price_cents is None
    else:
        doc = json.loads(value)
        assert doc["drink"] == got.drink and doc["currency"] == "EUR"
        assert type(doc["price_cents"]) is int and 1 <= doc["price_cents"] <= MAX_PRICE_CENTS
        assert doc["price_cents"] == got.price_cents
    expected_t = int.from_bytes(header, "big") if header is not None else ts
    assert got.valid_from_ns == expected_t
