"""Event times of generated orders (``seed-orders --past``): ``topics.feed.order_event_times``
and the header ``generated_records`` stamps with them. The clock is passed in."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from topics.event_time import EVENT_TIME, decode_event_time
from topics.feed import generated_records, order_event_times
from topics.orders_gen import OrderGenerator


@given(st.integers(0, 2**62), st.integers(1, 10**12), st.integers(1, 200))
def test_with_a_step_the_times_are_that_far_apart(first_ns: int, step_ns: int, n: int) -> None:
    times = list(itertools.islice(order_event_times(first_ns, step_ns), n))
    assert times == [first_ns + i * step_ns for i in range(n)]


@given(st.integers(0, 2**62), st.lists(st.integers(-10**9, 10**9), min_size=1, max_size=100))
def test_without_a_step_they_follow_the_clock_and_always_rise(first_ns: int, moves: list[int]) -> None:
    """Each time is the first plus the clock's advance since the first, or just above the one
    before when the clock stood still (or went back)."""
    readings = list(itertools.accumulate(moves, initial=5_000_000))

    def clock() -> int:
        return next(ticks)

    ticks: Iterator[int] = iter(readings)
    times = list(itertools.islice(order_event_times(first_ns, None, clock), len(readings) - 1))
    expected, last = [], first_ns - 1
    for reading in readings[1:]:
        last = max(last + 1, first_ns + reading - readings[0])
        expected.append(last)
    assert times == expected
    assert times[0] >= first_ns
    assert all(b > a for a, b in itertools.pairwise(times))


@pytest.mark.parametrize("step_ns", [0, -1])
def test_a_step_must_be_above_zero(step_ns: int) -> None:
    with pytest.raises(ValueError):
        order_event_times(0, step_ns)


def test_stamped_orders_carry_the_times_in_an_event_time_header() -> None:
    records = list(itertools.islice(generated_records(4, order_event_times(10**18, 10**9)), 50))
    orders = list(itertools.islice(OrderGenerator(4), 50))
    for i, (record, order) in enumerate(zip(records, orders, strict=True)):
        assert len(record) == 3
        key, value, headers = record
        assert (key, value) == (order["shop_id"].encode(), orjson.dumps(order))
        assert [name for name, _ in headers] == [EVENT_TIME]
        assert decode_event_time(headers[0][1]) == 10**18 + i * 10**9


def test_without_times_the_orders_have_no_header() -> None:
    records = list(itertools.islice(generated_records(4), 20))
    assert all(len(r) == 2 for r in records)
    assert [r[1] for r in records] == [orjson.dumps(o) for o in itertools.islice(OrderGenerator(4), 20)]
