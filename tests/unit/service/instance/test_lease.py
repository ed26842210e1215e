"""The lease decisions (pure): whose lease stands, and when a holder was taken over."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from service.instance.lease import (
    FREE,
    HELD,
    LAPSED,
    RELEASED,
    Announcement,
    Seen,
    current_holder,
    lease_state,
    next_generation,
    overtaken,
)

ROLES = ("starting", "restoring", "active", "standby", "fenced", "stopped")


def seen(offset: int, broker_ms: int, role: str = "active", token: str = "t", generation: int = 0) -> Seen:
    what = Announcement("i", "h", 1, "/s", "brew.drink-count-changelog", role, True, 0, 250, token, generation)
    return Seen(what, offset, broker_ms)


def test_a_holder_is_held_until_silent_for_the_timeout_by_our_own_clock() -> None:
    holder = seen(10, 1_000)
    assert lease_state(None, seen(5, 0), 1.5) == FREE
    assert lease_state(holder, None, 1.5) == HELD
    assert lease_state(holder, seen(11, 2_400), 1.5) == HELD
    assert lease_state(holder, seen(12, 2_500), 1.5) == LAPSED
    # Our own announcement from before the holder's says nothing about its silence.
    assert lease_state(holder, seen(9, 99_000), 1.5) == HELD
    assert lease_state(seen(10, 1_000, "stopped"), None, 1.5) == RELEASED


def test_a_holder_is_overtaken_only_by_a_later_generation() -> None:
    # A takeover raised the generation: the holder of generation 3 is overtaken.
    assert overtaken(True, 3, "a", seen(21, 5_100, token="b", generation=4))
    # A woken holder of an older generation announcing later takes nothing.
    assert not overtaken(True, 4, "b", seen(99, 9_000, token="a", generation=3))
    assert not overtaken(False, 3, "a", seen(21, 5_100, token="b", generation=4))
    assert not overtaken(True, 3, "a", seen(21, 5_100, "fenced", token="b", generation=4))
    # Two takeovers at once: the greater token wins, and only one of the two yields.
    assert overtaken(True, 4, "a", seen(21, 5_100, token="b", generation=4))
    assert not overtaken(True, 4, "b", seen(20, 5_000, token="a", generation=4))


@settings(max_examples=300, deadline=None)
@given(gens=st.lists(st.tuples(st.integers(0, 6), st.sampled_from("abc")), min_size=1, max_size=8),
       order=st.randoms(use_true_random=False))
def test_the_holder_is_the_latest_generation_in_any_order_of_arrival(
        gens: list[tuple[int, str]], order: object) -> None:
    """However late a paused holder's announcements arrive, the holder everyone sees is the
    one of the latest generation; a takeover's generation is above every one seen."""
    import random as _random

    announced = [seen(i, i * 100, token=tok, generation=g) for i, (g, tok) in enumerate(gens)]
    shuffled = list(announced)
    assert isinstance(order, _random.Random)
    order.shuffle(shuffled)
    arrived = [Seen(s.what, i, i * 100) for i, s in enumerate(shuffled)]  # offsets in arrival order
    holder = current_holder(arrived)
    assert holder is not None
    best = max((g, tok) for g, tok in gens)
    assert (holder.what.generation, holder.what.token) == best
    assert next_generation(arrived) == best[0] + 1
    # Exactly the holders below the best are overtaken by it; the best by nobody.
    for g, tok in gens:
        assert overtaken(True, g, tok, holder) == ((g, tok) < best)


@settings(max_examples=400, deadline=None)
@given(holder_off=st.integers(0, 100), holder_ms=st.integers(0, 10_000), role=st.sampled_from(ROLES),
       own_off=st.integers(0, 100), gap_ms=st.integers(-5_000, 10_000), timeout=st.floats(0.1, 5.0))
def test_lapse_needs_our_own_later_announcement_and_the_full_timeout(
        holder_off: int, holder_ms: int, role: str, own_off: int, gap_ms: int, timeout: float) -> None:
    holder, own = seen(holder_off, holder_ms, role), seen(own_off, holder_ms + gap_ms)
    state = lease_state(holder, own, timeout)
    if role in ("stopped", "fenced"):
        assert state == RELEASED
    elif own_off > holder_off and gap_ms >= timeout * 1000:
        assert state == LAPSED
    else:
        assert state == HELD
    # More of our own time never brings a lapsed lease back.
    if state == LAPSED:
        assert lease_state(holder, seen(own_off + 1, holder_ms + gap_ms + 1), timeout) == LAPSED


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=300))
def test_any_bytes_decode_to_an_announcement_or_none(raw: bytes) -> None:
    what = Announcement.decode(raw)
    assert what is None or isinstance(what, Announcement)


def test_an_announcement_round_trips() -> None:
    a = Announcement("x", "h", 7, "/s", "c", "standby", False, 3, 250, "tok", 5)
    assert Announcement.decode(a.encode()) == a
