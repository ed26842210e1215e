"""The board's Kafka reader on a real broker: a failure while reading costs the page one
reader, not its updates."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from confluent_kafka import Message

from service.webboard.feed import TopicFeed
from tests.support.helpers import Pipeline, produce
from topics.clock import wait_until


def _snapshot(seq: int) -> bytes:
    return orjson.dumps({"seq": seq, "ts": "2026-01-01T00:00:00Z", "processed_orders": seq,
                         "top": [{"rank": 1, "drink": "latte", "count": seq}]})


def _shown_seq(feed: TopicFeed) -> Any:
    snapshot = feed.view().snapshot
    return None if snapshot is None else snapshot["seq"]


def test_a_failure_while_reading_is_said_and_reading_goes_on(pipe: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    produce(pipe.conn, pipe.topics.counts, [(b"top", _snapshot(1))])
    feed = TopicFeed(pipe.conn, pipe.topics)
    take = feed._take
    failures: list[str] = []

    def take_failing_once(msg: Message) -> None:
        if msg.topic() == pipe.topics.counts and not failures:
            failures.append("raised")
            raise RuntimeError("a record the page cannot take")
        take(msg)

    monkeypatch.setattr(feed, "_take", take_failing_once)
    feed.start()
    try:
        error = wait_until(lambda: feed.view().error, 30, "the page to say reading failed")
        assert "a record the page cannot take" in error and "reading again" in error
        # A new reader, assigned again from the topic's end, shows the snapshot it failed on.
        wait_until(lambda: _shown_seq(feed) == 1, 30, "the snapshot read again after the failure")
        produce(pipe.conn, pipe.topics.counts, [(b"top", _snapshot(2))])
        wait_until(lambda: _shown_seq(feed) == 2, 30, "a later snapshot")
        assert feed.view().error is None and failures == ["raised"]
    finally:
        feed.stop()
