"""A poisoned watermark, noticed and repaired, without Spark or Kafka: the pure pieces of
``service.windows.clock_guard`` on stores the old way (no bound) poisoned."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from service.records.event_time import MAX_AHEAD_LIMIT_NS
from service.windows.assign import WindowSpec, assign
from service.windows.clock_guard import (
    PartitionScan,
    plan_repair,
    poisoned_clocks,
    scan_records,
    seal_after,
    watermark_poisoned,
)
from service.windows.step import FINAL, WindowsConfig
from service.windows.watermark import PartitionClock, closed
from tests.support.windows_step import MIN, Pipeline, at
from topics.event_time import encode_event_time

YEAR = 365 * 86_400 * 10**9
NOW = at("10:05")  # this machine's clock in these tests


def poisoned(spec: WindowSpec) -> Pipeline:
    """Real events 10:00-10:04 on partitions 0 and 1, then one a year ahead on partition 0,
    judged the old way (no bound), then real events that the poisoned watermark makes late."""
    cfg = WindowsConfig(spec, watermark_delay_ns=MIN, idle_timeout_ms=5_000, max_ahead_ns=MAX_AHEAD_LIMIT_NS)
    pl = Pipeline(cfg)
    pl.batch(("a", at("10:00"), 0), ("b", at("10:01"), 1), ("a", at("10:02"), 0), ("b", at("10:02"), 1))
    pl.batch(("a", at("10:03"), 0), ("b", at("10:04"), 1))
    # Partition 1 went quiet for a while: the poison alone sets the watermark.
    pl.batch(("x", at("10:04") + YEAR, 0, at("10:04")), now_ms=20_000)
    pl.batch(("b", at("10:04") + 20 * 10**9, 1))  # late, like every real event from now on
    pl.batch(("a", at("10:04") + 30 * 10**9, 0), ("b", at("10:04") + 40 * 10**9, 1))
    return pl


def scans_of(pl: Pipeline, newest: dict[int, int], latest: dict[int, int | None]) -> dict[int, PartitionScan]:
    return {p: PartitionScan(newest[p], latest[p], 10, 1 if p == 0 else 0) for p in newest}


def test_a_store_poisoned_the_old_way_is_noticed() -> None:
    pl = poisoned(WindowSpec.tumbling(MIN))
    state = pl.state()
    bound = 60 * 10**9
    assert state.watermark_ns is not None and state.watermark_ns > at("10:04") + YEAR - 2 * MIN
    assert poisoned_clocks(state.clocks, {}, NOW, bound) == [0]
    assert poisoned_clocks(state.clocks, {0: at("10:04") + YEAR}, NOW, bound) == []  # the input vouches for it
    cfg = WindowsConfig(WindowSpec.tumbling(MIN), max_ahead_ns=bound)
    assert watermark_poisoned(state.watermark_ns, NOW, cfg)
    assert not watermark_poisoned(seal_after(NOW + bound, cfg.spec), NOW, cfg)  # a repair's own seal is fine


def test_the_repair_puts_clocks_and_watermark_back_and_drops_the_poisoned_window() -> None:
    pl = poisoned(WindowSpec.tumbling(MIN))
    before = pl.state()
    emitted = {r.window.start_ns for r in pl.results}
    assert emitted == {at(m) for m in ("10:00", "10:01", "10:02", "10:03", "10:04")}  # closed early by the poison
    cfg = WindowsConfig(WindowSpec.tumbling(MIN), watermark_delay_ns=MIN, idle_timeout_ms=3_600_000)
    scans = scans_of(pl, {0: at("10:04") + 30 * 10**9, 1: at("10:04") + 40 * 10**9},
                     {0: at("10:04") + 30 * 10**9, 1: at("10:04") + 40 * 10**9})
    plan = plan_repair(before, scans, NOW, cfg)
    assert plan.clocks == {0: (at("10:04") + YEAR, at("10:04") + 30 * 10**9)}
    # The latest real event is 10:04:40; the window holding it ends at 10:05.
    assert plan.watermark == (before.watermark_ns, at("10:05"))
    assert [w.start_ns for w in plan.dropped] == [at("10:04") + YEAR]
    pl.cfg = cfg
    for k, v in plan.entries:
        if v is None:
            pl.store.pop(k, None)
        else:
            pl.store[k] = v
    after = pl.state()
    assert after.clocks[0].max_event_ns == at("10:04") + 30 * 10**9 and after.watermark_ns == at("10:05")
    assert after.windows == {} and all(s < NOW for s in after.by_event)
    assert not plan_repair(after, scans, NOW, cfg).changes_anything  # a second repair changes nothing

    # Real events from now on: those in windows the poisoned watermark closed are late (no
    # window gets a second result); windows after them count exactly.
    results_before, late_before = len(pl.results), len(pl.late)
    times = [("a", at("10:04") + 50 * 10**9, 0), ("a", at("10:05") + 10 * 10**9, 0), ("b", at("10:05") + 20 * 10**9, 1),
             ("a", at("10:06") + 5 * 10**9, 0), ("b", at("10:06") + 30 * 10**9, 1), ("a", at("10:09"), 0),
             ("b", at("10:09"), 1)]
    for t in times:
        pl.batch(t)
    new = [(r.window.start_ns, r.window.count) for r in pl.results[results_before:] if r.emit == FINAL]
    assert new == [(at("10:05"), 2), (at("10:06"), 2)]
    assert not emitted & {s for s, _ in new}
    assert len(pl.late) - late_before == 1  # 10:04:50, in the window the poison closed


def test_a_partition_with_no_real_event_left_loses_its_clock() -> None:
    pl = poisoned(WindowSpec.tumbling(MIN))
    cfg = WindowsConfig(WindowSpec.tumbling(MIN), watermark_delay_ns=MIN)
    plan = plan_repair(pl.state(), {0: PartitionScan(at("10:04"), None, 1, 1)}, NOW, cfg)
    assert plan.clocks == {0: (at("10:04") + YEAR, None)}
    # Partition 1's clock (10:04:40) is now the latest real event time.
    assert plan.watermark is not None and plan.watermark[1] == at("10:05")


def test_a_healthy_store_is_left_alone() -> None:
    cfg = WindowsConfig(WindowSpec.tumbling(MIN), watermark_delay_ns=MIN, idle_timeout_ms=3_600_000)
    pl = Pipeline(cfg)
    pl.batch(("a", at("10:00"), 0), ("b", at("10:03"), 1), ("a", at("10:05") + 30 * 10**9, 0))
    assert not plan_repair(pl.state(), {}, NOW, cfg).changes_anything


def test_sessions_are_sealed_two_gaps_after_the_latest_real_event() -> None:
    gap = 30 * 10**9
    pl = poisoned(WindowSpec.session(gap))
    cfg = WindowsConfig(WindowSpec.session(gap), watermark_delay_ns=MIN, idle_timeout_ms=3_600_000)
    latest = at("10:04") + 40 * 10**9
    plan = plan_repair(pl.state(), scans_of(pl, {0: latest, 1: latest}, {0: latest, 1: latest}), NOW, cfg)
    assert plan.watermark is not None and plan.watermark[1] == latest + 2 * gap
    assert [w.key for w in plan.dropped] == ["x"]


def test_reading_back_takes_the_latest_event_the_bound_accepts() -> None:
    cfg = WindowsConfig(WindowSpec.tumbling(MIN))
    good = json.dumps({"shop_id": "s", "drink": "latte", "amount": 1}).encode()
    records = [(good, encode_event_time(at("10:00")), at("10:00")),
               (good, encode_event_time(at("10:00") + YEAR), at("10:01")),   # the poison
               (good, encode_event_time(2**63), at("10:01")),
               (good, None, at("10:02")),                                   # timed by its record
               (b"{", encode_event_time(at("10:03")), at("10:03")),         # not an event
               (good, encode_event_time(at("09:00")), -1)]                  # no timestamp to bound it by
    scan = scan_records(records, cfg, 256)
    assert scan == PartitionScan(at("10:03"), at("10:02"), 6, 2)
    assert scan_records([], cfg, 256) == PartitionScan()


specs = st.one_of(
    st.integers(1, 3600).map(lambda s: WindowSpec.tumbling(s * 10**9)),
    st.tuples(st.integers(1, 60), st.integers(1, 10)).map(lambda hs: WindowSpec.hopping(hs[0] * hs[1] * 10**9,
                                                                                         hs[1] * 10**9)),
)


@settings(max_examples=200, deadline=None)
@given(specs, st.integers(0, 600), st.integers(0, 4_102_444_800 * 10**9), st.integers(0, 7200 * 10**9))
def test_the_seal_closes_every_window_of_an_earlier_event_and_no_later_one(
        spec: WindowSpec, allowed_s: int, latest: int, back: int) -> None:
    spec = WindowSpec(spec.kind, spec.size_ns, spec.hop_ns, 0, allowed_s * 10**9)
    seal = seal_after(latest, spec)
    for t in (latest, max(0, latest - back)):
        assert all(closed(end, spec.allowed_ns, seal) for _, end in assign(t, spec))
    # The first window that starts after the latest event stays open.
    first_after = latest - latest % spec.hop_ns + spec.hop_ns
    assert not closed(first_after + spec.size_ns, spec.allowed_ns, seal)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 3600), st.integers(0, 600), st.integers(0, 4_102_444_800 * 10**9),
       st.integers(-7200 * 10**9, 7200 * 10**9))
def test_the_seal_of_sessions_closes_every_session_an_earlier_event_touches(
        gap_s: int, allowed_s: int, latest: int, offset: int) -> None:
    spec = WindowSpec.session(gap_s * 10**9, allowed_s * 10**9)
    seal = seal_after(latest, spec)
    # A session holding events up to ``latest`` ends by latest + gap; a new event at t makes
    # the session [t, t + gap), which overlaps it when t comes before that end: late. A later
    # one starts a session of its own, counted.
    t = latest + offset
    assert closed(t + spec.gap_ns, spec.allowed_ns, seal) == (t <= latest + spec.gap_ns)


def test_the_seal_of_a_poison_never_exceeds_the_check() -> None:
    cfg = WindowsConfig(WindowSpec.tumbling(MIN, 5 * MIN), max_ahead_ns=60 * 10**9)
    assert not watermark_poisoned(seal_after(NOW + cfg.max_ahead_ns, cfg.spec), NOW, cfg)
    assert watermark_poisoned(seal_after(NOW + cfg.max_ahead_ns, cfg.spec) + 1, NOW, cfg)
    assert not watermark_poisoned(None, NOW, cfg)
    assert poisoned_clocks({0: PartitionClock(NOW + 60 * 10**9, 0)}, {}, NOW, 60 * 10**9) == []
    assert poisoned_clocks({0: PartitionClock(NOW + 60 * 10**9 + 1, 0)}, {}, NOW, 60 * 10**9) == [0]
