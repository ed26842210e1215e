"""Names are data: whatever a valid name holds, a terminal shows it as one printable line."""

from datetime import UTC, datetime
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from restorer.codec import StoreState
from service.drink_count.counts import DrinkCounts
from service.drink_count.topn import board_text, counts_text, top_n
from service.instance.lease import Announcement
from service.ops.status import InstanceView, Status, status_text
from service.records.limits import fitted, printable, unprintable

# Names are valid keys whatever they hold; a terminal must not take them for commands.
_HOSTILE = ["latte\n  1. forged  999999", "\x1b[2J\x1b[Hcleared", "mocha\r", "tea\u202eetal", "a\tb"]


@given(st.text())
def test_printable_is_one_printable_line_that_reads_back_to_the_name(text: str) -> None:
    shown = printable(text)
    assert shown.isprintable()
    assert (shown == text) == (text.isprintable() and "\\" not in text)
    assert unprintable(shown) == text  # unambiguous: a backslash of the name's own is doubled


def test_a_control_character_and_its_spelling_look_different() -> None:
    assert printable("latte\nmocha") != printable("latte\\x0amocha")
    assert printable("latte\nmocha") == "latte\\x0amocha" and printable("latte\\x0amocha") == "latte\\\\x0amocha"


@given(st.text(), st.integers(1, 120))
def test_a_fitted_name_fits_and_shows_a_prefix_of_the_name(text: str, width: int) -> None:
    from rich.cells import cell_len

    shown = fitted(text, width)
    if cell_len(printable(text)) <= width:
        assert shown == printable(text)
        return
    assert shown.endswith("…") and cell_len(shown) <= width
    assert text.startswith(unprintable(shown[:-1]))


def test_hostile_names_show_escaped_on_the_board_and_in_counts() -> None:
    now = datetime(2026, 11, 22, 10, 0, 5, tzinfo=UTC)
    ranked = top_n({name: i + 1 for i, name in enumerate(_HOSTILE)}, 10)
    text = board_text(now, 6, 10, ranked)
    assert len(text.splitlines()) == 1 + len(_HOSTILE)
    assert all(line.isprintable() for line in text.splitlines())
    assert "latte\\x0a  1. forged  999999" in text and "\\x1b[2J" in text and "tea\\u202eetal" in text
    wide = board_text(now, 6, 10, top_n({"x" * 256: 1, "latte": 2}, 10), columns=60)
    assert max(len(line) for line in wide.splitlines()) <= 60 and "…" in wide
    state = DrinkCounts(dict.fromkeys(_HOSTILE, 1), StoreState(meta={"processed_orders": 6}))
    listing = counts_text(state)
    assert len(listing.splitlines()) == 1 + len(_HOSTILE)
    assert all(line.isprintable() for line in listing.splitlines())


def test_status_shows_announced_names_escaped() -> None:
    hostile = Announcement("a\n  forged line", "host\x1b[2J", 1, "/srv/state\r", "changelog", role="active\x07")
    text = status_text(Status(Path("/s"), "orders", [], None, 0, [InstanceView(hostile, 1.0)]), now=0.0)
    lines = text.splitlines()
    assert len(lines) == 4 and all(line.isprintable() for line in lines)
    assert "instance a\\x0a  forged line: active\\x07" in lines[-1] and "host\\x1b[2J" in lines[-1]
