"""`seed-menu` and `seed-orders --past` on a real broker: the records in the topic are what
the generators promise, headers included, each sent once."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from tests.support.helpers import Pipeline, read_topic
from topics.event_time import EVENT_TIME, decode_event_time
from topics.menu_gen import menu_records

START = "2026-11-23T10:00:00Z"


def test_seed_menu_sends_the_seeded_menu_with_event_times(pipe: Pipeline) -> None:
    proc = pipe.brew("seed-menu", "--count", "60", "--rate", "0", "--seed", "3", "--start", START,
                     "--step", "30s", "--max-late", "45s", "--late-fraction", "0.3", check=True)
    assert f"sent 60 records to {pipe.topics.menu}" in proc.stdout
    start_ns = int(datetime.fromisoformat(START).timestamp()) * 10**9
    expected = menu_records(3, start_ns=start_ns, step_ns=30 * 10**9, late_fraction=0.3, max_late_ns=45 * 10**9)
    want = sorted((k, v, tuple(h)) for k, v, h in (next(expected) for _ in range(60)))
    got = sorted((m.key(), m.value(), tuple(m.headers() or ())) for m in read_topic(pipe.conn, pipe.topics.menu))
    assert got == want


def test_seed_orders_past_stamps_rising_event_times(pipe: Pipeline) -> None:
    before = time.time_ns()
    pipe.brew("seed-orders", "--count", "30", "--rate", "0", "--past", "1h", "--event-time-step", "1s", check=True)
    after = time.time_ns()
    hour, second = 3600 * 10**9, 10**9
    stamps = []
    for m in read_topic(pipe.conn, pipe.topics.orders):
        headers: Any = m.headers() or []  # the client's stubs allow a dict; a producer's list comes back
        assert [name for name, _ in headers] == [EVENT_TIME]
        stamps.append(decode_event_time(headers[0][1]))
    first = min(stamps)
    assert before - hour <= first <= after - hour
    assert sorted(stamps) == [first + i * second for i in range(30)]


def test_seed_orders_without_past_has_no_header(pipe: Pipeline) -> None:
    pipe.brew("seed-orders", "--count", "5", "--rate", "0", check=True)
    assert all(not m.headers() for m in read_topic(pipe.conn, pipe.topics.orders))
