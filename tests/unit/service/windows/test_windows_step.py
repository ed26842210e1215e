"""The window state machine without Spark or Kafka: partials -> merge -> step, batch by batch."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from service.windows.assign import WindowSpec
from service.windows.step import EARLY, FINAL, REVISION, WindowsConfig
from tests.support.windows_step import MIN, Pipeline, at


def textbook(emit_early: bool) -> Pipeline:
    # Seed 03, worked example 2: 10-minute windows, 2 minutes of allowed lateness.
    pl = Pipeline(WindowsConfig(WindowSpec.tumbling(10 * MIN, 2 * MIN), watermark_delay_ns=MIN,
                                idle_timeout_ms=3_600_000, emit_early=emit_early))
    for hhmm in ("10:01", "10:04", "10:09", "10:12"):
        pl.batch(("shop-01", at(hhmm), 0))
    assert pl.state().watermark_ns == at("10:11")
    pl.batch(("shop-01", at("10:08"), 0))   # arrives at watermark 10:11: counted
    pl.batch(("shop-01", at("10:14"), 0))   # watermark -> 10:13 closes [10:00, 10:10)
    assert pl.state().watermark_ns == at("10:13")
    pl.batch(("shop-01", at("10:07"), 0))   # arrives at watermark 10:13: late
    return pl


def test_textbook_case_counts_four_and_sends_the_fifth_to_the_late_output() -> None:
    pl = textbook(emit_early=False)
    finals = [r for r in pl.results if r.window.start_ns == at("10:00")]
    assert [(r.emit, r.window.count, r.window.late_accepted) for r in finals] == [(FINAL, 4, 1)]
    assert pl.late == [("", 6)]  # offset 6 is the 10:07 event
    assert pl.state().counter("late") == 1


def test_textbook_case_with_early_results_and_a_revision() -> None:
    pl = textbook(emit_early=True)
    first = [(r.emit, r.window.count) for r in pl.results if r.window.start_ns == at("10:00")]
    assert first == [(EARLY, 3), (REVISION, 4), (FINAL, 4)]


def test_final_windows_leave_the_store() -> None:
    pl = textbook(emit_early=False)
    open_starts = sorted(w.start_ns for w in pl.state().windows.values())
    assert open_starts == [at("10:10")]


def test_hopping_windows_count_an_event_in_each_window_it_falls_in() -> None:
    pl = Pipeline(WindowsConfig(WindowSpec.hopping(5 * MIN, MIN), watermark_delay_ns=0, idle_timeout_ms=10**9))
    pl.batch(("s", at("10:03"), 0))
    pl.batch(("s", at("10:20"), 0))  # closes everything before 10:20
    finals = sorted((r.window.start_ns, r.window.count) for r in pl.results if r.emit == FINAL)
    assert finals == [(at(hhmm), 1) for hhmm in ("09:59", "10:00", "10:01", "10:02", "10:03")]


def test_sessions_merge_across_batches_and_close_after_the_gap() -> None:
    pl = Pipeline(WindowsConfig(WindowSpec.session(30 * 10**9), watermark_delay_ns=0, idle_timeout_ms=10**9))
    base = at("10:00")
    pl.batch(("a", base, 0), ("a", base + 10 * 10**9, 0), ("b", base + 5 * 10**9, 0))
    pl.batch(("a", base + 35 * 10**9, 0))          # within 30s of the last: same session
    pl.batch(("a", base + 200 * 10**9, 0))         # a new session; closes the first ones
    finals = sorted((r.window.key, r.window.start_ns - base, r.window.end_ns - base, r.window.count)
                    for r in pl.results if r.emit == FINAL)
    assert finals == [("a", 0, 65 * 10**9, 3), ("b", 5 * 10**9, 35 * 10**9, 1)]


def test_a_late_event_bridging_into_an_open_session_is_accepted() -> None:
    pl = Pipeline(WindowsConfig(WindowSpec.session(30 * 10**9), watermark_delay_ns=0, idle_timeout_ms=10**9))
    base = at("10:00")
    pl.batch(("a", base + 100 * 10**9, 0))         # session [100, 130)
    pl.batch(("a", base + 90 * 10**9, 0))          # behind the watermark (100), but overlaps: accepted
    pl.batch(("a", base + 10 * 10**9, 0))          # [10, 40) closed already: late
    assert pl.late == [("a", 2)]
    (w,) = pl.state().windows.values()
    assert (w.start_ns - base, w.end_ns - base, w.count, w.late_accepted) == (90 * 10**9, 130 * 10**9, 2, 0)


def test_an_idle_partition_stops_holding_the_watermark_back() -> None:
    pl = Pipeline(WindowsConfig(WindowSpec.tumbling(MIN), watermark_delay_ns=0, idle_timeout_ms=30_000))
    pl.batch(("a", at("10:00"), 0), ("b", at("10:00"), 1), now_ms=1_000)
    pl.batch(("a", at("10:05"), 0), now_ms=2_000)       # partition 1 still holds it at 10:00
    assert pl.state().watermark_ns == at("10:00")
    pl.batch(("a", at("10:06"), 0), now_ms=40_000)      # partition 1 idle for 39s: ignored
    assert pl.state().watermark_ns == at("10:06")
    pl.batch(("b", at("10:01"), 1), now_ms=41_000)      # back with data: holds it again, never backwards
    assert pl.state().watermark_ns == at("10:06")


def test_a_quiet_stream_still_closes_its_windows_on_an_empty_step() -> None:
    pl = Pipeline(WindowsConfig(WindowSpec.tumbling(MIN), watermark_delay_ns=MIN, idle_timeout_ms=30_000))
    pl.batch(("a", at("10:00"), 0), ("a", at("10:03"), 0), now_ms=1_000)
    assert not [r for r in pl.results if r.window.start_ns == at("10:02")]
    pl.batch(now_ms=60_000)  # nothing arrives; the one partition is idle
    assert pl.state().watermark_ns == at("10:02")
    assert [r.window.start_ns for r in pl.results] == [at("10:00")]


# --- one device's clock far ahead -------------------------------------------------------

YEAR = 365 * 86_400 * 10**9


def test_one_event_a_year_ahead_is_a_bad_record_and_moves_nothing() -> None:
    pl = Pipeline(WindowsConfig(WindowSpec.tumbling(MIN), watermark_delay_ns=MIN, idle_timeout_ms=3_600_000))
    pl.batch(("a", at("10:00"), 0), ("a", at("10:01"), 0))
    wm = pl.state().watermark_ns
    # The till's clock says next year; its record was written now (Kafka timestamp 10:01).
    pl.batch(("x", at("10:01") + YEAR, 0, at("10:01")), ("x", 2**63 - 1, 0, at("10:01")),
             ("x", 2**63, 0, at("10:01")), ("x", at("10:01") + 3600 * 10**9, 0, at("10:01")))
    assert [off for off, _ in pl.bad] == [2, 3, 4, 5]
    assert "365d0h ahead of the record's Kafka timestamp" in pl.bad[0][1]
    assert pl.state().watermark_ns == wm and pl.state().clocks[0].max_event_ns == at("10:01")
    assert pl.results == [] and pl.late == []
    pl.batch(("a", at("10:02"), 0), ("a", at("10:03"), 0))  # real events go on, none late
    assert pl.late == []
    assert [(r.window.start_ns, r.window.count) for r in pl.results] == [(at("10:00"), 1), (at("10:01"), 1)]


def test_an_offline_till_flushing_old_orders_is_late_not_bad() -> None:
    pl = Pipeline(WindowsConfig(WindowSpec.tumbling(MIN), watermark_delay_ns=MIN, idle_timeout_ms=3_600_000))
    pl.batch(("a", at("13:00"), 0))
    pl.batch(("b", at("10:00"), 0, at("13:00")))  # three hours behind its record: judged by the watermark
    assert pl.bad == [] and pl.late == [("", 1)]


# Event times anywhere in 64 bits (and near the bound), Kafka timestamps anywhere or missing.
BOUND = 60 * 10**9
BASE = at("10:00")
event = st.tuples(
    st.sampled_from(["a", "b"]),
    st.one_of(st.integers(BASE - YEAR, BASE + YEAR), st.integers(0, 2**64 - 1),
              st.sampled_from([0, 2**63 - 1, 2**63, 2**64 - 1])),
    st.integers(0, 2),
    st.one_of(st.integers(BASE - 3600 * 10**9, BASE + 3600 * 10**9), st.sampled_from([None, -1, 0, 2**63 - 1]),
              st.just("near")),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(event, max_size=6), min_size=1, max_size=6), st.sampled_from([0, BOUND, 3600 * 10**9]),
       st.sampled_from([0, MIN]), st.sampled_from([1_000, 3_600_000]))
def test_the_watermark_never_moves_past_the_bound(batches: list[list[tuple]], bound: int, delay: int,
                                                  idle_ms: int) -> None:
    cfg = WindowsConfig(WindowSpec.tumbling(MIN), watermark_delay_ns=delay, idle_timeout_ms=idle_ms,
                        max_ahead_ns=bound)
    pl = Pipeline(cfg)
    newest: dict[int, int] = {}  # partition -> the latest usable Kafka timestamp it had
    for events in batches:
        feed = []
        for shop, t, p, ts in events:
            ts = t - bound + (t % 3) - 1 if ts == "near" else ts  # around the edge of the bound
            feed.append((shop, t, p, ts))
            if isinstance(ts, int) and 0 <= ts <= 4_102_444_800 * 10**9:
                newest[p] = max(newest.get(p, ts), ts // 1000 * 1000)  # the microseconds Spark keeps
        pl.batch(*feed, now_ms=pl.now_ms + 2_000)
        state = pl.state()
        for p, clock in state.clocks.items():
            assert clock.max_event_ns <= newest[p] + bound, (p, clock, newest)
        if state.watermark_ns is not None:
            assert state.watermark_ns <= max(newest.values()) + bound - delay
