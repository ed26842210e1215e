"""A task's records of the repartition topic read as parts (pure): whatever bytes its
partition holds, the read gives the parts written there, in order, and passes by each
record that is none (another producer's), naming its offset."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from restorer.repartition import Stray, parts_of
from restorer.shuffle import Part, decode_part, encode_part


def test_the_records_read_as_the_parts_written() -> None:
    written = [Part(0, 0, 5, 0, 2, ((b"latte", b"\x00" * 8),)), Part(0, 0, 5, 1, 2), Part(2, 9, 11, 0, 1)]
    assert parts_of([(10 + i, encode_part(p)) for i, p in enumerate(written)]) == (written, [])


def test_a_record_no_input_stage_wrote_is_passed_by_and_named() -> None:
    part = Part(0, 0, 1, 0, 1)
    parts, strays = parts_of([(6, encode_part(part)), (7, b'{"drink": "latte"}'), (8, None)])  # 8: a tombstone
    assert parts == [part]
    assert [s.offset for s in strays] == [7, 8] and all(isinstance(s, Stray) and s.why for s in strays)


@given(st.lists(st.one_of(st.none(), st.binary(max_size=60),
                          st.builds(lambda n: encode_part(Part(n, 0, 1, 0, 1)), st.integers(0, 9))), max_size=8))
def test_any_records_split_into_the_parts_and_the_strays(values: list[bytes | None]) -> None:
    records = list(enumerate(values))
    parts, strays = parts_of(records)
    oracle_parts, oracle_strays = [], []
    for offset, value in records:
        try:
            oracle_parts.append(decode_part(value or b""))
        except ValueError:
            oracle_strays.append(offset)
    assert parts == oracle_parts and [s.offset for s in strays] == oracle_strays
