"""A task's records of the repartition topic read as parts, or stop it (pure): whatever
bytes its partition holds, the read gives the parts written there, or ``ShuffleBroken``
naming the first record that is none."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from restorer.repartition import parts_of
from restorer.shuffle import Part, ShuffleBroken, decode_part, encode_part


def test_the_records_read_as_the_parts_written() -> None:
    written = [Part(0, 0, 5, 0, 2, ((b"latte", b"\x00" * 8),)), Part(0, 0, 5, 1, 2), Part(2, 9, 11, 0, 1)]
    assert parts_of([(10 + i, encode_part(p)) for i, p in enumerate(written)]) == written


def test_a_record_no_input_stage_wrote_stops_the_task() -> None:
    with pytest.raises(ShuffleBroken, match="offset 7 is no part"):
        parts_of([(6, encode_part(Part(0, 0, 1, 0, 1))), (7, b'{"drink": "latte"}')])
    with pytest.raises(ShuffleBroken, match="offset 3 is no part"):
        parts_of([(3, None)])  # a tombstone


@given(st.lists(st.one_of(st.none(), st.binary(max_size=60)), max_size=6))
def test_any_records_read_as_parts_or_name_the_first_that_is_none(values: list[bytes | None]) -> None:
    records = list(enumerate(values))
    try:
        got = parts_of(records)
    except ShuffleBroken as exc:
        bad = []
        for offset, value in records:
            try:
                decode_part(value or b"")
            except ValueError:
                bad.append(offset)
        assert bad and f"offset {bad[0]} is no part" in str(exc)
        return
    assert [encode_part(p) for p in got] == [v or b"" for v in values]
