"""Watermark queries wait out a leader election, and nothing else."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from hypothesis import given
from hypothesis import strategies as st

import topics.kafka as kafka
from topics.kafka import METADATA_TIMEOUT_S, watermarks

ELECTING = [KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE]
OTHER = [KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._TRANSPORT, KafkaError.TOPIC_AUTHORIZATION_FAILED,
         KafkaError._TIMED_OUT]


class Clock:
    """time.monotonic and time.sleep of a clock that moves only when slept on."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


class Answers:
    """A consumer whose watermark queries fail with ``codes`` in turn, then answer."""

    def __init__(self, codes: list[int]) -> None:
        self.codes = list(codes)
        self.asked = 0

    def get_watermark_offsets(self, _tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        assert timeout > 0 and not cached
        self.asked += 1
        if self.codes:
            raise KafkaException(KafkaError(self.codes.pop(0)))
        return 3, 9


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(kafka, "time", fake)
    return fake


@given(codes=st.lists(st.sampled_from(ELECTING + OTHER), max_size=200))
def test_only_an_election_is_waited_out_and_only_until_the_timeout(codes: list[int]) -> None:
    consumer = Answers(codes)
    electing = next((i for i, c in enumerate(codes) if c not in ELECTING), len(codes))  # answers before
    waited = electing * kafka._LEADER_RETRY_S  # the clock when the first other answer comes
    try:
        got = watermarks(consumer, "t", 0)  # type: ignore[arg-type]
    except KafkaException as exc:
        code = exc.args[0].code()
        if code in ELECTING:  # given up on the election: only near or past the timeout
            assert waited >= METADATA_TIMEOUT_S - 2 * kafka._LEADER_RETRY_S
        else:  # any other error at once, the first one
            assert code == codes[electing] and consumer.asked == electing + 1
            assert waited <= METADATA_TIMEOUT_S
        return
    assert got == (3, 9)
    assert electing == len(codes) and consumer.asked == len(codes) + 1 and waited <= METADATA_TIMEOUT_S


def test_a_broker_that_just_started_is_asked_again() -> None:
    consumer = Answers([KafkaError.NOT_LEADER_FOR_PARTITION] * 20)
    assert watermarks(consumer, "t", 0) == (3, 9)  # type: ignore[arg-type]
    assert consumer.asked == 21


def test_a_partition_that_never_gets_a_leader_fails_at_the_timeout(clock: Clock) -> None:
    consumer = Answers([KafkaError.LEADER_NOT_AVAILABLE] * 1000)
    with pytest.raises(KafkaException) as raised:
        watermarks(consumer, "t", 0)  # type: ignore[arg-type]
    assert raised.value.args[0].code() == KafkaError.LEADER_NOT_AVAILABLE
    assert METADATA_TIMEOUT_S - 2 * kafka._LEADER_RETRY_S <= clock.now <= METADATA_TIMEOUT_S
