"""Transactional writers fenced mid-transaction on a real broker, the changelog writer and
the DLQ replay's sender: each says so once, in its own words, and nothing on its way out
raises the broker's error again (it would hide the first on its way up)."""

import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from restorer.changelog import ChangelogWriter, Fenced, OutputRecord, TransactionalWriter, task_transactional_id
from restorer.codec import commit_key, encode_u64, shape_key, tasked_key
from restorer.tasks import task_of
from service.dlq.read import DlqRecord
from service.dlq.replay import Sender
from tests.support.helpers import create_topic, read_topic
from topics.clock import wait_until
from topics.errors import BrewError
from topics.kafka import KafkaConnection
from topics.records import is_fatal, produce_waiting


def test_a_writer_fenced_mid_transaction_raises_fenced_and_closes_quietly(kafka: KafkaConnection) -> None:
    changelog, out = f"fenced-{time.time_ns()}", f"fenced-out-{time.time_ns()}"
    create_topic(kafka, changelog)
    create_topic(kafka, out)
    old = ChangelogWriter(kafka, changelog, [0])
    old.start()
    old.publish([(b"latte", b"1")])
    new = ChangelogWriter(kafka, changelog, [0])
    try:
        with pytest.raises(Fenced, match="another instance took over"):
            old.publish([(b"latte", b"2")], [OutputRecord(out, b"k", b"v")],
                        before_commit=new.start)  # another instance registers mid-transaction
        old.close()  # the producer still holds its fatal error: it must not raise it here
        new.publish([(b"mocha", b"1")])
    finally:
        new.close()
    committed = [(m.key(), m.value()) for m in read_topic(kafka, changelog, committed_only=True)]
    assert (b"latte", b"1") in committed and (b"mocha", b"1") in committed
    assert (b"latte", b"2") not in committed
    assert read_topic(kafka, out, committed_only=True) == []


def test_a_changelog_written_by_task_fences_each_task_on_its_own(kafka: KafkaConnection) -> None:
    """By task, each task's entries commit in a transaction of the task's own, with the
    output records it carries: a new writer of one task fences the old writer for that
    task alone (its outputs are never committed), and its other tasks go on."""
    changelog, out = f"by-task-{time.time_ns()}", f"by-task-out-{time.time_ns()}"
    create_topic(kafka, changelog, 3)
    create_topic(kafka, out)
    keys = {task_of(k, 3): k for k in (f"drink-{i}".encode() for i in range(40))}
    old = ChangelogWriter(kafka, changelog, [0, 1, 2], by_task=True)
    old.start()
    new = TransactionalWriter(kafka, task_transactional_id(changelog, 1), "task 1's new owner")
    try:
        assert set(old.publish([(keys[0], b"1"), (keys[1], b"1")], [OutputRecord(out, b"a", b"1", task=1)])) == {0, 1}
        with pytest.raises(ValueError, match="task 1 writes none in this batch"):
            old.publish([(keys[0], b"x")], [OutputRecord(out, b"k", b"v", task=1)])
        new.start()  # task 1 moved to another instance
        with pytest.raises(Fenced, match=r"changelog .* \(task 1\)"):
            old.publish([(keys[1], b"2")], [OutputRecord(out, b"b", b"2", task=1)])
        assert set(old.publish([(keys[0], b"3"), (keys[2], b"3")], [OutputRecord(out, b"c", b"3", task=2)])) == {0, 2}
        markers = dict(old.batch_markers(7, [(keys[2], b"3")]))
        assert markers == {commit_key(2): encode_u64(7), tasked_key(2): encode_u64(1), shape_key(2): encode_u64(3)}
    finally:
        old.close()
        new.close()
    committed = {(m.partition(), m.key(), m.value()) for m in read_topic(kafka, changelog, committed_only=True)}
    assert committed == {(0, keys[0], b"1"), (1, keys[1], b"1"), (0, keys[0], b"3"), (2, keys[2], b"3")}
    assert [(m.key(), m.value()) for m in read_topic(kafka, out, committed_only=True)] == [(b"a", b"1"), (b"c", b"3")]


def test_a_replay_fenced_mid_transaction_says_so_and_closes_quietly(kafka: KafkaConnection) -> None:
    ledger, source = f"ledger-{time.time_ns()}", f"orders-{time.time_ns()}"
    create_topic(kafka, ledger)
    create_topic(kafka, source)

    def record(offset: int) -> DlqRecord:
        return DlqRecord(0, offset, 0, "bad", source, 0, offset, b"k", b"{}")

    old = Sender(kafka, ledger, batch=10, record_bytes=1_000_000, faults=None)
    old.send(record(0), 0, b"k", b"{}", [])  # its transaction is open
    new = Sender(kafka, ledger, batch=10, record_bytes=1_000_000, faults=None)  # another replay starts
    try:
        with pytest.raises(BrewError, match="another `brewstream dlq replay` of this DLQ took over"):
            for offset in range(1, 20):  # sending and committing both meet the fence
                old.send(record(offset), 0, b"k", b"{}", [])
            old.finish()
        old.close()
        new.send(record(30), 0, b"k", b"{}", [])
        new.finish()
    finally:
        new.close()
    assert [m.key() for m in read_topic(kafka, ledger, committed_only=True)] == [f"{source}:0:30".encode()]


def test_producing_on_a_fenced_producer_raises_the_fence_not_a_bare_fatal_error(kafka: KafkaConnection) -> None:
    """librdkafka's ``produce`` says only "Local: Fatal error" once the producer is fenced;
    the writers name the fence only if ``produce_waiting`` raises the cause instead."""
    topic = f"fenced-produce-{time.time_ns()}"
    create_topic(kafka, topic)
    tid = {"transactional.id": f"fenced-produce-{time.time_ns()}"}
    old, new = kafka.producer(tid), kafka.producer(tid)
    old.init_transactions(30)
    old.begin_transaction()
    produce_waiting(old, topic, b"k", b"before")
    old.flush(30)
    new.init_transactions(30)  # fences ``old``, which learns it from its next request
    raised: list[KafkaError] = []

    def produce_until_refused() -> bool:
        try:
            produce_waiting(old, topic, b"k", b"after")
        except KafkaException as exc:
            raised.append(exc.args[0])
            return True
        return False

    # every=0.05: one produce request at a time, so the broker's refusal comes back between
    wait_until(produce_until_refused, 30, "the fenced producer to refuse a record", every=0.05)
    assert raised[0].code() == KafkaError._FENCED, raised[0].str()
    assert is_fatal(raised[0])
    with pytest.raises(KafkaException) as again:  # the cause comes out once; the next says only _FATAL
        produce_waiting(old, topic, b"k", b"again")
    assert is_fatal(again.value.args[0])
    new.flush(5)
