"""The feed's transactions: whatever Kafka answers, a tick is committed once, whole, or the
feed stops with an error (``topics.feed.TickSender``). The producer here is a stand-in that
keeps what each transaction held, the way a read_committed reader would see it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException
from hypothesis import given
from hypothesis import strategies as st

from topics import feed, records
from topics.errors import BrewError
from topics.feed import Record, TickSender
from topics.kafka import KafkaConnection

OK, RETRY, ABORT, FATAL = "ok", "retry", "abort", "fatal"
ERRORS = {
    RETRY: KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True),
    ABORT: KafkaError(KafkaError.INVALID_PRODUCER_EPOCH, "epoch bumped", txn_requires_abort=True),
    FATAL: KafkaError(KafkaError._FATAL, "fatal", fatal=True),
}


class StandInProducer:
    """Answers each commit with the next outcome; a commit that succeeds makes its records
    visible, an abort drops them."""

    def __init__(self, commits: list[str]) -> None:
        self.commits: Iterator[str] = iter(commits)
        self.open: list[bytes | None] | None = None
        self.visible: list[bytes | None] = []
        self.calls: list[str] = []

    def init_transactions(self, _timeout: float) -> None:
        self.calls.append("init")

    def begin_transaction(self) -> None:
        assert self.open is None, "a transaction began inside another"
        self.open = []
        self.calls.append("begin")

    def produce(self, _topic: str, key: bytes | None = None, value: bytes | None = None, **_kw: object) -> None:
        assert self.open is not None, "a record produced outside a transaction"
        self.open.append(value)

    def commit_transaction(self, _timeout: float) -> None:
        self.calls.append("commit")
        outcome = next(self.commits, OK)
        if outcome != OK:
            raise KafkaException(ERRORS[outcome])
        assert self.open is not None
        self.visible += self.open
        self.open = None

    def abort_transaction(self, _timeout: float) -> None:
        self.calls.append("abort")
        self.open = None

    def poll(self, _timeout: float) -> int:
        return 0

    def flush(self, _timeout: float) -> int:
        return 0


def tick(n: int, start: int = 0) -> list[Record]:
    return [(b"k", str(i).encode()) for i in range(start, start + n)]


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records, "RETRY_PAUSE_S", 0.0)


def sender(commits: list[str]) -> tuple[TickSender, StandInProducer]:
    producer = StandInProducer(commits)
    return TickSender(KafkaConnection(), producer, "orders", "brewstream:feed:orders:x"), producer  # type: ignore[arg-type]


def test_a_tick_kafka_aborts_is_sent_again_whole_and_counted_once() -> None:
    s, producer = sender([ABORT])
    s.send(tick(3))
    assert producer.visible == [b"0", b"1", b"2"]
    assert producer.calls == ["init", "begin", "commit", "abort", "begin", "commit"]
    assert s.finish().sent == 3


def test_a_commit_that_timed_out_is_asked_again_not_sent_again() -> None:
    s, producer = sender([RETRY, RETRY])
    s.send(tick(2))
    assert producer.calls == ["init", "begin", "commit", "commit", "commit"]
    assert producer.visible == [b"0", b"1"] and s.finish().sent == 2


def test_a_fatal_error_stops_the_feed_with_nothing_of_the_tick_counted() -> None:
    s, producer = sender([FATAL])
    with pytest.raises(BrewError, match="could not be committed"):
        s.send(tick(2))
    assert producer.visible == [] and s.finish().sent == 0


def test_a_tick_aborted_past_the_wait_stops_the_feed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(feed, "FEED_SEND_WAIT_S", 0.0)
    s, producer = sender([ABORT] * 3)
    with pytest.raises(BrewError, match="could not be committed to orders within"):
        s.send(tick(2))
    assert producer.visible == []


@given(st.lists(st.lists(st.sampled_from([OK, RETRY, ABORT]), max_size=4), min_size=1, max_size=6),
       st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=6))
def test_any_answers_short_of_fatal_leave_every_record_visible_once_in_order(
        answers: list[list[str]], sizes: list[int]) -> None:
    """Oracle: the records of the ticks, in order, each once."""
    commits = [outcome for attempt in answers for outcome in attempt]
    s, producer = sender(commits)
    expected: list[Record] = []
    for size in sizes:
        records = tick(size, len(expected))
        expected += records
        s.send(records)
    assert producer.visible == [v for _, v in expected]
    assert s.finish().sent == len(expected)
    assert producer.open is None
