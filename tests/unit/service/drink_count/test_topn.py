from datetime import UTC, datetime

import orjson

from service.drink_count.topn import Ranked, board_text, snapshot_record, top_n


def test_count_descending_then_name_ascending() -> None:
    counts = {"mocha": 5, "latte": 9, "americano": 5, "espresso": 1}
    assert top_n(counts, 3) == [Ranked(1, "latte", 9), Ranked(2, "americano", 5), Ranked(3, "mocha", 5)]


def test_n_larger_than_drinks_and_empty() -> None:
    assert [r.drink for r in top_n({"a": 1, "b": 2}, 10)] == ["b", "a"]
    assert top_n({}, 10) == []


def test_board_text_has_the_seed_header_and_rows() -> None:
    now = datetime(2026, 11, 22, 10, 0, 5, tzinfo=UTC)
    text = board_text(now, 1234, 10, [Ranked(1, "latte", 310), Ranked(2, "mocha", 7)])
    first, *rows = text.splitlines()
    assert first.endswith("processed=1234 top-10:")
    assert first.startswith("[") and first[9] == "]"
    assert rows[0].split() == ["1.", "latte", "310"]
    assert "no drinks" in board_text(now, 0, 10, [])


def test_snapshot_format() -> None:
    now = datetime(2026, 11, 22, 10, 0, 5, tzinfo=UTC)
    doc = orjson.loads(snapshot_record(17, now, 1234, [Ranked(1, "latte", 310)]))
    assert doc == {"seq": 17, "ts": "2026-11-22T10:00:05Z", "processed_orders": 1234,
                   "top": [{"rank": 1, "drink": "latte", "count": 310}]}


def test_a_snapshot_too_big_for_a_record_is_cut_from_the_bottom() -> None:
    from datetime import UTC, datetime

    import orjson

    from service.drink_count.topn import snapshot_record, top_n

    counts = {f"{'d' * 200}{i:04d}": 1000 - i for i in range(500)}
    ranked = top_n(counts, 500)
    full = snapshot_record(1, datetime(2026, 1, 1, tzinfo=UTC), 5, ranked)
    cut = snapshot_record(1, datetime(2026, 1, 1, tzinfo=UTC), 5, ranked, max_bytes=len(full) // 3)
    assert len(cut) <= len(full) // 3
    rows = orjson.loads(cut)["top"]
    assert 0 < len(rows) < 500 and [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
