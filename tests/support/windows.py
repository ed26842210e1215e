"""Order events for windows tests: on-time streams, sending them with their event-time
header, the closed windows read back, and an oracle that counts windows by hand."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Producer

from tests.support.helpers import Pipeline, read_topic
from topics.clock import utc_iso
from topics.event_time import encode_event_time

MIN = 60 * 10**9


def at(hhmm: str, sec: int = 0) -> int:
    h, m = map(int, hhmm.split(":"))
    return int(datetime(2026, 11, 22, h, m, sec, tzinfo=UTC).timestamp()) * 10**9


def iso(ns: int) -> str:
    return utc_iso(ns / 1e9, millis=True)


def send(pipe: Pipeline, events: list[tuple[str, int]], partition: int = 0) -> None:
    """(shop, event_ns) pairs, in this order, to one partition."""
    p = Producer({"bootstrap.servers": pipe.conn.bootstrap, "enable.idempotence": True})
    for shop, t in events:
        value = json.dumps({"shop_id": shop, "drink": "latte", "amount": 2.5}).encode()
        p.produce(pipe.topics.events, key=shop.encode(), value=value, partition=partition,
                  headers=[("event-time", encode_event_time(t))])
    assert p.flush(10) == 0


def results(pipe: Pipeline) -> list[dict[str, Any]]:
    return [json.loads(m.value()) for m in read_topic(pipe.conn, pipe.topics.windows)]


def on_time_stream(n: int) -> list[tuple[str, int]]:
    base = at("09:00")
    return [(f"shop-{i % 5:02d}", base + i * 7 * 10**9) for i in range(n)]


def oracle(events: list[tuple[str, int]], size: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for _, t in events:
        start = iso(t - t % size)
        out[start] = out.get(start, 0) + 1
    return out
