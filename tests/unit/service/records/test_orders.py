import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.records.limits import MAX_NAME_BYTES
from service.records.orders import BadOrder, count_drinks, count_plain
from tests.support.corpus import BAD_ORDERS, GOOD_EDGE_ORDERS
from tests.support.orders import (
    JSON_PREFIXES,
    PLAIN_EDGES,
    PROPERTY,
    assert_short_reason,
    check_count_plain,
    check_order,
    check_task_path,
    json_text,
    near_valid_orders,
    oracle_counts,
    reason_of,
    to_bytes,
    verdicts,
)
from topics.orders_gen import OrderGenerator

# Integers of thousands of digits are generated on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")


@pytest.mark.parametrize(("name", "raw", "reason"), BAD_ORDERS, ids=[b[0] for b in BAD_ORDERS])
def test_bad_orders_are_rejected_with_their_reason(name: str, raw: bytes | None, reason: str) -> None:
    with pytest.raises(BadOrder) as exc:
        count_drinks(raw)
    assert reason in str(exc.value)


def test_corpus_covers_at_least_fifteen_kinds() -> None:
    assert len({reason for _, _, reason in BAD_ORDERS}) >= 15


@pytest.mark.parametrize(("raw", "expected"), GOOD_EDGE_ORDERS)
def test_good_edge_orders(raw: bytes, expected: dict[str, int]) -> None:
    assert count_drinks(raw) == expected


@pytest.mark.parametrize(("raw", "expected"), [*((raw, None) for _, raw, _ in BAD_ORDERS), *GOOD_EDGE_ORDERS],
                         ids=[*(b[0] for b in BAD_ORDERS), *(f"good-{i}" for i in range(len(GOOD_EDGE_ORDERS)))])
def test_a_task_counts_the_corpus_like_count_drinks(raw: bytes | None, expected: dict[str, int] | None) -> None:
    """Every kind of bad order reaches the DLQ from a Spark task with count_drinks' reason,
    and every good edge order counts the same, whichever path the task takes."""
    check_task_path(raw, expected)


def test_seed_shaped_order() -> None:
    raw = b'{"order_id": "o-1", "shop_id": "shop-07", "items": [{"drink": "latte", "quantity": 2}]}'
    assert count_drinks(raw) == {"latte": 2}


# --- the defects seen in production, one by one --------------------------------------

def order_with(items: str) -> bytes:
    return f'{{"order_id": "o", "shop_id": "s", "items": {items}}}'.encode()


def one_item(drink: str = '"latte"', quantity: str = "1") -> bytes:
    return order_with(f'[{{"drink": {drink}, "quantity": {quantity}}}]')


DEFECTS: list[tuple[str, bytes | None, str]] = [
    ("items 5", b'{"order_id":"b","shop_id":"s","items":5}', "items is not a list"),
    ("items true", order_with("true"), "items is not a list"),
    ("items an object", order_with('{"drink": "x"}'), "items is not a list"),
    ("item a list", order_with("[[1]]"), "item 0 is not an object"),
    ("drink an object", one_item(drink='{"a": 1}'), "item 0: drink is not a string"),
    ("quantity 1e400", one_item(quantity="1e400"), "item 0: quantity is not an integer"),
    ("quantity -1e400", one_item(quantity="-1e400"), "item 0: quantity is not an integer"),
    ("quantity NaN", one_item(quantity="NaN"), "item 0: quantity is not an integer"),
    ("quantity -Infinity", one_item(quantity="-Infinity"), "item 0: quantity is not an integer"),
    ("quantity of 5000 digits", one_item(quantity="7" * 5000), "item 0: quantity 77777777777777777... out of range"),
    ("quantity of -5000 digits", one_item(quantity="-" + "7" * 5000), "out of range"),
    ("quantity 2^64", one_item(quantity=str(2**64)), "item 0: quantity 18446744073709551616 out of range"),
    ("quantity of 300 digits", one_item(quantity="9" * 300), "item 0: quantity 99999999999999999... out of range"),
    ("quantity of 350 digits", one_item(quantity="9" * 350), "item 0: quantity 99999999999999999... out of range"),
    ("order_id a list", b'{"order_id": ["a"], "shop_id": "s", "items": [{"drink": "x", "quantity": 1}]}',
     "order_id is not a string"),
    ("shop_id an object", b'{"order_id": "o", "shop_id": {}, "items": [{"drink": "x", "quantity": 1}]}',
     "shop_id is not a string"),
    ("lone surrogate drink", one_item(drink='"a\\ud800"'), "item 0: drink is not valid Unicode"),
    ("lone surrogate order_id", b'{"order_id": "\\udfff", "shop_id": "s", "items": [{"drink": "x", "quantity": 1}]}',
     "order_id is not valid Unicode"),
    ("lone surrogate elsewhere", order_with('[{"drink": "x", "quantity": 1, "\\ud800": 1}]'),
     "a string is not valid Unicode"),
    ("surrogate encoded in UTF-8", one_item(drink='"X"').replace(b"X", b"\xed\xa0\x80"), "invalid UTF-8"),
    ("duplicate items key, last bad", order_with('[{"drink": "x", "quantity": 1}], "items": 5'), "items is not a list"),
    ("duplicate quantity key, last bad", order_with('[{"drink": "x", "quantity": 1, "quantity": 0}]'),
     "item 0: quantity 0 out of range"),
    ("open brackets", b"[" * 100_000, "not JSON"),
    ("open objects", b'{"a":' * 50_000, "not JSON"),
    ("closed brackets beyond 1024 levels", b"[" * 1025 + b"]" * 1025, "not JSON"),
    ("byte order mark", b"\xef\xbb\xbf{}", "not JSON"),
    ("NUL bytes", b"\x00{}\x00", "not JSON"),
    ("100000 ones", b"1" * 100_000, "not a JSON object"),
    ("a drink of 200000 characters", one_item(drink='"' + "d" * 200_000 + '"'),
     "item 0: drink is 200000 bytes, over the 256-byte limit"),
    ("the third drink 100 KB", order_with(
        '[{"drink": "a", "quantity": 1}, {"drink": "b", "quantity": 1}, {"drink": "c", "quantity": 1}, '
        '{"drink": "' + "x" * 102_400 + '", "quantity": 1}]'),
     "item 3: drink is 102400 bytes, over the 256-byte limit"),
    ("None", None, "null value"),
    ("empty", b"", "empty value"),
    ("a space", b" ", "not JSON"),
    ("{}", b"{}", "missing order_id"),
    ("[]", b"[]", "not a JSON object"),
    ("null", b"null", "not a JSON object"),
    ("true", b"true", "not a JSON object"),
    ("-0", b"-0", "not a JSON object"),
    ("1e999", b"1e999", "not a JSON object"),
    ("NaN elsewhere", order_with('[{"drink": "x", "quantity": 1}], "n": Infinity'), "a number is not finite"),
    ("1e400 elsewhere", order_with('[{"drink": "x", "quantity": 1}], "n": 1e400'), "a number is not finite"),
    ("a 400-digit int elsewhere", order_with('[{"drink": "x", "quantity": 1}], "n": ' + "9" * 400),
     "a number is out of range"),
    ("a 5000-digit int elsewhere", order_with('[{"drink": "x", "quantity": 1}], "n": ' + "9" * 5000),
     "a number is out of range"),
]


@pytest.mark.parametrize(("name", "raw", "reason"), DEFECTS, ids=[d[0] for d in DEFECTS])
def test_defects_are_bad_orders_with_a_short_reason(name: str, raw: bytes | None, reason: str) -> None:
    with pytest.raises(BadOrder) as exc:
        count_drinks(raw)
    assert reason in str(exc.value)
    assert_short_reason(str(exc.value))


def test_a_value_that_is_not_bytes_is_a_bad_order() -> None:
    with pytest.raises(BadOrder, match="not bytes"):
        count_drinks("{}")  # type: ignore[arg-type]
    assert count_drinks(bytearray(one_item())) == {"latte": 1}  # type: ignore[arg-type]
    assert count_drinks(memoryview(one_item())) == {"latte": 1}  # type: ignore[arg-type]


def test_duplicate_keys_keep_the_last_value_in_both_parsers() -> None:
    raw = b'{"a": 1, "a": 2, "b": {"c": 1, "c": [3]}}'
    assert orjson.loads(raw) == json.loads(raw) == {"a": 2, "b": {"c": [3]}}
    assert count_drinks(order_with('5, "items": [{"drink": "x", "quantity": 1}]')) == {"x": 1}
    assert count_drinks(order_with('[{"drink": "x", "quantity": 1, "drink": "y", "quantity": 2}]')) == {"y": 2}
    # A lone surrogate makes the text bad even in a value the parser drops; the reason (from
    # the stdlib fallback) comes from the values kept.
    raw = order_with('[{"drink": "\\ud800", "drink": "x", "quantity": 1.5}]')
    assert reason_of(raw) == "item 0: quantity is not an integer"
    assert reason_of(order_with('[{"drink": "\\ud800", "drink": "x", "quantity": 1}]')) == "not JSON"


def test_drink_names_are_bounded_in_utf8_bytes() -> None:
    assert count_drinks(one_item(drink=json.dumps("x" * MAX_NAME_BYTES))) == {"x" * MAX_NAME_BYTES: 1}
    assert count_drinks(one_item(drink=json.dumps("\u00e9" * 128, ensure_ascii=False))) == {"\u00e9" * 128: 1}
    assert "item 0: drink is 258 bytes, over the 256-byte limit" in reason_of(
        one_item(drink=json.dumps("\u00e9" * 129, ensure_ascii=False)))
    assert "drink is 257 bytes" in reason_of(one_item(drink=json.dumps("x" * 257)))
    # Escapes count as what they stand for: six characters of JSON, two bytes of UTF-8.
    assert count_drinks(one_item(drink=json.dumps("\u00e9" * 128))) == {"\u00e9" * 128: 1}


def test_the_name_limit_is_a_parameter() -> None:
    raw = one_item(drink='"latte"')
    assert count_drinks(raw, max_name_bytes=5) == {"latte": 1}
    with pytest.raises(BadOrder, match="item 0: drink is 5 bytes, over the 4-byte limit"):
        count_drinks(raw, max_name_bytes=4)
    for bad_limit in (0, -1):
        with pytest.raises(ValueError, match="max_name_bytes"):
            count_drinks(raw, max_name_bytes=bad_limit)


def test_one_bad_item_makes_the_whole_order_bad() -> None:
    raw = order_with('[{"drink": "latte", "quantity": 1}, {"drink": "mocha", "quantity": 1.0}]')
    assert reason_of(raw) == "item 1: quantity is not an integer"


# --- property-based: JSON written as raw text, reaching what no serializer writes -------






















# --- the oracle: DESIGN.md's order format, judged without the code under test -----------















@PROPERTY
@given(st.binary(max_size=300))
def test_any_bytes(raw: bytes) -> None:
    check_order(raw)


@PROPERTY
@given(st.sampled_from(JSON_PREFIXES), st.binary(max_size=100))
def test_any_bytes_after_a_json_prefix(prefix: bytes, tail: bytes) -> None:
    check_order(prefix + tail)


@PROPERTY
@given(json_text.map(to_bytes))
def test_any_json_document_agrees_with_the_oracle(raw: bytes) -> None:
    check_order(raw)


@settings(PROPERTY, max_examples=600)
@given(near_valid_orders())
def test_near_valid_orders_agree_with_the_oracle(raw: bytes) -> None:
    check_order(raw)




def test_the_near_valid_generator_makes_good_and_bad_orders() -> None:
    good = verdicts(near_valid_orders(), lambda raw: oracle_counts(raw) is not None)
    assert len(good) >= 200
    assert 0.25 <= sum(good) / len(good) <= 0.75, sum(good) / len(good)


def test_the_oracle_reads_the_corpus_like_the_parser() -> None:
    for _, raw, _ in BAD_ORDERS:
        assert oracle_counts(raw) is None
    for raw, expected in GOOD_EDGE_ORDERS:
        if b"[" * 900 not in raw:  # deeper than the oracle's stdlib parser goes
            assert oracle_counts(raw) == expected


# --- the shorter path of a Spark task (count_plain) ------------------------------------





@settings(PROPERTY, max_examples=600)
@given(near_valid_orders())
def test_the_plain_order_check_never_passes_a_bad_order(raw: bytes) -> None:
    check_count_plain(raw)


@PROPERTY
@given(json_text.map(to_bytes))
def test_the_plain_order_check_on_any_json(raw: bytes) -> None:
    check_count_plain(raw)


@PROPERTY
@given(st.sampled_from(JSON_PREFIXES) | st.just(b""), st.binary(max_size=100))
def test_the_plain_order_check_on_any_bytes(prefix: bytes, tail: bytes) -> None:
    check_count_plain(prefix + tail)


@PROPERTY
@given(near_valid_orders(), st.integers(1, 12))
def test_the_plain_order_check_keeps_a_smaller_name_limit(raw: bytes, limit: int) -> None:
    """The limit is in UTF-8 bytes: a name of fewer characters but more bytes is refused."""
    check_count_plain(raw, limit)




@pytest.mark.parametrize("raw", PLAIN_EDGES)
def test_the_plain_order_check_at_the_edges(raw: bytes) -> None:
    check_count_plain(raw)
    check_order(raw)


def test_the_plain_order_check_takes_only_what_it_can_prove() -> None:
    """An order with a field of its own, or a \\u escape, takes count_drinks, which counts it."""
    extra = b'{"order_id":"a","shop_id":"s","note":"hi","items":[{"drink":"x","quantity":1}]}'
    escaped = b'{"order_id":"a","shop_id":"s","items":[{"drink":"\\u0078","quantity":1}]}'
    for raw in (extra, escaped):
        assert count_plain([raw], MAX_NAME_BYTES, {}) == (0, [0])
        assert count_drinks(raw) == {"x": 1}
    totals: dict[str, int] = {}
    assert count_plain([PLAIN_EDGES[1]], MAX_NAME_BYTES, totals) == (1, []) and totals == {"y": 2}  # the last "items"


@PROPERTY
@given(st.lists(near_valid_orders() | st.binary(max_size=40) | st.none(), max_size=8),
       st.dictionaries(st.sampled_from(["latte", "x"]), st.integers(1, 5), max_size=2))
def test_the_plain_orders_of_a_task_and_the_rest_count_like_the_oracle(values: list[bytes | None],
                                                                        before: dict[str, int]) -> None:
    """Over a task's values: what count_plain adds to the running totals, plus what
    count_drinks makes of the values it leaves, is the oracle's count of the good ones."""
    totals = dict(before)
    counted, rest = count_plain(values, MAX_NAME_BYTES, totals)
    assert rest == sorted(set(rest)) and counted + len(rest) == len(values)
    for i in rest:
        raw = values[i]
        if (drinks := oracle_counts(raw)) is not None:
            counted += 1
            for drink, qty in drinks.items():
                totals[drink] = totals.get(drink, 0) + qty
    expected = dict(before)
    for raw in values:
        for drink, qty in (oracle_counts(raw) or {}).items():
            expected[drink] = expected.get(drink, 0) + qty
    assert totals == expected and counted == sum(oracle_counts(raw) is not None for raw in values)


def test_the_plain_order_check_is_not_vacuous() -> None:
    """Some of the near-valid generator's good orders take the shorter path (most have
    ids or names written with \\u escapes, or a field of their own, which take
    count_drinks), and every order of the project's own generator does."""
    good = [raw for raw, ok in zip(*[verdicts(near_valid_orders(), f) for f in (lambda r: r, oracle_counts)],
                                   strict=True) if ok is not None]
    passed = sum(check_count_plain(raw) for raw in good)
    assert passed >= len(good) // 10, (passed, len(good))
    generated = OrderGenerator(7)
    assert all(check_count_plain(orjson.dumps(next(generated))) for _ in range(1000))
