"""Whether a topic deletes records by itself: the changelog and the replay ledger must not."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topics.retention import deletes_records, keep_records_fix


@pytest.mark.parametrize(("config", "says"), [
    ({"cleanup.policy": "compact", "retention.ms": "604800000"}, None),  # retention applies only with delete
    ({"cleanup.policy": "compact,delete", "retention.ms": "-1", "retention.bytes": "-1"}, None),
    ({"cleanup.policy": " delete , compact ", "retention.ms": "-1"}, None),
    ({}, "is not compacted (cleanup.policy=delete)"),  # Kafka's default policy
    ({"cleanup.policy": "delete", "retention.ms": "-1"}, "is not compacted (cleanup.policy=delete)"),
    ({"cleanup.policy": "compact,delete"}, "also deletes by retention (cleanup.policy=compact,delete, "
                                           "retention.ms=604800000;"),
    ({"cleanup.policy": "compact,delete", "retention.ms": "-1", "retention.bytes": "1073741824"},
     "(cleanup.policy=compact,delete, retention.bytes=1073741824;"),
    ({"cleanup.policy": "compact,delete", "retention.ms": "0", "retention.bytes": "0"},
     "retention.ms=0, retention.bytes=0"),
    ({"cleanup.policy": "compact,delete", "retention.ms": "soon", "retention.bytes": "-1"}, None),
])
def test_a_topic_that_can_delete_records_is_named(config: dict[str, str], says: str | None) -> None:
    how = deletes_records(config)
    if says is None:
        assert how is None
    else:
        assert how is not None and says in how


def test_the_fix_names_the_topic_and_the_setting() -> None:
    fix = keep_records_fix("brew.x")
    assert "--entity-name brew.x" in fix and "cleanup.policy=compact" in fix


_VALUE = st.one_of(st.text(max_size=12), st.integers(min_value=-5, max_value=10**12).map(str),
                   st.sampled_from(["--5", "+7", " 3 ", "1_000", "\u0661", "-0", "0x10"]))


@given(st.dictionaries(st.sampled_from(["cleanup.policy", "retention.ms", "retention.bytes", "segment.ms"]),
                       _VALUE), st.sampled_from(["compact", "delete", "compact,delete", "delete,compact", ""]))
def test_the_retention_check_is_total_and_agrees_with_its_oracle(config: dict[str, str], policy: str) -> None:
    config = {**config, "cleanup.policy": config.get("cleanup.policy", policy)}
    parts = {p.strip() for p in config["cleanup.policy"].split(",")}

    def deletes(key: str, default: str) -> bool:  # a number from 0 up; -1 and anything else do not
        digits = config.get(key, default).strip().removeprefix("+")
        return digits.isascii() and digits.isdigit()

    risky = "compact" not in parts or (
        "delete" in parts and (deletes("retention.ms", "604800000") or deletes("retention.bytes", "-1")))
    assert (deletes_records(config) is not None) is risky
