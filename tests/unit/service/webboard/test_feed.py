"""What the board's page shows of the snapshots it reads (pure): the one of the highest
``seq``, whatever order the partitions are read in; any bytes parse or are skipped."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from service.webboard.feed import parse_snapshot, supersedes


def snapshot(seq: object) -> dict[str, Any]:
    parsed = parse_snapshot(orjson.dumps({"seq": seq, "ts": "2026-01-01T00:00:00Z", "processed_orders": 1,
                                          "top": [{"rank": 1, "drink": "latte", "count": 1}]}))
    assert parsed is not None
    return parsed


@given(st.lists(st.integers(0, 10**12), min_size=1, max_size=30))
def test_the_page_shows_the_snapshot_of_the_highest_seq_in_any_order(seqs: list[int]) -> None:
    shown: dict[str, Any] | None = None
    for seq in seqs:
        candidate = snapshot(seq)
        if supersedes(candidate, shown):
            shown = candidate
    assert shown is not None and shown["seq"] == max(seqs)


def test_a_snapshot_without_an_integer_seq_never_hides_one_with() -> None:
    assert supersedes(snapshot(3), snapshot("x")) and not supersedes(snapshot(None), snapshot(3))
    assert supersedes(snapshot(None), None) and supersedes(snapshot(None), snapshot(True))


@given(st.binary(max_size=300))
def test_any_bytes_are_a_snapshot_or_skipped(raw: bytes) -> None:
    parsed = parse_snapshot(raw)
    assert parsed is None or isinstance(parsed["top"], list)
