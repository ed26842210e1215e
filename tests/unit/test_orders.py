import json
import math
from collections.abc import Callable
from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from service.drink_count.aggregate import merge_partials, partial_counts
from service.drink_count.orders import BadOrder, count_drinks, count_plain
from service.records.limits import MAX_NAME_BYTES
from tests.corpus import BAD_ORDERS, GOOD_EDGE_ORDERS
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

def assert_short_reason(reason: str) -> None:
    assert reason and len(reason) <= 100 and reason.isascii() and "\n" not in reason, reason


def reason_of(raw: bytes) -> str:
    with pytest.raises(BadOrder) as exc:
        count_drinks(raw)
    return str(exc.value)


BOUNDARY_INTS = [0, 1, -1, 2**31 - 1, 2**31, -(2**31), 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64,
                 -(2**63), -(2**63) - 1, -(2**64), 10**308, 2**1024, -(2**1024)]
FLOAT_SPELLINGS = ["1.0", "1e2", "1E2", "2.5E+3", "-0.0", "0.0", "4.5", "1e-400", "5e-324", "1e308",
                   "1.7976931348623157e308", "1e309", "1e400", "-1e400", "1e999", "0.1e-999999"]
NOT_JSON_CONSTANTS = ["NaN", "Infinity", "-Infinity"]
ESCAPED_STRINGS = ['"\\ud800"', '"\\udfff"', '"a\\ud800b"', '"\\udc00\\ud800"', '"\\ud83d\\ude00"', '"\\u0000"',
                   '"\\/\\"\\\\\\b\\f\\n\\r\\t"', '"\\u00e9"']
SEPARATORS = st.sampled_from([",", ", ", " ,\n\t", "\r\n,"])
COLONS = st.sampled_from([":", ": ", " :\n"])

int_text = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(BOUNDARY_INTS).map(str),
    st.just("-0"),
    # Up to beyond the 4300 digits Python's int() refuses.
    st.tuples(st.sampled_from(["", "-"]), st.integers(1, 6000) | st.sampled_from([300, 309, 310, 350, 399, 400, 401]))
    .map(lambda sn: sn[0] + "9" * sn[1]),
)
float_text = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(FLOAT_SPELLINGS),
    st.tuples(st.integers(-999, 999), st.integers(0, 999), st.sampled_from("eE"), st.integers(-400, 400)).map(
        lambda t: f"{t[0]}.{t[1]}{t[2]}{t[3]}"),
)
string_text = st.one_of(
    st.text(max_size=12).map(json.dumps),  # non-ASCII (and lone surrogates) as \\u escapes
    st.text(max_size=12).map(lambda s: json.dumps(s, ensure_ascii=False)),  # raw; a lone one is bad UTF-8
    st.sampled_from(ESCAPED_STRINGS),
    st.sampled_from([1, 255, 256, 257, 5000]).map(lambda n: '"' + "x" * n + '"'),
    st.sampled_from([128, 129]).map(lambda n: '"' + "\u00e9" * n + '"'),
)
scalar_text = st.one_of(st.sampled_from(["null", "true", "false", *NOT_JSON_CONSTANTS]), int_text, float_text,
                        string_text)
key_text = st.one_of(st.sampled_from(['"order_id"', '"shop_id"', '"items"', '"drink"', '"quantity"', '"amount"',
                                      '"a"']), string_text)


@st.composite
def _array(draw: st.DrawFn, children: st.SearchStrategy[str]) -> str:
    return "[" + draw(SEPARATORS).join(draw(st.lists(children, max_size=4))) + "]"


@st.composite
def _object(draw: st.DrawFn, children: st.SearchStrategy[str]) -> str:
    pairs = draw(st.lists(st.tuples(key_text, children), max_size=4))  # keys may repeat
    colon = draw(COLONS)
    return "{" + draw(SEPARATORS).join(k + colon + v for k, v in pairs) + "}"


json_text = st.recursive(scalar_text, lambda kids: _array(kids) | _object(kids), max_leaves=10)


def to_bytes(text: str) -> bytes:
    # A raw lone surrogate becomes the bytes UTF-8 forbids for it: invalid UTF-8 on purpose.
    return text.encode("utf-8", "surrogatepass")


# A near-valid order: the valid shape, then maybe one field or item changed to anything.
good_drink = st.one_of(
    st.sampled_from(["latte", "mocha", "flat white", "caf\u00e9", "x" * MAX_NAME_BYTES, "\u00e9" * 128]),
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=12),
)
good_quantity = st.one_of(st.integers(1, 2**31 - 1), st.sampled_from([1, 2, 2**31 - 1]))
MUTATIONS = ["order_id", "shop_id", "items", "item", "drink", "quantity", "drop", "repeat", "extra",
             "drink limit", "quantity range"]


@st.composite
def near_valid_orders(draw: st.DrawFn) -> bytes:
    mutation = draw(st.one_of(st.just("none"), st.sampled_from(MUTATIONS)))
    items: list[dict[str, str] | str] = [
        {"drink": json.dumps(draw(good_drink), ensure_ascii=draw(st.booleans())), "quantity": str(draw(good_quantity))}
        for _ in range(draw(st.integers(1, 4)))]
    i = draw(st.integers(0, len(items) - 1))
    item = items[i]
    assert isinstance(item, dict)
    top = {"order_id": json.dumps(draw(st.text(max_size=6))), "shop_id": '"shop-07"'}
    victim = draw(st.sampled_from(["order_id", "shop_id", "items", "drink", "quantity"]))
    if mutation == "item":
        items[i] = draw(json_text)
    elif mutation in ("drink", "quantity"):
        item[mutation] = draw(json_text)
    elif mutation == "drink limit":
        item["drink"] = json.dumps(draw(st.sampled_from(["x" * 257, "\u00e9" * 129, "\u2615" * 86, ""])))
    elif mutation == "quantity range":
        item["quantity"] = draw(st.sampled_from(["0", "-1", str(2**31), "2.0", "1e2", "true", '"1"', "null"]))
    elif mutation == "drop" and victim in item:
        del item[victim]
    top["items"] = "[" + draw(SEPARATORS).join(x if isinstance(x, str) else render_object(draw, list(x.items()))
                                               for x in items) + "]"
    if mutation in ("order_id", "shop_id", "items"):
        top[mutation] = draw(json_text)
    elif mutation == "drop" and victim in top:
        del top[victim]
    pairs = list(top.items())
    if mutation == "repeat":  # a key written twice: the last one counts
        key = draw(st.sampled_from(["order_id", "shop_id", "items"]))
        pairs.insert(draw(st.integers(0, len(pairs))), (key, draw(json_text)))
    elif mutation == "extra":
        pairs.insert(draw(st.integers(0, len(pairs))), (draw(st.sampled_from(["note", "tags", "n"])), draw(json_text)))
    text = render_object(draw, pairs)
    return to_bytes(draw(st.sampled_from(["", " ", "\n"])) + text + draw(st.sampled_from(["", " ", "\r\n"])))


def render_object(draw: st.DrawFn, pairs: list[tuple[str, str]]) -> str:
    pairs = draw(st.permutations(pairs)) if draw(st.booleans()) else pairs
    colon = draw(COLONS)
    return "{" + draw(SEPARATORS).join(
        (k if k.startswith('"') else json.dumps(k)) + colon + v for k, v in pairs) + "}"


# --- the oracle: DESIGN.md's order format, judged without the code under test -----------

class NotJSON(Exception):
    pass


def strict_json(raw: bytes) -> Any:
    """RFC 8259 JSON as the service takes it: UTF-8 without a BOM, no NaN or Infinity, no
    number beyond a double, no lone surrogate. Raises NotJSON. (Nesting depth is left to
    the unit tests: the generators here stay shallow.)"""
    def number(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise NotJSON
        return value

    def integer(text: str) -> int:
        number(text)  # float() of any length is safe; int() refuses over 4300 digits
        return int(text)

    def constant(text: str) -> Any:
        raise NotJSON

    def unicode_only(value: Any) -> None:
        stack = [value]
        while stack:
            v = stack.pop()
            if isinstance(v, dict):
                stack += list(v) + list(v.values())
            elif isinstance(v, list | tuple):
                stack += v
            elif isinstance(v, str):
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError:
                    raise NotJSON from None

    def obj(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        unicode_only(pairs)  # every pair, also those a repeated key drops: a lone surrogate spoils the text
        return dict(pairs)  # the last value of a repeated key counts

    try:
        doc = json.loads(raw.decode("utf-8"), parse_float=number, parse_int=integer, parse_constant=constant,
                         object_pairs_hook=obj)
    except (ValueError, RecursionError):  # bad UTF-8, BOM, bad syntax
        raise NotJSON from None
    unicode_only(doc)
    return doc


def oracle_counts(raw: bytes | None) -> dict[str, int] | None:
    """Counts per drink, or None for a bad order."""
    if not raw:
        return None
    try:
        doc = strict_json(raw)
    except NotJSON:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("order_id"), str) or \
            not isinstance(doc.get("shop_id"), str):
        return None
    items = doc.get("items")
    if not isinstance(items, list) or len(items) == 0:
        return None
    counts: dict[str, int] = {}
    for item in items:
        if not isinstance(item, dict):
            return None
        drink, quantity = item.get("drink"), item.get("quantity")
        if not isinstance(drink, str) or drink == "" or len(drink.encode("utf-8")) > 256:
            return None
        if isinstance(quantity, bool) or not isinstance(quantity, int) or not 1 <= quantity <= 2**31 - 1:
            return None
        counts[drink] = counts.get(drink, 0) + quantity
    return counts


def check_total(parse: Callable[[], object], bad: type[Exception]) -> object | None:
    """The parser's result, or None when it raised its bad-record error (with a short reason)."""
    try:
        return parse()
    except bad as exc:
        assert_short_reason(str(exc))
        return None


def check_order(raw: bytes | None) -> None:
    got = check_total(lambda: count_drinks(raw), BadOrder)
    assert got == oracle_counts(raw), raw[:300] if raw else raw
    check_task_path(raw, got)


def check_task_path(raw: bytes | None, expected: object | None) -> None:
    """What a Spark task makes of the record (partial_counts, which parses the clean
    majority on a shorter path) agrees with count_drinks: the same counts, or the same
    bad-order reason."""
    values = pa.array([raw], pa.binary())
    batch = pa.RecordBatch.from_arrays([pa.array([b"k"], pa.binary()), values, pa.array([0], pa.int32()),
                                        pa.array([7], pa.int64())], names=["key", "value", "partition", "offset"])
    agg = merge_partials(next(iter(partial_counts(iter([batch])))).to_pylist())
    if expected is None:
        reason = reason_of(raw) if raw is not None else "null value"
        assert agg.deltas == {} and agg.good_orders == 0 and [b.reason for b in agg.bad] == [reason]
    else:
        assert agg.bad == [] and agg.good_orders == 1 and agg.deltas == expected


PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
JSON_PREFIXES = [b"", b"{", b"[", b'{"order_id": "o", "shop_id": "s", "items": [', b'"', b"-", b"1e", b"\xef\xbb\xbf",
                 b'{"order_id": "o", "shop_id": "s", "items": [{"drink": "latte", "quantity": 1}]}']


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


def verdicts(strategy: st.SearchStrategy[Any], judge: Callable[[Any], bool], n: int = 300) -> list[bool]:
    """The oracle's verdicts on n examples of a strategy (a fixed seed: the same every run)."""
    out: list[bool] = []

    @seed(20261122)
    @settings(max_examples=n, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(example: Any) -> None:
        out.append(judge(example))

    collect()
    return out


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

def agrees_when_counted(counted: dict[str, int] | None, raw: bytes, max_name_bytes: int) -> bool:
    """A shorter path's count of ``raw`` (None: it left the order to count_drinks) is what
    count_drinks and, at the default limit, the oracle count, so it never counts what
    they refuse; True when it counted the order."""
    if counted is None:
        return False
    assert counted == count_drinks(raw, max_name_bytes=max_name_bytes), raw[:300]
    if max_name_bytes == MAX_NAME_BYTES:
        assert counted == oracle_counts(raw), raw[:300]
    return True


def check_count_plain(raw: bytes, max_name_bytes: int = MAX_NAME_BYTES) -> bool:
    """count_plain never counts what count_drinks or the oracle refuses, and what it
    counts it counts the same; True when it counted the order."""
    totals: dict[str, int] = {}
    counted, rest = count_plain([raw], max_name_bytes, totals)
    assert (counted, rest) in ((1, []), (0, [0])) and bool(totals) == bool(counted)
    return agrees_when_counted(totals if counted else None, raw, max_name_bytes)


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


# Where a strict decoder and orjson could part: each must be refused, or counted the same.
PLAIN_EDGES = [
    b'{"order_id":"a","order_id":"b","shop_id":"s","items":[{"drink":"x","quantity":1}]}',
    b'{"order_id":"a","shop_id":"s","items":[{"drink":"x","quantity":1}],"items":[{"drink":"y","quantity":2}]}',
    b'{"order_id":"a","shop_id":"s","items":5,"items":[{"drink":"y","quantity":2}]}',
    b'{"order_id":"a","shop_id":"s","items":[{"drink":"x","quantity":1,"quantity":5}]}',
    b'{"order_id":"a","shop_id":"s","items":[{"drink":"x","quantity":"1","quantity":5}]}',
    b'{"order_id":"a","shop_id":"s","items":[{"drink":"x","quantity":1.0}]}',
    b'{"order_id":"a","shop_id":"s","items":[{"drink":"x","quantity":1e0}]}',
    b'{"order_id":"a","shop_id":"s","items":[{"drink":"x","quantity":true}]}',
    b'{"order_id":"a","shop_id":"s","items":[{"drink":"x","quantity":-0}]}',
    b'{"order_id":"a","shop_id":"s","items":[{"drink":"x","quantity":2147483648}]}',
    b'{"order_id":"a","shop_id":"s","items":[{"drink":"x","quantity":99999999999999999999999}]}',
    b'{"order_id":"a","shop_id":"s","items":[{"drink":"x\x01","quantity":1}]}',
    b'{"order_id":"a","shop_id":"s","items":[{"drink":"x","quantity":1}]} x',
    b'{"order_id":"a","shop_id":"s","items":[{"drink":"x","quantity":1}]}\x00',
    b' {"order_id":"a","shop_id":"s","items":[{"drink":"x","quantity":1}]} \n\t\r',
    b'\xef\xbb\xbf{"order_id":"a","shop_id":"s","items":[{"drink":"x","quantity":1}]}',
    b'{"order_id":"\xed\xa0\x80","shop_id":"s","items":[{"drink":"x","quantity":1}]}',
    b'{"order_id":"\\ud800","shop_id":"s","items":[{"drink":"x","quantity":1}]}',
    b'{"order_id":"a","shop_id":"s","items":[{"drink":"\\u00e9","quantity":1}]}',
    b'{"order_id":"a","shop_id":"s","items":[{"drink":"caf\xc3\xa9","quantity":1}]}',
    b'{"order_id":"a","shop_id":"s","items":[{"drink":"' + "\u00e9".encode() * 129 + b'","quantity":1}]}',
    b'{"order_id":"a","shop_id":"s","items":[{"drink":"' + b"x" * 257 + b'","quantity":1}]}',
    b'{"order_id":"a","shop_id":"s","items":[{"drink":"","quantity":1}]}',
    b'{"order_id":"a","shop_id":"s","items":[]}',
    b'{"order_id":"a","shop_id":"s","items":[{"drink":"x","quantity":1}],"note":1e400}',
    b'{"order_id":"a","shop_id":"s","items":[{"drink":"x","quantity":1}],"note":"\\udc00"}',
    b'{"order_id":null,"shop_id":"s","items":[{"drink":"x","quantity":1}]}',
    b'[{"order_id":"a","shop_id":"s","items":[{"drink":"x","quantity":1}]}]',
]


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
