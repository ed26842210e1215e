"""The top-N board's snapshots on a real broker: one transaction each, so a process woken
after a takeover can never put an older snapshot after the new active's, whatever it was
doing when it froze; fenced by the cluster itself (an epoch bump), the board goes on; and
``seq`` rises across takeovers and lost disks."""

from __future__ import annotations

import io
import json
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from restorer.store import Store
from sandbox import roles
from sandbox.kraft import free_port
from service.drink_count.board import SEND_WAIT_S, TXN_TIMEOUT_S, BoardFlusher, SnapshotSender, board_transactional_id
from service.drink_count.topn import snapshot_seq
from tests.support.daemon import Instance
from tests.support.feed import Feed
from tests.support.helpers import Pipeline, create_topic, read_topic
from topics.clock import wait_until
from topics.kafka import KafkaConnection


def values(conn: KafkaConnection, topic: str, committed_only: bool) -> list[bytes]:
    return [m.value() or b"" for m in read_topic(conn, topic, committed_only=committed_only)]


def fixed(value: bytes) -> Callable[[int], bytes]:
    return lambda _seq: value


def seqs(conn: KafkaConnection, topic: str) -> list[int]:
    """The seq of every snapshot a read_committed reader gets, in the topic's order."""
    return [s for v in values(conn, topic, committed_only=True) if (s := snapshot_seq(v)) is not None]


def test_a_zombie_frozen_before_its_commit_is_fenced_and_its_snapshot_aborted(
        kafka: KafkaConnection, caplog: pytest.LogCaptureFixture) -> None:
    topic = f"board-zombie-{time.time_ns()}"
    create_topic(kafka, topic)
    txn_id = board_transactional_id(f"{topic}-changelog")
    # The lease never proves the old one active after its fencing: the new one holds it.
    old = SnapshotSender(kafka, topic, txn_id, proof=lambda since=None: since is None)
    new = SnapshotSender(kafka, topic, txn_id)

    def takeover_while_frozen() -> None:
        # The old snapshot is in the log, uncommitted, when the new active registers.
        wait_until(lambda: b"old-2" in values(kafka, topic, committed_only=False), 30, "old-2 in the log")
        # Registering waits for the broker to abort old-2's transaction; a call that times
        # out is resumed by the next.
        wait_until(new.register, 30, "the new sender registered")
        assert new.send(fixed(b"new-1"))

    try:
        assert old.send(fixed(b"old-1"))
        with caplog.at_level(logging.WARNING, logger="brewstream"):
            assert not old.send(fixed(b"old-2"), before_commit=takeover_while_frozen)
            assert not old.send(fixed(b"old-3"))  # fenced: it does not even try
        assert new.send(fixed(b"new-2"))
    finally:
        old.close(1)
        new.close(10)
    assert old.fenced and not new.fenced
    assert values(kafka, topic, committed_only=True) == [b"old-1", b"new-1", b"new-2"]
    fenced_lines = [r.getMessage() for r in caplog.records if "another instance registered" in r.getMessage()]
    assert len(fenced_lines) == 1 and txn_id in fenced_lines[0]


def test_snapshots_of_the_proven_active_are_committed_in_order(kafka: KafkaConnection, tmp_path: Path) -> None:
    topic = f"board-order-{time.time_ns()}"
    create_topic(kafka, topic)
    proven = [True]
    out = io.StringIO()
    with Store(tmp_path / "store") as store:
        board = BoardFlusher(store, kafka, topic, 3, 60.0, out=out, may_publish=lambda since=None: proven[0],
                             changelog_topic=f"{topic}-changelog")
        board.flush()
        board.flush()
        proven[0] = False
        board.flush()  # printed, not sent: this instance is not the proven active one
        proven[0] = True
        board.stop(final_flush=True)
    docs = [json.loads(v) for v in values(kafka, topic, committed_only=True)]
    assert [d["seq"] for d in docs] == [1, 2, 3] and {d["batch"] for d in docs} == {0}
    assert values(kafka, topic, committed_only=False) == values(kafka, topic, committed_only=True)
    assert out.getvalue().count("top-3") == 4


def test_an_unreachable_cluster_costs_a_snapshot_not_the_board(caplog: pytest.LogCaptureFixture) -> None:
    nowhere = KafkaConnection(f"127.0.0.1:{free_port()}")
    sender = SnapshotSender(nowhere, "board-nowhere", board_transactional_id("nowhere"))
    started = time.monotonic()
    try:
        with caplog.at_level(logging.DEBUG, logger="brewstream"):
            assert not sender.send(fixed(b"lost"))
            assert not sender.send(fixed(b"lost too"))  # registering is asked again, not given up
    finally:
        sender.close(0)
    assert time.monotonic() - started < 2 * SEND_WAIT_S + 5
    assert not sender.fenced
    said = [r for r in caplog.records if "the board's transactions not registered" in r.getMessage()]
    # The cluster being away is the outage lines' to say, not every flush's.
    assert len(said) == 2 and all(r.levelno == logging.DEBUG for r in said)


def test_a_transaction_the_cluster_timed_out_fences_the_producer_not_the_board(
        kafka: KafkaConnection, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A coordinator that times a transaction out (its cluster stalled, or it failed over
    mid-transaction) aborts it by bumping the producer's epoch; librdkafka then says the
    producer was fenced by a newer instance. Read so, the board sent nothing more for the
    rest of the process. Here the transaction is held open past the board's transaction
    timeout until the broker has ended it: the board goes on once the lease proves this
    instance still the active one, with its seq above the last committed."""
    topic = f"board-bump-{time.time_ns()}"
    create_topic(kafka, topic)
    changelog = f"{topic}-changelog"
    txn_id = board_transactional_id(changelog)
    proofs: list[float | None] = []

    def proof(since: float | None = None) -> bool:  # the lease: this instance is the active one
        proofs.append(since)
        return True

    def timed_out_by_the_broker() -> None:
        time.sleep(TXN_TIMEOUT_S)  # the transaction is open this long, on purpose
        wait_until(lambda: not roles.transaction_state(kafka.bootstrap, txn_id).open, 60,
                   "the broker to abort the timed-out transaction", every=0.5)

    with Store(tmp_path / "store") as store:
        board = BoardFlusher(store, kafka, topic, 3, 60.0, out=io.StringIO(), may_publish=proof,
                             changelog_topic=changelog)
        sender = board._sender
        try:
            assert board.flush() == 1
            with caplog.at_level(logging.INFO, logger="brewstream"):
                assert sender.send(fixed(b'{"seq": 2}'), before_commit=timed_out_by_the_broker) is None
                assert sender.fenced
                wait_until(lambda: board.flush() is not None, 30, "a snapshot after the fencing")
        finally:
            board.stop(final_flush=True)
    assert not sender.fenced and any(since is not None for since in proofs)
    assert seqs(kafka, topic) == sorted(set(seqs(kafka, topic))) and seqs(kafka, topic)[0] == 1
    assert len(seqs(kafka, topic)) >= 3  # the first, one after the fencing, the last at the stop
    lines = [r.getMessage() for r in caplog.records]
    assert any("was fenced" in line for line in lines) and any("register again" in line for line in lines)


@pytest.mark.spark
def test_seq_rises_across_a_takeover_and_a_lost_disk(pipe: Pipeline, tmp_path: Path) -> None:
    """A consumer that keeps the snapshot of the highest seq dropped the new active's for as
    long as the old one had run: seq counted the snapshots of each process, from 1. Now a
    standby that takes over, and then an active whose disk is lost, go on above it."""
    feed = Feed(pipe, 1500, seed=81, seconds=60)
    feed.start()
    a = Instance(pipe, tmp_path, "a").start()
    b = Instance(pipe, tmp_path, "b", "--standby").start()

    def more_snapshots(n: int) -> Callable[[], bool]:
        before = len(seqs(pipe.conn, pipe.topics.counts))
        return lambda: len(seqs(pipe.conn, pipe.topics.counts)) >= before + n

    try:
        b.wait_for("role: standby")
        wait_until(more_snapshots(4), 180, "snapshots of the first active", every=0.5)
        a.kill()
        b.wait_for("took over from")
        wait_until(more_snapshots(3), 120, "snapshots of the new active", every=0.5)
        b.kill()  # and its disk is lost: it restores from the changelog
        shutil.rmtree(b.state)
        shutil.rmtree(b.ckpt)
        b.start()  # a standby again: it restores, then takes over from its own dead run
        wait_until(lambda: b.text().count("took over from") >= 2, 180, "b to take over again")
        wait_until(more_snapshots(3), 180, "snapshots after the restore", every=0.5)
        feed.done.set()
        assert b.stop() == 0, b.text()[-3000:]
    finally:
        feed.done.set()
        for inst in (a, b):
            if inst.proc is not None and inst.proc.poll() is None:
                inst.kill()
    committed = seqs(pipe.conn, pipe.topics.counts)
    assert committed == sorted(set(committed)), committed
    assert "Traceback" not in b.text()
