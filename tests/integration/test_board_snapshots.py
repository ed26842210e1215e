"""The top-N board's snapshots on a real broker: one transaction each, so a process woken
after a takeover can never put an older snapshot after the new active's, whatever it was
doing when it froze."""

from __future__ import annotations

import io
import json
import logging
import time
from pathlib import Path

import pytest

from restorer.store import Store
from sandbox.kraft import free_port
from service.drink_count.board import SEND_WAIT_S, BoardFlusher, SnapshotSender, board_transactional_id
from tests.support.helpers import create_topic, read_topic
from topics.clock import wait_until
from topics.kafka import KafkaConnection


def values(conn: KafkaConnection, topic: str, committed_only: bool) -> list[bytes]:
    return [m.value() or b"" for m in read_topic(conn, topic, committed_only=committed_only)]


def test_a_zombie_frozen_before_its_commit_is_fenced_and_its_snapshot_aborted(
        kafka: KafkaConnection, caplog: pytest.LogCaptureFixture) -> None:
    topic = f"board-zombie-{time.time_ns()}"
    create_topic(kafka, topic)
    txn_id = board_transactional_id(f"{topic}-changelog")
    old, new = SnapshotSender(kafka, topic, txn_id), SnapshotSender(kafka, topic, txn_id)

    def takeover_while_frozen() -> None:
        # The old snapshot is in the log, uncommitted, when the new active registers.
        wait_until(lambda: b"old-2" in values(kafka, topic, committed_only=False), 30, "old-2 in the log")
        # Registering waits for the broker to abort old-2's transaction; a call that times
        # out is resumed by the next.
        wait_until(new.register, 30, "the new sender registered")
        assert new.send(1, b"new-1")

    try:
        assert old.send(1, b"old-1")
        with caplog.at_level(logging.WARNING, logger="brewstream"):
            assert not old.send(2, b"old-2", before_commit=takeover_while_frozen)
            assert not old.send(3, b"old-3")  # fenced: it does not even try
        assert new.send(2, b"new-2")
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
        board = BoardFlusher(store, kafka, topic, 3, 60.0, out=out, may_publish=lambda: proven[0],
                             changelog_topic=f"{topic}-changelog")
        board.flush()
        board.flush()
        proven[0] = False
        board.flush()  # printed, not sent: this instance is not the proven active one
        proven[0] = True
        board.stop(final_flush=True)
    seqs = [json.loads(v)["seq"] for v in values(kafka, topic, committed_only=True)]
    assert seqs == [1, 2, 4]
    assert values(kafka, topic, committed_only=False) == values(kafka, topic, committed_only=True)
    assert out.getvalue().count("top-3") == 4


def test_an_unreachable_cluster_costs_a_snapshot_not_the_board(caplog: pytest.LogCaptureFixture) -> None:
    nowhere = KafkaConnection(f"127.0.0.1:{free_port()}")
    sender = SnapshotSender(nowhere, "board-nowhere", board_transactional_id("nowhere"))
    started = time.monotonic()
    try:
        with caplog.at_level(logging.DEBUG, logger="brewstream"):
            assert not sender.send(1, b"lost")
            assert not sender.send(2, b"lost too")  # registering is asked again, not given up
    finally:
        sender.close(0)
    assert time.monotonic() - started < 2 * SEND_WAIT_S + 5
    assert not sender.fenced
    said = [r for r in caplog.records if "the board's transactions not registered" in r.getMessage()]
    # The cluster being away is the outage lines' to say, not every flush's.
    assert len(said) == 2 and all(r.levelno == logging.DEBUG for r in said)
