"""Orders as raw JSON text for property tests: strategies that write any JSON document
and near-valid orders, a strict JSON reading, an oracle that counts an order by hand, and
the checks that every parser path is total and agrees with it."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from service.drink_count.aggregate import merge_partials, partial_counts
from service.records.limits import MAX_NAME_BYTES
from service.records.orders import BadOrder, count_drinks, count_plain


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
