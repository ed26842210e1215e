import re
from datetime import UTC, datetime

import orjson
from hypothesis import given
from hypothesis import strategies as st

from restorer.codec import StoreState
from service.drink_count.topn import Ranked, board_text, counts_text, snapshot_record, top_n
from service.limits import printable


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


# Names are valid keys whatever they hold; a terminal must not take them for commands.
_HOSTILE = ["latte\n  1. forged  999999", "\x1b[2J\x1b[Hcleared", "mocha\r", "tea\u202eetal", "a\tb"]

_ESCAPE = re.compile(r"\\x([0-9a-f]{2})|\\u([0-9a-f]{4})|\\U([0-9a-f]{8})")


@given(st.text())
def test_printable_is_one_printable_line_that_reads_back_to_the_name(text: str) -> None:
    shown = printable(text)
    assert shown.isprintable()
    assert (shown == text) == text.isprintable()
    if "\\" not in text:  # a name with its own backslashes may read back ambiguously
        assert _ESCAPE.sub(lambda m: chr(int(next(g for g in m.groups() if g), 16)), shown) == text


def test_hostile_names_show_escaped_on_the_board_and_in_counts() -> None:
    now = datetime(2026, 11, 22, 10, 0, 5, tzinfo=UTC)
    ranked = top_n({name: i + 1 for i, name in enumerate(_HOSTILE)}, 10)
    text = board_text(now, 6, 10, ranked)
    assert len(text.splitlines()) == 1 + len(_HOSTILE)
    assert all(line.isprintable() for line in text.splitlines())
    assert "latte\\x0a  1. forged  999999" in text and "\\x1b[2J" in text and "tea\\u202eetal" in text
    state = StoreState(counts=dict.fromkeys(_HOSTILE, 1), meta={"processed_orders": 6})
    listing = counts_text(state)
    assert len(listing.splitlines()) == 1 + len(_HOSTILE)
    assert all(line.isprintable() for line in listing.splitlines())
