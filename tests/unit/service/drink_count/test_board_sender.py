"""What the board's snapshot sender says when its producer can do no more: it blames another
instance only when one took the id. (Its transactions on a real broker:
tests/integration/test_board_snapshots.py.)"""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError, KafkaException

from service.drink_count.board import SnapshotSender
from topics.kafka import KafkaConnection


class RefusingProducer:
    """A producer whose registration fails for good with ``err``."""

    def __init__(self, err: KafkaError) -> None:
        self.err = err
        self.calls = 0

    def init_transactions(self, timeout: float) -> None:
        self.calls += 1
        raise KafkaException(self.err)


@pytest.mark.parametrize(("err", "blames_another"), [
    (KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True), True),
    (KafkaError(KafkaError.PRODUCER_FENCED, "producer fenced"), True),
    (KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "not authorized", fatal=True), False),
    (KafkaError(KafkaError.INVALID_TXN_STATE, "invalid state", fatal=True), False),
])
def test_a_sender_that_can_do_no_more_says_why_once_and_stops(
        err: KafkaError, blames_another: bool, caplog: pytest.LogCaptureFixture) -> None:
    sender = SnapshotSender(KafkaConnection("127.0.0.1:1"), "brew.drink-counts", "brewstream:c:board")
    producer = RefusingProducer(err)
    sender._producer = producer  # type: ignore[assignment]
    with caplog.at_level(logging.WARNING, logger="brewstream"):
        assert not sender.register()
        assert not sender.send(1, b"{}")
    assert sender.fenced and producer.calls == 1
    [line] = [r.getMessage() for r in caplog.records]
    assert ("another instance registered" in line) is blames_another
    refused = err.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert ("allow this one" in line) is refused
    assert ("failed for good" in line) is (not blames_another and not refused)
    assert err.str() in line and "brewstream:c:board" in line
