"""The lease decisions (pure): whose lease stands, and when a holder was taken over."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.instance.lease import (
    FREE,
    HELD,
    LAPSED,
    RELEASED,
    WATCHING_INTERVAL_S,
    Announcement,
    Seen,
    announcement_interval,
    current_holder,
    lease_state,
    next_generation,
    overtaken,
    proven_since,
)

ROLES = ("starting", "restoring", "active", "standby", "fenced", "stopped")


def seen(offset: int, broker_ms: int, role: str = "active", token: str = "t", generation: int = 0) -> Seen:
    what = Announcement("i", "h", 1, "/s", "brew.drink-count-changelog", role, True, 0, 250, token, generation)
    return Seen(what, offset, broker_ms)


def test_a_holder_is_held_until_silent_for_the_timeout_by_our_own_clock() -> None:
    holder = seen(10, 1_000)
    assert lease_state(None, [seen(5, 0)], 1.5) == FREE
    assert lease_state(holder, [], 1.5) == HELD
    ours = [seen(9, 900), seen(11, 1_100), seen(12, 1_350)]
    assert lease_state(holder, [*ours, seen(13, 2_500)], 1.5) == HELD  # 1.4 s of ours since the holder's last
    assert lease_state(holder, [*ours, seen(13, 2_600)], 1.5) == LAPSED
    # Our own announcements from before the holder's say nothing about its silence.
    assert lease_state(holder, [seen(8, 1_000), seen(9, 99_000)], 1.5) == HELD
    assert lease_state(seen(10, 1_000, "stopped"), [], 1.5) == RELEASED


def test_an_outage_of_the_instances_partition_is_nobody_s_silence() -> None:
    """Nobody could announce for a minute (the partition's leader died). Our first
    announcement through afterwards is a minute after the holder's last one, yet the holder
    is silent only once ours went on for the timeout without one of its own."""
    holder = seen(10, 1_000)
    assert lease_state(holder, [seen(9, 900), seen(11, 61_000)], 1.5) == HELD
    assert lease_state(holder, [seen(11, 61_000), seen(12, 61_250), seen(13, 62_400)], 1.5) == HELD
    # The holder came back too: silent no more, however long ours have gone through.
    back = seen(12, 61_100)
    assert lease_state(back, [seen(11, 61_000), seen(13, 61_250), seen(14, 62_400)], 1.5) == HELD
    # It did not: the full timeout of ours after its last one.
    assert lease_state(holder, [seen(11, 61_000), seen(12, 61_250), seen(13, 62_500)], 1.5) == LAPSED


def test_a_holder_is_overtaken_only_by_a_later_generation() -> None:
    # A takeover raised the generation: the holder of generation 3 is overtaken.
    assert overtaken(True, 3, 10, seen(21, 5_100, token="b", generation=4))
    # A woken holder of an older generation announcing later takes nothing.
    assert not overtaken(True, 4, 10, seen(99, 9_000, token="a", generation=3))
    assert not overtaken(False, 3, 10, seen(21, 5_100, token="b", generation=4))
    assert not overtaken(True, 3, 10, seen(21, 5_100, "fenced", token="b", generation=4))


def test_of_two_claims_of_one_generation_the_earlier_in_the_partition_stands() -> None:
    """Two instances found the lease free at once and both claimed generation 4."""
    first, second = 20, 21
    # The first claimer's later announcements still date its claim at offset 20.
    theirs = Seen(seen(90, 9_000, token="a", generation=4).what, 90, 9_000, claimed_at=first)
    assert overtaken(True, 4, second, theirs)
    assert not overtaken(True, 4, first, seen(second, 5_000, token="b", generation=4))
    # Before our own claim is read back, a claim of our generation already read is earlier.
    assert overtaken(True, 4, None, seen(second, 5_000, token="b", generation=4))
    assert current_holder([seen(second, 5_000, token="b", generation=4), theirs]) == theirs


@settings(max_examples=300, deadline=None)
@given(claims=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 3)), min_size=1, max_size=8),
       order=st.randoms(use_true_random=False))
def test_the_holder_is_the_latest_generation_first_claimed_in_any_order_of_arrival(
        claims: list[tuple[int, int]], order: object) -> None:
    """Processes claim generations; each is then seen by its latest announcement, which
    dates its claim. However late a paused holder's announcements arrive, the holder
    everyone sees is of the latest generation, of its claims the earliest in the partition;
    every other holder is overtaken by it, it by nobody; a takeover's generation is above
    every one seen."""
    import random as _random

    assert isinstance(order, _random.Random)
    at = list(range(len(claims)))
    order.shuffle(at)  # the claims' offsets: the partition's order, not the processes'
    latest = [Seen(seen(100 + i, 0, token=f"p{i}", generation=g).what, 100 + i + later, 0, claimed_at=at[i])
              for i, (g, later) in enumerate(claims)]
    holder = current_holder(latest)
    assert holder is not None
    top = max(g for g, _ in claims)
    first = min(at[i] for i, (g, _) in enumerate(claims) if g == top)
    assert (holder.what.generation, holder.claim) == (top, first)
    assert next_generation(latest) == top + 1
    for i, (g, _) in enumerate(claims):
        assert overtaken(True, g, at[i], holder) == ((g, -at[i]) < (top, -first))


@settings(max_examples=400, deadline=None)
@given(holder_off=st.integers(0, 100), holder_ms=st.integers(0, 10_000), role=st.sampled_from(ROLES),
       ours=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2_000)), max_size=12),
       timeout=st.floats(0.1, 5.0))
def test_lapse_needs_the_full_timeout_of_our_own_announcements_after_the_holder_s_last(
        holder_off: int, holder_ms: int, role: str, ours: list[tuple[int, int]], timeout: float) -> None:
    """Our announcements in order, around the holder's: offsets and broker times only grow
    (the instances topic stamps records with the broker's time as it appends them)."""
    own, off, ms = [], holder_off - 5, holder_ms - 3_000
    for step_off, step_ms in ours:
        off, ms = off + step_off + 1, ms + step_ms
        own.append(seen(off, max(ms, holder_ms) if off > holder_off else min(ms, holder_ms)))
    holder = seen(holder_off, holder_ms, role)
    state = lease_state(holder, own, timeout)
    after = [o.broker_ms for o in own if o.offset > holder_off]
    if role in ("stopped", "fenced"):
        assert state == RELEASED
    elif after and after[-1] - after[0] >= timeout * 1000:
        assert state == LAPSED
        assert after[-1] - holder_ms >= timeout * 1000  # never sooner than the old rule
    else:
        assert state == HELD
    # More of our own time never brings a lapsed lease back.
    if state == LAPSED:
        assert lease_state(holder, [*own, seen(off + 1, own[-1].broker_ms + 1)], timeout) == LAPSED


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=300))
def test_any_bytes_decode_to_an_announcement_or_none(raw: bytes) -> None:
    what = Announcement.decode(raw)
    assert what is None or isinstance(what, Announcement)


@pytest.mark.parametrize("opener", [b"[", b'{"a":'])
def test_an_announcement_with_a_field_nested_past_the_decoders_depth_is_none(opener: bytes) -> None:
    closer = b"]" if opener == b"[" else b"}"
    deep = opener * 200_000 + b"1" + closer * 200_000
    for raw in (deep, b'{"instance":"a","junk":' + deep + b"}"):
        assert Announcement.decode(raw) is None


JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                    max_leaves=6)
FIELD_TYPES = {"instance": str, "host": str, "pid": int, "state_dir": str, "changelog": str, "role": str,
               "holds_lease": bool, "seq": int, "interval_ms": int, "token": str, "generation": int}


@settings(max_examples=400, deadline=None)
@given(fields=st.dictionaries(st.sampled_from(sorted(FIELD_TYPES)), JSON), extra=st.dictionaries(st.text(), JSON))
def test_an_announcement_with_any_json_in_any_field_is_typed_or_none(fields: dict[str, object],
                                                                        extra: dict[str, object]) -> None:
    """Whatever JSON anyone wrote to the instances topic, an announcement that decodes has
    every field of its type, so the decisions over it never raise."""
    import orjson

    base = {"instance": "i", "host": "h", "pid": 1, "state_dir": "/s", "changelog": "c"}
    doc = {**extra, **base, **fields}
    try:
        raw = orjson.dumps(doc)
    except orjson.JSONEncodeError:  # an integer beyond 64 bits: not JSON orjson writes
        return
    what = Announcement.decode(raw)
    typed = all(k not in doc or (type(doc[k]) is t) for k, t in FIELD_TYPES.items())
    assert (what is not None) == typed
    if what is not None:
        holder = Seen(what, 5, 0)
        overtaken(True, 1, 3, holder)
        assert current_holder([holder, seen(4, 0)]) is not None
        assert next_generation([holder]) == what.generation + 1


def test_an_announcement_round_trips() -> None:
    a = Announcement("x", "h", 7, "/s", "c", "standby", False, 3, 250, "tok", 5)
    assert Announcement.decode(a.encode()) == a


@pytest.mark.parametrize("role", ROLES)
@given(interval=st.floats(0.001, 10), holding=st.booleans(), holder_seen=st.booleans())
def test_only_a_standby_watching_a_live_holder_announces_faster(role: str, interval: float, holding: bool,
                                                                 holder_seen: bool) -> None:
    holder = seen(10, 1_000, role) if holder_seen else None
    got = announcement_interval(interval, holding, holder)
    watching = not holding and holder_seen and role not in ("fenced", "stopped")
    assert got == (min(interval, WATCHING_INTERVAL_S) if watching else interval)
    assert 0 < got <= interval


@given(st.lists(st.tuples(st.integers(0, 100), st.floats(0, 100)), max_size=20), st.none() | st.integers(0, 100),
       st.floats(0, 100))
def test_a_proof_since_a_moment_needs_an_announcement_sent_after_it_and_read_back(
        sent: list[tuple[int, float]], read_through: int | None, since: float) -> None:
    """Every claim made before ``since`` lies before such an announcement in the partition:
    read back, it proves the watcher read the claim too."""
    proven = proven_since(sent, read_through, since)
    assert proven == any(t > since and read_through is not None and offset <= read_through for offset, t in sent)
    assert not proven_since(sent, None, since)
    assert not proven_since([(o, t) for o, t in sent if t <= since], read_through, since)
