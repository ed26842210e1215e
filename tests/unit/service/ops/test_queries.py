"""The HTTP API's parameters and answers (pure): property tests for every parser."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from urllib.parse import urlencode

import pytest
from hypothesis import given
from hypothesis import strategies as st

from restorer.codec import (
    CHANGELOG_PARTITIONS,
    LAST_BATCH_MS,
    commit_key,
    decode_entries,
    encode_i64,
    encode_u64,
    local_key,
    meta_key,
    offset_key,
    position_key,
)
from service.drink_count.counts import BAD_ORDERS, PROCESSED_ORDERS, drink_counts, drink_key
from service.drink_count.http import counts_answer, top_answer
from service.instance.task_roles import TASK_ROLES
from service.ops.queries import (
    MAX_TOP,
    BadQuery,
    Owner,
    labelled,
    parse_params,
    status_answer,
    time_param,
    top_param,
)
from service.windows.http import window_range, windows_answer
from service.windows.state import WATERMARK_NS, WindowAgg, decode_windows_state, encode_window
from topics.partitioner import murmur2_partition

NAMES = ("key", "from", "to")


@given(st.dictionaries(st.sampled_from(NAMES), st.text(max_size=40)))
def test_known_parameters_read_back_whatever_they_hold(params: dict[str, str]) -> None:
    assert parse_params(urlencode(params), NAMES) == params


@given(st.text(max_size=80))
def test_any_query_string_is_parsed_or_refused_in_one_line(query: str) -> None:
    try:
        params = parse_params(query, NAMES)
    except BadQuery as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 200
    else:
        assert set(params) <= set(NAMES)


def test_unknown_repeated_and_malformed_parameters_are_refused() -> None:
    with pytest.raises(BadQuery, match="unknown parameter 'm'; this path takes: n"):
        parse_params("m=1", ("n",))
    with pytest.raises(BadQuery, match="more than once"):
        parse_params("n=1&n=2", ("n",))
    with pytest.raises(BadQuery, match="malformed"):
        parse_params("n", ("n",))
    with pytest.raises(BadQuery, match="unknown parameter"):
        parse_params("n=1", ())
    assert parse_params("", ()) == {}


@given(st.integers(1, MAX_TOP))
def test_n_in_range_is_taken(n: int) -> None:
    assert top_param({"n": str(n)}) == n


@given(st.text(max_size=12))
def test_any_n_is_a_count_in_range_or_refused(raw: str) -> None:
    try:
        n = top_param({"n": raw})
    except BadQuery as exc:
        assert "n must be a whole number from 1 to 10000" in str(exc)
    else:
        assert 1 <= n <= MAX_TOP
        assert raw == "" or int(raw) == n


def test_n_defaults_to_ten_and_refuses_the_rest() -> None:
    assert top_param({}) == 10
    for bad in ("0", "-1", "10001", "1.5", "ten", " 5", "٣", "9" * 5000):
        with pytest.raises(BadQuery):
            top_param({"n": bad})


_MOMENTS = st.datetimes(min_value=datetime(1700, 1, 1), max_value=datetime(2260, 1, 1),
                        timezones=st.just(UTC))


@given(_MOMENTS, st.integers(-14 * 60, 14 * 60))
def test_iso_times_in_any_zone_are_the_same_instant(moment: datetime, offset_min: int) -> None:
    expected = (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1) * 1000
    shown = moment.astimezone(timezone(timedelta(minutes=offset_min)))
    assert time_param({"from": shown.isoformat()}, "from") == expected
    assert time_param({"from": moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}, "from") == expected


@given(st.integers(-(2**62), 2**62))
def test_unix_seconds_are_read_exactly(ns: int) -> None:
    sign = "-" if ns < 0 else ""
    assert time_param({"to": f"{sign}{abs(ns) // 10**9}.{abs(ns) % 10**9:09d}"}, "to") == ns
    assert time_param({"to": f"{sign}{abs(ns) // 10**9}"}, "to") == (-1 if ns < 0 else 1) * (abs(ns) // 10**9) * 10**9


@given(st.text(max_size=40))
def test_any_time_text_is_a_time_or_refused_in_one_line(raw: str) -> None:
    try:
        ns = time_param({"from": raw}, "from")
    except BadQuery as exc:
        assert str(exc).startswith("from ") and "\n" not in str(exc)
    else:
        assert ns is None or -(2**63) <= ns < 2**63


def test_times_that_cannot_be_read() -> None:
    with pytest.raises(BadQuery, match="needs a time zone"):
        time_param({"from": "2026-11-23T10:00:00"}, "from")
    with pytest.raises(BadQuery, match="out of range"):
        time_param({"from": "999999999999"}, "from")
    with pytest.raises(BadQuery, match="out of range"):
        time_param({"from": "0001-01-01T00:00:00+14:00"}, "from")
    with pytest.raises(BadQuery, match="from is after to"):
        window_range({"from": "20", "to": "10"})
    assert window_range({"key": ""}) == (None, None, None)


def _store_entries() -> list[tuple[bytes, bytes]]:
    return [(drink_key("latte"), encode_u64(5)), (drink_key("mocha"), encode_u64(5)),
            (drink_key("chai"), encode_u64(9)), (offset_key("o", 0), encode_u64(12)),
            (offset_key("o", 1), encode_u64(3)), (meta_key(PROCESSED_ORDERS), encode_u64(15)),
            (meta_key(BAD_ORDERS), encode_u64(2)), (meta_key(LAST_BATCH_MS), encode_u64(1_763_892_000_500)),
            (commit_key(0), encode_u64(7)), (commit_key(1), encode_u64(7))]


def test_counts_and_top_carry_the_batch_they_reflect() -> None:
    state = drink_counts(decode_entries(_store_entries()))
    counts = counts_answer(state)
    assert counts == {"seq": 7, "offsets": {"o": {"0": 12, "1": 3}}, "last_batch": "2025-11-23T10:00:00.500Z",
                      "processed_orders": 15, "bad_orders": 2, "counts": {"chai": 9, "latte": 5, "mocha": 5},
                      "tasks": {}}
    top = top_answer(state, 2)
    assert top["seq"] == 7 and top["offsets"] == counts["offsets"]
    assert top["top"] == [{"rank": 1, "drink": "chai", "count": 9}, {"rank": 2, "drink": "latte", "count": 5}]


def test_top_is_merged_from_the_tasks_and_labels_them_like_counts() -> None:
    entries = [*_store_entries(), (local_key(CHANGELOG_PARTITIONS), b"2"), (position_key(0), encode_u64(40))]
    state = drink_counts(decode_entries(entries))
    top = top_answer(state, 3)
    assert top["top"] == [{"rank": 1, "drink": "chai", "count": 9}, {"rank": 2, "drink": "latte", "count": 5},
                          {"rank": 3, "drink": "mocha", "count": 5}]
    assert top["tasks"] == counts_answer(state)["tasks"] and set(top["tasks"]) == {"0", "1"}  # type: ignore[arg-type]
    assert top["tasks"]["0"]["changelog_position"] == 40  # type: ignore[index]


def test_status_reports_lag_and_restore_progress_as_last_seen() -> None:
    state = decode_entries([e for e in _store_entries() if e[0][:1] == b"\xff"])
    doc = status_answer(state, "o", {"0": 4.0, "1": 0.0}, {"0": 0.0, "2": 17.0}, now=1_763_892_010.5)
    assert doc["seq"] == 7 and doc["lag"] == 4 and doc["input_lag"] == {"0": 4, "1": 0}
    assert doc["restore_remaining"] == {"2": 17} and doc["last_batch_age_s"] == 10.0
    assert status_answer(decode_entries([]), "o", {}, {}, 0)["lag"] is None


def test_windows_answer_keeps_what_overlaps_the_range_for_one_key() -> None:
    m = 60 * 10**9
    windows = [WindowAgg("tumbling", 0, m, None, 3, 450), WindowAgg("tumbling", m, 2 * m, None, 1, 100),
               WindowAgg("session", 30 * 10**9, 90 * 10**9, "shop-1", 2, 200),
               WindowAgg("session", 0, 40 * 10**9, "shop-2", 1, 50)]
    entries = [encode_window(w) for w in windows] + [(meta_key(WATERMARK_NS), encode_i64(m)),
                                                     (commit_key(0), encode_u64(4))]
    state = decode_windows_state(entries)
    every = windows_answer(state, None, None, None)
    assert every["seq"] == 4 and every["watermark"] == "1970-01-01T00:01:00.000Z"
    assert [(w["kind"], w["start"], w["key"]) for w in every["windows"]] == [  # type: ignore[union-attr]
        ("session", "1970-01-01T00:00:00.000Z", "shop-2"), ("tumbling", "1970-01-01T00:00:00.000Z", None),
        ("session", "1970-01-01T00:00:30.000Z", "shop-1"), ("tumbling", "1970-01-01T00:01:00.000Z", None)]
    shop = windows_answer(state, "shop-1", 60 * 10**9, None)["windows"]
    assert shop == [{"kind": "session", "start": "1970-01-01T00:00:30.000Z", "end": "1970-01-01T00:01:30.000Z",
                     "key": "shop-1", "count": 2, "amount": 2.0, "late_accepted": 0}]
    # [from, to) overlaps: a window ending exactly at from is out, one starting exactly at to is out
    assert [w["start"] for w in windows_answer(state, None, m, m + 1)["windows"]] == [  # type: ignore[index]
        "1970-01-01T00:00:30.000Z", "1970-01-01T00:01:00.000Z"]
    assert every["tasks"] == {}  # not built against a changelog yet
    built = decode_windows_state([*entries, (local_key(CHANGELOG_PARTITIONS), b"3"), (position_key(1), encode_u64(9))])
    tasks = windows_answer(built, None, None, None)["tasks"]
    # Each task counts the open windows of its keys: shop-1's and shop-2's sessions in theirs,
    # the tumbling windows over every key in the empty key's.
    expected = {t: 0 for t in range(3)}
    for key in (b"shop-1", b"shop-2", b"", b""):
        expected[murmur2_partition(key, 3)] += 1
    assert {int(t): task["keys"] for t, task in tasks.items()} == expected  # type: ignore[union-attr]
    assert tasks["1"]["changelog_position"] == 9 and tasks["0"]["seq"] == 4  # type: ignore[index]


task_bodies = st.dictionaries(st.sampled_from(["0", "1", "2"]),
                              st.fixed_dictionaries({"keys": st.integers(0, 9), "seq": st.integers(0, 9)}))
lags = st.dictionaries(st.sampled_from(["0", "1", "2", "7"]),
                       st.one_of(st.integers(0, 10**6).map(float), st.just(math.nan)))


owners = st.builds(Owner, st.text(max_size=5), st.integers(0, 9),
                   st.lists(st.sampled_from(TASK_ROLES), max_size=4).map(tuple))


@given(task_bodies, st.booleans(), st.one_of(st.none(), owners), lags)
def test_every_answer_says_who_gave_it_and_a_standby_never_answers_unlabelled(
        tasks: dict[str, dict[str, int]], standby: bool, owner: Owner | None, lag: dict[str, float]) -> None:
    body = {"seq": 3, "tasks": tasks}
    out = labelled(body, standby, owner, lag)
    assert out["seq"] == 3 and body == {"seq": 3, "tasks": tasks}  # the answer is kept, the input untouched
    if owner is not None:
        assert (out["instance"], out["generation"]) == (owner.instance, owner.generation)
    labels = out["tasks"]
    assert isinstance(labels, dict) and set(labels) == set(tasks)
    for t, task in labels.items():
        assert {k: task[k] for k in tasks[t]} == tasks[t]
        if owner is not None:  # the task's role here, by its number; none for a task it does not know
            assert task["state"] == (owner.tasks[int(t)] if int(t) < len(owner.tasks) else None)
        if standby:
            # A copy that may be behind: no owner, marked stale, with its lag where the metrics know it.
            assert task["owner"] is None and task["stale"] is True
            known = lag.get(t)
            assert task["lag"] == (int(known) if known is not None and math.isfinite(known) else None)
        elif owner is not None:
            assert (task["owner"], task["generation"]) == (owner.instance, owner.generation)
    assert ("stale" in out) == standby
    if standby:
        assert out["standby_lag"] == sum(int(v) for v in lag.values() if math.isfinite(v))
