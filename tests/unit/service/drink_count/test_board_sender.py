"""What the board's snapshot sender does when its producer can do no more: it stops only when
another instance took the id (and says so) or the principal may not use it, and otherwise
goes on with a new producer. (Its transactions on a real broker:
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

    def flush(self, timeout: float) -> int:
        raise KafkaException(self.err)


class WorkingProducer:
    """A producer whose transactions all go through."""

    def __init__(self) -> None:
        self.committed: list[bytes] = []
        self._pending: list[bytes] = []
        self.registered = 0

    def init_transactions(self, timeout: float) -> None:
        self.registered += 1

    def begin_transaction(self) -> None:
        self._pending = []

    def produce(self, topic: str, key: bytes, value: bytes) -> None:
        self._pending.append(value)

    def commit_transaction(self, timeout: float) -> None:
        self.committed += self._pending

    def flush(self, timeout: float) -> int:
        return 0


class FailingCommit(WorkingProducer):
    """Registers, then fails for good at the first commit with ``err``."""

    def __init__(self, err: KafkaError) -> None:
        super().__init__()
        self.err = err

    def commit_transaction(self, timeout: float) -> None:
        raise KafkaException(self.err)

    def flush(self, timeout: float) -> int:
        raise KafkaException(self.err)  # as librdkafka does once a fatal error is set


def _sender(monkeypatch: pytest.MonkeyPatch, *producers: object) -> SnapshotSender:
    queue = list(producers)
    monkeypatch.setattr(KafkaConnection, "producer", lambda self, conf: queue.pop(0))
    return SnapshotSender(KafkaConnection("127.0.0.1:1"), "brew.drink-counts", "brewstream:c:board")


@pytest.mark.parametrize(("err", "blames_another"), [
    (KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True), True),
    (KafkaError(KafkaError.PRODUCER_FENCED, "producer fenced"), True),
    (KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "not authorized", fatal=True), False),
])
def test_a_fenced_or_refused_sender_says_why_once_and_stops(
        err: KafkaError, blames_another: bool, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    producer = RefusingProducer(err)
    sender = _sender(monkeypatch, producer)
    with caplog.at_level(logging.WARNING, logger="brewstream"):
        assert not sender.register()
        assert not sender.send(1, b"{}")
    assert sender.fenced and producer.calls == 1
    [line] = [r.getMessage() for r in caplog.records]
    assert ("another instance registered" in line) is blames_another
    assert ("allow this one" in line) is (not blames_another)
    assert err.str() in line and "brewstream:c:board" in line


@pytest.mark.parametrize("fails_at", ["register", "commit"])
def test_a_producer_that_fails_for_good_unfenced_is_replaced_and_the_board_goes_on(
        fails_at: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """A node of the cluster killed mid-transaction left the board's producer with a fatal
    INVALID_TXN_STATE: the board sent nothing more for the rest of the daemon's life."""
    err = KafkaError(KafkaError.INVALID_TXN_STATE, "invalid state", fatal=True)
    first: object = RefusingProducer(err) if fails_at == "register" else FailingCommit(err)
    again, last = FailingCommit(err), WorkingProducer()
    sender = _sender(monkeypatch, first, again, last)
    with caplog.at_level(logging.WARNING, logger="brewstream"):
        assert not sender.send(1, b"one")
        assert not sender.fenced
        assert not sender.send(2, b"two")  # the new producer fails too: said once, not twice
        assert sender.send(3, b"three") and sender.send(4, b"four")
    assert last.registered == 1 and last.committed == [b"three", b"four"]
    [line] = [r.getMessage() for r in caplog.records]
    assert "a new one registers" in line and err.str() in line and "brewstream:c:board" in line
