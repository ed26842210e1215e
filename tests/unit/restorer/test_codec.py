import pytest
from hypothesis import given
from hypothesis import strategies as st

from restorer.codec import (
    RESERVED,
    Entry,
    changelog_partition_of,
    commit_key,
    decode_entries,
    decode_u64,
    encode_u64,
    is_local,
    is_offset_key,
    meta_key,
    offset_key,
    position_key,
    spread_offsets,
    task_offset_key,
    task_part_key,
    tasked_key,
)
from service.drink_count.counts import PROCESSED_ORDERS, drink_counts, drink_key


def test_count_encoding_is_eight_byte_big_endian() -> None:
    assert encode_u64(1) == b"\x00" * 7 + b"\x01"
    assert encode_u64(2**64 - 1) == bytes([255] * 8)
    assert decode_u64(encode_u64(123456789)) == 123456789
    with pytest.raises(ValueError):
        decode_u64(b"\x01")
    with pytest.raises(OverflowError):
        encode_u64(-1)


def test_reserved_keys_can_never_be_drink_names() -> None:
    for key in (offset_key("brew.orders.v1", 2), meta_key("x"), commit_key(1), position_key(0)):
        with pytest.raises(UnicodeDecodeError):
            key.decode("utf-8")
    # while any drink name, however odd, is valid UTF-8
    assert drink_key("\u00ff\x00\U0001f375").decode("utf-8") == "\u00ff\x00\U0001f375"


def test_decode_entries_sorts_keys_into_their_kinds() -> None:
    state = decode_entries([
        (drink_key("latte"), encode_u64(5)),
        (offset_key("brew.orders.v1", 0), encode_u64(10)),
        (offset_key("brew.orders.v1", 12), encode_u64(3)),
        (meta_key(PROCESSED_ORDERS), encode_u64(4)),
        (commit_key(2), encode_u64(9)),
        (position_key(1), encode_u64(77)),
    ])
    counts = drink_counts(state)
    assert counts.counts == {"latte": 5}
    assert state.next_offsets("brew.orders.v1") == {0: 10, 12: 3}
    assert counts.processed_orders == 4
    assert state.commits == {2: 9}
    assert state.positions == {1: 77}
    assert decode_entries([(tasked_key(1), encode_u64(1)), (tasked_key(4), encode_u64(1))]).tasked == {1, 4}
    assert counts.as_json() == {"counts": {"latte": 5}, "offsets": {"brew.orders.v1": {"0": 10, "12": 3}},
                                "tasks": {}}  # not built against a changelog yet: no task count


def test_unknown_reserved_key_is_an_error() -> None:
    with pytest.raises(ValueError):
        decode_entries([(RESERVED + b"something", encode_u64(1))])


def test_only_commit_markers_choose_their_partition_and_positions_stay_local() -> None:
    assert changelog_partition_of(commit_key(2)) == 2
    assert changelog_partition_of(tasked_key(3)) == 3 and not is_local(tasked_key(3))
    assert changelog_partition_of(drink_key("latte")) is None
    assert is_local(position_key(0))
    assert not is_local(commit_key(0))


TOPICS = st.sampled_from(["brew.orders.v1", "brew.menu.v1", "x"])
OFFSETS = st.dictionaries(st.tuples(TOPICS, st.integers(0, 40)), st.integers(0, 2**63), max_size=12)


def apply(log: list[Entry]) -> dict[bytes, bytes]:
    """What a compacted changelog (or a store) holds after ``log``: the last value per key."""
    held: dict[bytes, bytes] = {}
    for key, value in log:
        if value is None:
            held.pop(key, None)
        else:
            held[key] = value
    return held


@given(offsets=OFFSETS, tasks=st.integers(1, 8), counts=st.dictionaries(st.text(max_size=5), st.integers(0, 99)))
def test_each_task_holds_the_batchs_input_offsets_in_its_own_partition(
        offsets: dict[tuple[str, int], int], tasks: int, counts: dict[str, int]) -> None:
    batch: list[Entry] = [(drink_key(d), encode_u64(n)) for d, n in counts.items()]
    batch += [(offset_key(t, p), encode_u64(o)) for (t, p), o in offsets.items()]
    spread = spread_offsets(batch, range(tasks))
    expected: dict[str, dict[int, int]] = {t: {} for t, _ in offsets}
    for (t, p), o in offsets.items():
        expected[t][p] = o
    # the pipeline's own entries pass as they were, in order; no store-wide offset is left
    assert [e for e in spread if not e[0].startswith(RESERVED)] == batch[:len(counts)]
    assert not any(is_offset_key(k) for k, _ in spread)
    assert len(spread) == len(counts) + tasks * len(offsets)
    for task in range(tasks):
        # the task's changelog partition alone tells its input offsets
        own = [(k, v) for k, v in spread if changelog_partition_of(k) == task]
        state = decode_entries((k, v) for k, v in own if v is not None)
        assert state.task_offsets.get(task, {}) == expected
        assert state.offsets == expected
    assert decode_entries((k, v) for k, v in spread if v is not None).offsets == expected


@given(earlier=OFFSETS, later=OFFSETS, tasks=st.integers(1, 5))
def test_an_earlier_brewstreams_store_wide_offsets_are_moved_to_the_tasks(
        earlier: dict[tuple[str, int], int], later: dict[tuple[str, int], int], tasks: int) -> None:
    """A store of the earlier layout, then a batch moving some partitions: those move to
    the tasks (their store-wide keys deleted), the others still read from the old keys."""
    old: list[Entry] = [(offset_key(t, p), encode_u64(o)) for (t, p), o in earlier.items()]
    held = apply(old)
    batch: list[Entry] = [(offset_key(t, p), encode_u64(o)) for (t, p), o in later.items()]
    after = apply(old + spread_offsets(batch, range(tasks), legacy=set(held)))
    oracle = {**earlier, **later}
    view = decode_entries(after.items()).offsets
    assert {(t, p): o for t, ps in view.items() for p, o in ps.items()} == oracle
    assert {k for k in after if k in held} == {offset_key(t, p) for t, p in earlier if (t, p) not in later}


def test_a_task_offset_key_names_its_task_s_partition() -> None:
    assert changelog_partition_of(task_offset_key("brew.orders.v1", 7, 2)) == 2
    assert changelog_partition_of(offset_key("brew.orders.v1", 7)) is None  # left to the partitioner
    state = decode_entries([(task_offset_key("o", 1, 0), encode_u64(9)), (task_offset_key("o", 1, 1), encode_u64(5))])
    assert state.offsets == {"o": {1: 5}}  # the least any task has applied
    assert state.task_offsets == {0: {"o": {1: 9}}, 1: {"o": {1: 5}}}


@given(cursors=st.dictionaries(st.tuples(TOPICS, st.integers(0, 40), st.integers(0, 7)),
                               st.tuples(st.integers(0, 2**63), st.integers(0, 2**32)), max_size=10))
def test_a_tasks_shuffle_cursor_lives_in_its_own_partition_and_reads_back(
        cursors: dict[tuple[str, int, int], tuple[int, int]]) -> None:
    """A cursor (``restorer.shuffle``) is the task's input offset and its part index: both
    go to the task's changelog partition and decode to what was written."""
    entries = [e for (topic, p, task), (offset, part) in cursors.items()
               for e in ((task_offset_key(topic, p, task), encode_u64(offset)),
                         (task_part_key(topic, p, task), encode_u64(part)))]
    assert all(changelog_partition_of(k) == int(k.rpartition(b"\x00")[2]) for k, _ in entries)
    state = decode_entries((k, v) for k, v in entries if v is not None)
    for (topic, p, task), (offset, part) in cursors.items():
        assert state.task_offsets[task][topic][p] == offset
        assert state.task_parts[task][topic][p] == part
    assert sum(len(ps) for ts in state.task_parts.values() for ps in ts.values()) == len(cursors)
