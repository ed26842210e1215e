import pytest

from restorer.codec import (
    RESERVED,
    changelog_partition_of,
    commit_key,
    decode_entries,
    decode_u64,
    encode_u64,
    is_local,
    meta_key,
    offset_key,
    position_key,
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
    assert counts.as_json() == {"counts": {"latte": 5}, "offsets": {"brew.orders.v1": {"0": 10, "12": 3}},
                                "tasks": {}}  # not built against a changelog yet: no task count


def test_unknown_reserved_key_is_an_error() -> None:
    with pytest.raises(ValueError):
        decode_entries([(RESERVED + b"something", encode_u64(1))])


def test_only_commit_markers_choose_their_partition_and_positions_stay_local() -> None:
    assert changelog_partition_of(commit_key(2)) == 2
    assert changelog_partition_of(drink_key("latte")) is None
    assert is_local(position_key(0))
    assert not is_local(commit_key(0))
