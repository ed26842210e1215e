"""Watermark queries wait out a leader election, a leader that does not answer (learning
the leaders afresh first) and a partition the client forgot but the cluster has, and
nothing else."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from hypothesis import given
from hypothesis import strategies as st

import topics.kafka as kafka
from topics.kafka import METADATA_TIMEOUT_S, watermarks

ELECTING = [KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE]
GONE = [KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN, KafkaError.REQUEST_TIMED_OUT]
FORGOTTEN = [KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART]
OTHER = [KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._FENCED, KafkaError._INVALID_ARG]


@dataclass
class Topic:
    partitions: dict[int, object]
    error: KafkaError | None = None


@dataclass
class Metadata:
    topics: dict[str, Topic]


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

    def __init__(self, codes: list[int], cluster: Metadata | None = None) -> None:
        self.codes = list(codes)
        self.cluster = Metadata({"t": Topic({0: None, 1: None})}) if cluster is None else cluster
        self.asked = 0
        self.stale = False  # a leader that did not answer, and no metadata asked since
        self.refreshed = 0

    def get_watermark_offsets(self, _tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        assert timeout > 0 and not cached
        assert not self.stale, "asked the same broker again without learning the leaders afresh"
        self.asked += 1
        if self.codes:
            code = self.codes.pop(0)
            self.stale = code in GONE
            raise KafkaException(KafkaError(code))
        return 3, 9

    def list_topics(self, topic: str, timeout: float) -> Metadata:
        assert timeout > 0
        self.stale = False
        self.refreshed += 1
        return self.cluster


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(kafka, "time", fake)
    return fake


@given(codes=st.lists(st.sampled_from(ELECTING + GONE + FORGOTTEN + OTHER), max_size=200))
def test_only_an_election_a_lost_leader_or_a_forgotten_partition_is_waited_out_until_the_timeout(
        codes: list[int]) -> None:
    consumer = Answers(codes)
    waiting = next((i for i, c in enumerate(codes) if c in OTHER), len(codes))  # answers before
    waited = waiting * kafka._LEADER_RETRY_S  # the clock when the first other answer comes
    try:
        got = watermarks(consumer, "t", 0)  # type: ignore[arg-type]
    except KafkaException as exc:
        code = exc.args[0].code()
        if code not in OTHER:  # given up waiting: only near or past the timeout
            assert waited >= METADATA_TIMEOUT_S - 2 * kafka._LEADER_RETRY_S
            assert code not in FORGOTTEN, "a partition the cluster has is a time-out, not gone"
        else:  # any other error at once, the first one
            assert code == codes[waiting] and consumer.asked == waiting + 1
            assert waited <= METADATA_TIMEOUT_S
        return
    assert got == (3, 9)
    assert waiting == len(codes) and consumer.asked == len(codes) + 1 and waited <= METADATA_TIMEOUT_S
    assert consumer.refreshed == sum(c in GONE + FORGOTTEN for c in codes)


@pytest.mark.parametrize("code", GONE)
def test_a_dead_leader_is_given_up_for_the_one_the_cluster_names_now(code: int) -> None:
    """A long-lived consumer's cache named a leader that died: it learns the leaders again
    before each new request instead of timing out on the dead one until the timeout."""
    consumer = Answers([code] * 3)
    assert watermarks(consumer, "t", 0) == (3, 9)  # type: ignore[arg-type]
    assert consumer.refreshed == 3


@pytest.mark.parametrize("code", FORGOTTEN)
def test_a_forgotten_partition_the_cluster_has_is_asked_again_after_its_metadata(code: int) -> None:
    consumer = Answers([code] * 3)
    assert watermarks(consumer, "t", 1) == (3, 9)  # type: ignore[arg-type]
    assert consumer.asked == 4 and consumer.refreshed == 3


@pytest.mark.parametrize("cluster", [Metadata({}), Metadata({"t": Topic({0: None})}),
                                     Metadata({"t": Topic({}, KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))})])
@pytest.mark.parametrize("code", FORGOTTEN)
def test_a_partition_the_cluster_lacks_is_raised_at_once(code: int, cluster: Metadata, clock: Clock) -> None:
    consumer = Answers([code] * 3, cluster)
    with pytest.raises(KafkaException) as raised:
        watermarks(consumer, "t", 1)  # type: ignore[arg-type]
    assert raised.value.args[0].code() == code
    assert consumer.asked == 1 and consumer.refreshed == 1 and clock.now == 0


@pytest.mark.parametrize("code", FORGOTTEN)
def test_a_cluster_that_cannot_tell_is_waited_for_then_a_time_out(code: int, clock: Clock) -> None:
    cluster = Metadata({"t": Topic({}, KafkaError(KafkaError.LEADER_NOT_AVAILABLE))})
    consumer = Answers([code] * 1000, cluster)
    with pytest.raises(KafkaException) as raised:
        watermarks(consumer, "t", 1)  # type: ignore[arg-type]
    err = raised.value.args[0]
    assert err.code() == KafkaError._TIMED_OUT and kafka.is_transient(err) and "did not say" in err.str()
    assert METADATA_TIMEOUT_S - 2 * kafka._LEADER_RETRY_S <= clock.now <= METADATA_TIMEOUT_S


@pytest.mark.parametrize("code", ELECTING + GONE + FORGOTTEN + OTHER)
def test_what_each_failure_calls_for(code: int) -> None:
    expected = (kafka.AGAIN if code in ELECTING else kafka.REFRESH if code in GONE
                else kafka.CHECK if code in FORGOTTEN else None)
    assert kafka.watermark_retry(KafkaError(code)) == expected


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
