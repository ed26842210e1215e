"""The menu generator (``topics.menu_gen``): every record is a valid menu record, the stream
is reproducible from its seed, out-of-order changes stay within ``max_late_ns``, and read
in event-time order the menu makes sense (withdrawals of listed drinks, no ties)."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topics.event_time import EVENT_TIME, decode_event_time, encode_event_time
from topics.menu_gen import (
    DRINKS,
    PRICE_MAX_CENTS,
    PRICE_MIN_CENTS,
    MenuConfig,
    MenuGenerator,
    MenuRecord,
    check_currency,
    menu_record,
    menu_records,
)

NS = 10**9


@dataclass(frozen=True)
class Entry:
    """One menu record as a reader sees it."""

    drink: str
    price_cents: int | None  # None: withdrawn
    currency: str | None
    at_ns: int


def read(record: MenuRecord) -> Entry:
    """Checks the record against the menu format and returns what it says."""
    key, value, headers = record
    assert isinstance(key, bytes) and isinstance(value, bytes)
    drink = key.decode("utf-8")
    assert [name for name, _ in headers] == [EVENT_TIME]
    at_ns = decode_event_time(headers[0][1])
    if value == b"":
        return Entry(drink, None, None, at_ns)
    body = json.loads(value)
    assert set(body) == {"drink", "price_cents", "currency"}
    assert body["drink"] == drink
    price = body["price_cents"]
    assert type(price) is int and PRICE_MIN_CENTS <= price <= PRICE_MAX_CENTS
    assert isinstance(body["currency"], str)
    return Entry(drink, price, body["currency"], at_ns)


configs = st.builds(
    MenuConfig,
    start_ns=st.integers(0, 2**62),
    step_ns=st.integers(1, 3600 * NS),
    currency=st.sampled_from(["EUR", "USD", "CHF"]),
    late_fraction=st.floats(0, 1),
    max_late_ns=st.one_of(st.integers(0, 10), st.integers(0, 7200 * NS)),
    withdraw_fraction=st.floats(0, 1),
)


def first(cfg: MenuConfig, seed: int, n: int) -> tuple[list[MenuRecord], MenuGenerator]:
    gen = MenuGenerator(cfg, seed)
    return list(itertools.islice(gen, n)), gen


@settings(max_examples=150, deadline=None)
@given(configs, st.integers(0, 2**32), st.integers(0, 400))
def test_every_record_is_a_menu_record(cfg: MenuConfig, seed: int, n: int) -> None:
    records, _ = first(cfg, seed, n)
    entries = [read(r) for r in records]
    assert len(entries) == n
    for e in entries:
        assert e.drink in DRINKS
        assert e.at_ns >= cfg.start_ns
        assert e.currency in (None, cfg.currency)


@settings(max_examples=50, deadline=None)
@given(configs, st.integers(0, 2**32))
def test_it_opens_with_a_price_for_every_drink_at_the_start(cfg: MenuConfig, seed: int) -> None:
    records, _ = first(cfg, seed, len(DRINKS))
    entries = [read(r) for r in records]
    assert sorted(e.drink for e in entries) == sorted(DRINKS)
    assert all(e.at_ns == cfg.start_ns and e.price_cents is not None for e in entries)


@settings(max_examples=50, deadline=None)
@given(configs, st.integers(0, 2**32))
def test_the_same_seed_gives_the_same_records(cfg: MenuConfig, seed: int) -> None:
    assert first(cfg, seed, 300)[0] == first(cfg, seed, 300)[0]


def test_another_seed_gives_other_records() -> None:
    cfg = MenuConfig(start_ns=0)
    assert first(cfg, 1, 100)[0] != first(cfg, 2, 100)[0]


@settings(max_examples=150, deadline=None)
@given(configs, st.integers(0, 2**32), st.integers(0, 600))
def test_out_of_order_changes_are_late_by_at_most_max_late(cfg: MenuConfig, seed: int, n: int) -> None:
    records, gen = first(cfg, seed, n)
    latest, late = cfg.start_ns, 0
    for e in map(read, records):
        assert latest - e.at_ns <= cfg.max_late_ns
        if e.at_ns < latest:
            late += 1
            assert e.price_cents is not None, "withdrawals and re-listings are sent in order"
        latest = max(latest, e.at_ns)
    assert gen.tally.late == late


@settings(max_examples=150, deadline=None)
@given(configs, st.integers(0, 2**32), st.integers(0, 600))
def test_in_event_time_order_the_menu_makes_sense(cfg: MenuConfig, seed: int, n: int) -> None:
    records, gen = first(cfg, seed, n)
    entries = [read(r) for r in records]
    times = [(e.drink, e.at_ns) for e in entries]
    assert len(set(times)) == len(times), "two versions of one drink at one time"
    listed: dict[str, bool] = {}
    for e in sorted(entries, key=lambda e: e.at_ns):  # stable: equal times keep the order they were sent in
        if e.price_cents is None:
            assert listed[e.drink], f"{e.drink} withdrawn at {e.at_ns} while not listed"
        listed[e.drink] = e.price_cents is not None  # a price after a withdrawal lists the drink again
    for drink in {e.drink for e in entries}:
        sent = [i for i, e in enumerate(entries) if e.drink == drink]
        in_time = sorted(sent, key=lambda i: entries[i].at_ns)
        for k, i in enumerate(sent):
            if entries[i].price_cents is not None:
                continue
            # What comes next in event time is what came next when sent: the re-listing, at a
            # later time; no late change lands in the gap and lists the drink before it.
            next_sent = sent[k + 1] if k + 1 < len(sent) else None
            at = in_time.index(i)
            assert (in_time[at + 1] if at + 1 < len(in_time) else None) == next_sent
            if next_sent is not None:
                assert entries[next_sent].price_cents is not None
                assert entries[next_sent].at_ns > entries[i].at_ns
    withdrawals = sum(e.price_cents is None for e in entries)
    assert gen.tally.withdrawals == withdrawals
    assert gen.tally.prices + gen.tally.relistings == n - withdrawals


def test_withdrawals_are_empty_values_and_come_back_later() -> None:
    cfg = MenuConfig(start_ns=1_000 * NS, step_ns=60 * NS, late_fraction=0.3, withdraw_fraction=0.3)
    entries = [read(r) for r in itertools.islice(MenuGenerator(cfg, 7), 2000)]
    withdrawn: dict[str, int] = {}
    came_back = 0
    for e in entries:
        if e.price_cents is None:
            assert e.drink not in withdrawn
            withdrawn[e.drink] = e.at_ns
        elif e.drink in withdrawn:
            assert e.at_ns > withdrawn.pop(e.drink), "a re-listing is stamped after its withdrawal"
            came_back += 1
    assert came_back > 20
    assert len(withdrawn) <= len(DRINKS)


def test_a_withdrawal_record_is_an_empty_value() -> None:
    key, value, headers = menu_record("flat white", None, 5 * NS, "USD")
    assert (key, value, headers) == (b"flat white", b"", [(EVENT_TIME, encode_event_time(5 * NS))])


def test_a_price_record_holds_drink_price_and_currency() -> None:
    key, value, headers = menu_record("latte", 420, 7, "EUR")
    assert key == b"latte"
    assert json.loads(value) == {"drink": "latte", "price_cents": 420, "currency": "EUR"}
    assert headers == [(EVENT_TIME, (7).to_bytes(8, "big"))]


def test_some_changes_are_late_when_asked_and_none_when_not() -> None:
    _, gen = first(MenuConfig(start_ns=0, late_fraction=0.5), 3, 1000)
    assert gen.tally.late > 100
    _, gen = first(MenuConfig(start_ns=0, late_fraction=0.0), 3, 1000)
    assert gen.tally.late == 0


def test_menu_records_is_the_generator_for_those_settings() -> None:
    cfg = MenuConfig(start_ns=5, step_ns=7, currency="USD", late_fraction=0.2, max_late_ns=11,
                     withdraw_fraction=0.1)
    got = list(itertools.islice(menu_records(9, start_ns=5, step_ns=7, currency="USD", late_fraction=0.2,
                                             max_late_ns=11, withdraw_fraction=0.1), 200))
    assert got == first(cfg, 9, 200)[0]


@pytest.mark.parametrize("bad", [
    {"start_ns": -1}, {"start_ns": 2**64}, {"step_ns": 0}, {"max_late_ns": -1}, {"currency": "eur"},
    {"currency": "EURO"}, {"currency": ""}, {"late_fraction": 1.5}, {"withdraw_fraction": -0.1},
])
def test_bad_settings_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        MenuConfig(**{"start_ns": 0, **bad})  # type: ignore[arg-type]


@given(st.from_regex(r"[A-Z]{3}", fullmatch=True))
def test_three_capital_letters_are_a_currency(code: str) -> None:
    assert check_currency(code) == code


def test_with_a_clock_no_step_runs_past_it() -> None:
    """Sent faster than its steps, a menu is stamped at most now (a few nanoseconds on), and
    still never twice at one time for a drink."""
    from topics.event_time import decode_event_time
    from topics.menu_gen import MenuConfig, MenuGenerator

    now = 1_790_000_000 * 10**9
    cfg = MenuConfig(now - 60 * 10**9, 60 * 10**9, "EUR", 0.3, 5 * 10**9, 0.05)
    records = list(itertools.islice(MenuGenerator(cfg, 3, clock_ns=lambda: now), 500))
    times = [decode_event_time(r[2][0][1]) for r in records]
    assert max(times) <= now + len(records)
    seen = [(r[0], t) for r, t in zip(records, times, strict=True)]
    assert len(seen) == len(set(seen))
