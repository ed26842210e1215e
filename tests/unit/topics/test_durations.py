import pytest

from topics.clock import format_duration, parse_duration


@pytest.mark.parametrize(("text", "seconds"), [
    ("50ms", 0.05), ("1s", 1.0), ("5m", 300.0), ("1h", 3600.0), ("1m30s", 90.0), ("0", 0.0), ("1.5s", 1.5),
    ("1d", 86_400.0),
])
def test_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "s", "1w", "1s5", "-1s", "1 s x"])
def test_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_format_round_trips() -> None:
    for text in ("50ms", "1s", "5m", "1h", "90s"):
        assert parse_duration(format_duration(parse_duration(text))) == parse_duration(text)
