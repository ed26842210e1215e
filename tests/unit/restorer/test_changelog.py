"""Which failed changelog transactions are the cluster's trouble, waited out and done again,
which were fenced, and which stop the daemon (pure)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from restorer.changelog import Fenced, TransactionalWriter, cluster_trouble_in
from topics.errors import BrewError, KafkaUnavailable
from topics.kafka import KafkaConnection

INVALID_STATE = KafkaError(KafkaError.INVALID_TXN_STATE, "Producer attempted a transactional operation in an "
                           "invalid state", txn_requires_abort=True)
TIMED_OUT = KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True)
TOO_LARGE = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too large")
NOT_ALLOWED = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "not authorized", txn_requires_abort=True)


@pytest.mark.parametrize(("err", "failures", "theirs"), [
    # A coordinator SIGSTOPped 40 s under the daemon: the records' produce came back
    # INVALID_TXN_STATE after it woke, and the daemon exited instead of doing the batch again.
    (INVALID_STATE, [INVALID_STATE], True),
    (INVALID_STATE, [], True),
    (TIMED_OUT, [], True),
    (KafkaError(KafkaError._STATE, "abort", txn_requires_abort=True), [TIMED_OUT, INVALID_STATE], True),
    # The batch's or the writer's own: waiting would never mend them.
    (KafkaError(KafkaError._STATE, "abort", txn_requires_abort=True), [TOO_LARGE], False),
    (NOT_ALLOWED, [NOT_ALLOWED], False),
    (KafkaError(KafkaError.INVALID_TXN_STATE, "fatal", fatal=True), [], False),
    (TOO_LARGE, [], False),
])
def test_a_transaction_the_cluster_ended_is_waited_out_and_done_again(err: KafkaError, failures: list[KafkaError],
                                                                       theirs: bool) -> None:
    assert cluster_trouble_in(err, failures) is theirs


class FailingProducer:
    """A transactional producer whose commit fails with ``commit_error`` and whose abort
    fails with ``abort_error`` (None: it aborts): the end of a transaction the writer decides
    on, without a broker."""

    def __init__(self, commit_error: KafkaError, abort_error: KafkaError | None) -> None:
        self.commit_error, self.abort_error = commit_error, abort_error
        self.aborted = False

    def begin_transaction(self) -> None:
        pass

    def commit_transaction(self, _timeout: float) -> None:
        raise KafkaException(self.commit_error)

    def abort_transaction(self, _timeout: float) -> None:
        if self.abort_error is not None:
            raise KafkaException(self.abort_error)
        self.aborted = True


UNKNOWN = KafkaError(KafkaError.UNKNOWN, "EndTxn commit failed: Unknown broker error", txn_requires_abort=True,
                     retriable=True)
FENCED = KafkaError(KafkaError._FENCED, "This instance has been fenced by a newer instance", fatal=True)


@pytest.mark.parametrize(("commit_error", "abort_error", "ends_as"), [
    # A broker fault under a standby's takeover: the commit failed on the cluster, and the
    # abort after it found the successor's fence. Waited out as the cluster's trouble, the
    # fenced active registered again, fenced its successor and took the lease back.
    (UNKNOWN, FENCED, Fenced),
    (FENCED, None, Fenced),
    (UNKNOWN, None, KafkaUnavailable),
    (INVALID_STATE, KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True), KafkaUnavailable),
    (TOO_LARGE, None, BrewError),
])
def test_a_transaction_ends_fenced_whenever_its_commit_or_abort_met_the_fence(
        commit_error: KafkaError, abort_error: KafkaError | None, ends_as: type[BrewError]) -> None:
    writer = TransactionalWriter(KafkaConnection("127.0.0.1:1"), "brewstream:t", "changelog t")
    writer.producer = FailingProducer(commit_error, abort_error)  # type: ignore[assignment]
    with pytest.raises(BrewError) as raised:
        writer.transact(lambda _producer, _delivered: None)
    assert type(raised.value) is ends_as
