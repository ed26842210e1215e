"""``CarryRows``' blob, read back (pure): the layout in CarryRows.java, written here by an
independent encoder, reads back as the rows it holds; anything else is a ValueError."""

from __future__ import annotations

import contextlib
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.spark.carried import COLUMNS, read_carried_rows

opt_bytes = st.one_of(st.none(), st.binary(max_size=40))
headers = st.one_of(st.none(), st.lists(st.fixed_dictionaries({"key": st.one_of(st.none(), st.text(max_size=8)),
                                                                 "value": opt_bytes}), max_size=3))
rows = st.lists(st.fixed_dictionaries({
    "key": opt_bytes, "value": opt_bytes, "partition": st.integers(0, 2**31 - 1),
    "offset": st.integers(0, 2**63 - 1), "ts_us": st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
    "headers": headers}), max_size=12)


def blob_of(items: list[dict[str, Any]], overflow: bool = False) -> bytes:
    def opt(b: bytes | None) -> bytes:
        return struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + b

    out = struct.pack(">bi", 1 if overflow else 0, 0 if overflow else len(items))
    for r in [] if overflow else items:
        out += struct.pack(">iq", r["partition"], r["offset"])
        out += b"\x00" if r["ts_us"] is None else b"\x01" + struct.pack(">q", r["ts_us"])
        out += opt(r["key"]) + opt(r["value"])
        hs = r["headers"]
        out += struct.pack(">i", -1 if hs is None else len(hs))
        for h in hs or []:
            out += opt(None if h["key"] is None else h["key"].encode()) + opt(h["value"])
    return out


@given(rows)
def test_the_rows_read_back_as_written(items: list[dict[str, Any]]) -> None:
    assert read_carried_rows(blob_of(items)) == {name: [r[name] for r in items] for name in COLUMNS}


@given(rows)
def test_an_overflow_holds_no_rows(items: list[dict[str, Any]]) -> None:
    assert read_carried_rows(blob_of(items, overflow=True)) is None


@given(rows, st.data())
def test_a_cut_or_padded_blob_is_refused(items: list[dict[str, Any]], data: st.DataObject) -> None:
    blob = blob_of(items)
    cut = data.draw(st.integers(0, len(blob) - 1))
    for damaged in (blob[:cut], blob + b"\x00"):
        with pytest.raises(ValueError):
            read_carried_rows(damaged)


@given(st.binary(max_size=200))
def test_any_bytes_read_back_or_are_refused(blob: bytes) -> None:
    with contextlib.suppress(ValueError):  # UnicodeDecodeError is one
        read_carried_rows(blob)
