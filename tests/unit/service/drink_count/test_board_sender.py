"""What the board's snapshot sender does when its producer can do no more: fenced, it falls
silent until the lease proves this instance still the active one after the fencing (an
epoch bump of the cluster's, not another instance's registration), refused the id it asks
again now and then, and otherwise it goes on with a new producer at once; and the ``seq``
it gives each snapshot. (Its transactions on a real broker:
tests/integration/test_board_snapshots.py.)"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException
from hypothesis import given
from hypothesis import strategies as st

from service.drink_count import board
from service.drink_count.board import FENCED, REFUSED, REFUSED_RETRY_S, Silence, SnapshotSender, resume_after
from service.instance.lease import ActiveProof
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

    def abort_transaction(self, timeout: float) -> None:
        self._pending = []

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


class Lease:
    """The lease as the board asks it (``Lease.proven_active``): proven, or proven by an
    announcement sent after a moment."""

    def __init__(self, proven: bool = True) -> None:
        self.proven = proven
        self.proven_after = float("-inf")  # monotonic: announcements sent after this came back

    def __call__(self, since: float | None = None) -> bool:
        return self.proven and (since is None or since < self.proven_after)


def _sender(monkeypatch: pytest.MonkeyPatch, *producers: object, proof: ActiveProof | None = None,
            last_committed: int = 0) -> SnapshotSender:
    queue = list(producers)
    monkeypatch.setattr(KafkaConnection, "producer", lambda self, conf: queue.pop(0))
    return SnapshotSender(KafkaConnection("127.0.0.1:1"), "brew.drink-counts", "brewstream:c:board",
                          proof or Lease(), lambda: last_committed)


def doc(value: bytes) -> Callable[[int], bytes]:
    return lambda _seq: value


FENCINGS = [KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True),
            KafkaError(KafkaError.PRODUCER_FENCED, "producer fenced")]


@pytest.mark.parametrize("err", FENCINGS)
def test_a_sender_fenced_while_another_instance_is_active_says_so_once_and_stays_silent(
        err: KafkaError, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    producer = RefusingProducer(err)
    lease = Lease()
    sender = _sender(monkeypatch, producer, proof=lease)  # the lease never proves it after the fencing
    with caplog.at_level(logging.WARNING, logger="brewstream"):
        assert not sender.register()
        assert sender.send(doc(b"{}")) is None
        assert sender.send(doc(b"{}")) is None
    assert sender.fenced and producer.calls == 1
    [line] = [r.getMessage() for r in caplog.records]
    assert "another instance registered" in line and "stay off while another instance is" in line
    assert err.str() in line and "brewstream:c:board" in line


@pytest.mark.parametrize("err", FENCINGS)
def test_an_epoch_bump_fences_the_producer_not_the_board(
        err: KafkaError, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """A transaction coordinator that failed over or timed the board's transaction out bumps
    the producer's epoch, and librdkafka calls that fenced by a newer instance: the board
    sent nothing more for the rest of the process. The lease tells the two apart."""
    lease = Lease()
    first, last = FailingCommit(err), WorkingProducer()
    sender = _sender(monkeypatch, first, last, proof=lease)
    with caplog.at_level(logging.INFO, logger="brewstream"):
        assert sender.send(doc(b"one")) is None and sender.fenced
        # Proven before the fencing is no proof: a takeover may lie between the two.
        assert sender.send(doc(b"two")) is None and sender.fenced
        assert sender.silence is not None
        lease.proven_after = sender.silence.since + 0.001  # an announcement sent after it came back
        assert sender.send(doc(b"three")) == 2 and not sender.fenced  # 1 went with the fenced transaction
    assert last.registered == 1 and last.committed == [b"three"]
    assert any("register again" in r.getMessage() for r in caplog.records)


def test_a_sender_silenced_by_another_instance_comes_back_when_this_one_is_the_proven_active_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    lease = Lease()
    sender = _sender(monkeypatch, FailingCommit(FENCINGS[0]), WorkingProducer(), proof=lease, last_committed=7)
    assert sender.send(doc(b"a")) is None and sender.fenced
    lease.proven = False  # another instance holds the lease
    lease.proven_after = float("inf")
    assert sender.send(doc(b"b")) is None and sender.fenced
    lease.proven = True  # ... until this one is the active again
    assert sender.send(doc(b"c")) == 9  # 8 went with the fenced transaction


def test_a_refused_sender_asks_again_now_and_then(caplog: pytest.LogCaptureFixture,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(board.time, "monotonic", lambda: now[0])
    err = KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "not authorized", fatal=True)
    refusing, working = RefusingProducer(err), WorkingProducer()
    lease = Lease()
    lease.proven_after = float("inf")
    sender = _sender(monkeypatch, refusing, working, proof=lease)
    with caplog.at_level(logging.WARNING, logger="brewstream"):
        assert not sender.register()
        now[0] += REFUSED_RETRY_S - 1
        assert sender.send(doc(b"x")) is None and refusing.calls == 1
    [line] = [r.getMessage() for r in caplog.records]
    assert "allow this one" in line and err.str() in line and "another instance" not in line
    now[0] += 1
    assert sender.send(doc(b"y")) == 1 and working.committed == [b"y"]


@given(st.sampled_from([FENCED, REFUSED]), st.floats(0, 1e6), st.floats(0, 1e6), st.booleans())
def test_only_a_proof_after_the_silence_ends_it(cause: str, since: float, later: float, proven: bool) -> None:
    resumed = resume_after(Silence(cause, since), since + later, proven)
    assert resumed == (proven and (cause == FENCED or later >= REFUSED_RETRY_S))


def test_seq_goes_on_above_what_the_topic_holds_and_the_store_s_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    producer = WorkingProducer()
    sender = _sender(monkeypatch, producer, last_committed=41)
    assert sender.send(lambda seq: b"%d" % seq, batch=10) == 42
    assert sender.send(lambda seq: b"%d" % seq, batch=10) == 43
    assert sender.send(lambda seq: b"%d" % seq, batch=100) == 100  # never below the batch it shows
    assert producer.committed == [b"42", b"43", b"100"]


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
        assert sender.send(doc(b"one")) is None
        assert not sender.fenced
        assert sender.send(doc(b"two")) is None  # the new producer fails too: said once, not twice
        assert sender.send(doc(b"three")) is not None and sender.send(doc(b"four")) is not None
    assert last.registered == 1 and last.committed == [b"three", b"four"]
    [line] = [r.getMessage() for r in caplog.records]
    assert "a new one registers" in line and err.str() in line and "brewstream:c:board" in line
