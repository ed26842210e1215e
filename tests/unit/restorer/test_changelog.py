"""Which failed changelog transactions are the cluster's trouble, waited out and done again,
and which stop the daemon (pure)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from restorer.changelog import cluster_trouble_in

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
