"""``brewstream run --shuffle``: one instance runs the input stage and the tasks, against an
oracle of the orders fed (malformed ones too: the whole hostile corpus through the input
stage, each in the DLQ once with its reason, and two after a takeover counted by reason
in the new active's metrics).

A store counted directly goes on through the shuffle. The daemon is killed after a task
stage's changelog commit and started again, then SIGKILLed while both stages run, and a
hot standby (warmed while the active purged its parts) takes over; the first store, left
behind, then catches up and goes on. The counts, the order counters and the DLQ equal the
oracle, every count in its task's changelog partition, and the repartition topic is
purged below what the tasks applied. Input lost before the input stage handed it on is
refused, then skipped with --accept-input-loss; the repartition topic re-created loses
nothing (every task had applied all it was handed). The direct pipeline then refuses the store
in one line before it writes anything (a skip of lost input included), and the orders
topic re-created under the shuffle is refused, even where its offsets already reach past
the store's."""

from __future__ import annotations

import json
import random
import signal
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from restorer.codec import decode_u64
from restorer.tasks import task_of
from sandbox.kraft import free_port
from service.drink_count.counts import BAD_ORDERS as BAD_ORDERS_KEY
from service.drink_count.counts import PROCESSED_ORDERS, drink_key
from tests.support.corpus import BAD_ORDERS
from tests.support.daemon import Instance
from tests.support.drink_count import assert_exact, feed_with_bad, make_orders, store_state
from tests.support.drink_count import run_available_now as run_now
from tests.support.helpers import Pipeline, oracle, order_bytes, produce, read_topic
from topics.admin import create_topics
from topics.clock import wait_until
from topics.errors import BrewError
from topics.kafka import end_offsets

pytestmark = pytest.mark.spark


def low_marks(pipe: Pipeline) -> dict[int, int]:
    consumer = pipe.conn.consumer()
    try:
        return {p: low for p, (low, _) in end_offsets(consumer, pipe.topics.drink_count_repartition,
                                                      [0, 1, 2]).items()}
    finally:
        consumer.close()


def changelog_ends(pipe: Pipeline) -> dict[int, int]:
    consumer = pipe.conn.consumer()
    try:
        return {p: high for p, (_, high) in end_offsets(consumer, pipe.topics.changelog, [0, 1, 2]).items()}
    finally:
        consumer.close()


def test_a_direct_store_goes_on_through_the_shuffle_exact_through_kills(
        pipe: Pipeline, spark: Any, dirs: dict[str, Path], tmp_path: Path) -> None:
    good = feed_with_bad(pipe, 900, seed=61)
    assert run_now(pipe, spark, dirs, max_offsets_per_trigger=300) == 0
    assert_exact(pipe, dirs["state"], good)

    # Through the shuffle from here on: the input stage starts where the store counted to,
    # and every record of the hostile corpus goes to the DLQ once, whole, with its reason.
    more = make_orders(600, seed=62)
    records: list[tuple[bytes | None, bytes | None]] = [order_bytes(o) for o in more]
    bad_at = sorted(random.Random(62).sample(range(len(records) + len(BAD_ORDERS)), len(BAD_ORDERS)))
    for pos, (name, raw, _) in zip(bad_at, BAD_ORDERS, strict=True):
        records.insert(pos, (name.encode(), raw))
    where = produce(pipe.conn, pipe.topics.orders, records)
    assert run_now(pipe, spark, dirs, max_offsets_per_trigger=250, shuffle=True) == 0
    good += more
    assert_exact(pipe, dirs["state"], good, bad=6 + len(BAD_ORDERS))
    dlq = {(int(h["source-partition"]), int(h["source-offset"])): (m.value(), h["error"])
           for m in read_topic(pipe.conn, pipe.topics.dlq) for h in [{k: v.decode() for k, v in m.headers()}]}
    for pos, (name, raw, reason) in zip(bad_at, BAD_ORDERS, strict=True):
        value, error = dlq[where[pos]]
        assert value == raw and reason in error, (name, error)
    bad = 6 + len(BAD_ORDERS) + 2  # with the two below

    # Killed after a task stage's changelog commit, then started again.
    more = make_orders(700, seed=63)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in more))
    good += more
    log = tmp_path / "crash.log"
    crashed = pipe.spawn("run", "--shuffle", "--state-dir", str(dirs["state"]), "--checkpoint-dir", str(dirs["ckpt"]),
                         "--available-now", "--max-offsets-per-trigger", "200",
                         env={"BREWSTREAM_FAULT": "after-changelog-commit@1"}, log=log)
    assert crashed.wait(300) == -signal.SIGKILL, log.read_text()[-3000:]

    # The active SIGKILLed while orders stream in and both stages run, and a hot standby
    # (warmed on the orders while the active purged its parts) takes over.
    active = Instance(pipe, tmp_path, "active", "--shuffle")
    active.state, active.ckpt = dirs["state"], dirs["ckpt"]
    active.start()
    active.wait_for("role: active")
    port = free_port()
    standby = Instance(pipe, tmp_path, "standby", "--shuffle", "--standby", "--http-port", str(port)).start()
    standby.wait_for("role: standby")
    more = make_orders(500, seed=64)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in more))
    good += more
    active.wait_for("input stage batch")
    active.kill()
    standby.wait_for("took over from")
    # Two bad orders through the new active's input stage: each in the DLQ with its reason,
    # and counted by reason in its metrics.
    produce(pipe.conn, pipe.topics.orders, [(b"bad", raw) for _, raw, _ in BAD_ORDERS[7:9]])
    wait_until(lambda: bad_by_reason(port) == {"missing order_id": 1, "order_id is not a string": 1}, 60,
               "the new active's metrics to count both bad orders by reason")
    applied = store_state_wait(standby, len(good))
    wait_until(lambda: all(low_marks(pipe)[t] >= applied.get(t, 0) > 0 for t in range(3)), 60,
               "the repartition topic to be purged below what each task applied")
    # The lag it reports is the orders topic's, and none is left once all is counted.
    wait_until(lambda: api_status(port).get("lag") == 0, 60, "/api/status to show no lag")
    assert api_status(port)["input_topic"] == pipe.topics.orders
    assert standby.stop() == 0
    assert_exact(pipe, standby.state, good, bad=bad)

    state = store_state(standby.state)
    assert state.meta[PROCESSED_ORDERS] == len(good) and state.meta[BAD_ORDERS_KEY] == bad
    latest = {m.key(): m for m in read_topic(pipe.conn, pipe.topics.changelog) if m.key() is not None}
    for drink, n in oracle(good).items():
        m = latest[drink_key(drink)]
        assert m.partition() == task_of(drink_key(drink), 3) and decode_u64(m.value() or b"") == n

    # Input the input stage had not handed on is lost: refused, then skipped when accepted.
    more = make_orders(300, seed=65)
    where = produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in more), partition=0)
    cut = where[120][1]
    admin = pipe.conn.admin()
    for future in admin.delete_records([TopicPartition(pipe.topics.orders, 0, cut)]).values():
        future.result()
    with pytest.raises(BrewError, match="--accept-input-loss"):
        run_now(pipe, spark, dirs, shuffle=True)
    assert run_now(pipe, spark, dirs, shuffle=True, accept_input_loss=True) == 0
    good += more[120:]
    assert_exact(pipe, dirs["state"], good, bad=bad)

    # The repartition topic deleted and re-created: it is derived, and every task had
    # applied all it was handed, so nothing is lost, unasked.
    admin.delete_topics([pipe.topics.drink_count_repartition])[pipe.topics.drink_count_repartition].result()
    wait_until(lambda: recreated(pipe, pipe.topics.drink_count_repartition), 60,
               "the repartition topic to be re-created")
    more = make_orders(200, seed=68)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in more))
    good += more
    assert run_now(pipe, spark, dirs, shuffle=True, max_offsets_per_trigger=80) == 0
    assert_exact(pipe, dirs["state"], good, bad=bad)

    # The direct pipeline refuses the store before it writes anything for it, input it
    # could skip (lost, and accepted) included: the changelog is left as it was.
    where = produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in make_orders(40, seed=67)), partition=0)
    for future in admin.delete_records([TopicPartition(pipe.topics.orders, 0, where[-1][1] + 1)]).values():
        future.result()
    written = changelog_ends(pipe)
    for accept in (False, True):
        with pytest.raises(BrewError, match="--shuffle"):
            run_now(pipe, spark, dirs, accept_input_loss=accept)
    assert changelog_ends(pipe) == written

    # The orders topic re-created, its offsets already past the store's on every partition:
    # only its identity tells. The shuffle's cursors cannot follow it: refused either way.
    handed_on = store_state(dirs["state"]).next_offsets(pipe.topics.orders)
    admin.delete_topics([pipe.topics.orders])[pipe.topics.orders].result()
    wait_until(lambda: recreated(pipe, pipe.topics.orders), 60, "the orders topic to be re-created")
    for partition, offset in handed_on.items():
        produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in make_orders(offset + 5, seed=66)),
                partition=partition)
    for accept in (False, True):
        with pytest.raises(BrewError, match=r"re-created or truncated.*count it under new topics"):
            run_now(pipe, spark, dirs, shuffle=True, accept_input_loss=accept)


def recreated(pipe: Pipeline, topic: str) -> bool:
    try:
        return dict(create_topics(pipe.conn, 3, 1, pipe.topics)).get(topic) == "created"
    except BrewError:  # still being deleted
        return False


def api_status(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=10) as answer:
        body: dict[str, Any] = json.load(answer)
    return body


def bad_by_reason(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {s.labels["reason"]: s.value for family in text_string_to_metric_families(text)
            if family.name == "brewstream_bad_records" for s in family.samples
            if s.name == "brewstream_bad_records_total" and s.value}


def store_state_wait(daemon: Instance, orders: int) -> dict[int, int]:
    """Once the daemon's store has counted ``orders`` good orders: its repartition offsets."""
    def counted() -> bool:
        try:
            return store_state(daemon.state).meta.get(PROCESSED_ORDERS) == orders
        except Exception:  # the store is being written: look again
            return False

    wait_until(counted, 180, f"the store to count {orders} orders")
    state = store_state(daemon.state)
    return state.next_offsets(daemon.pipe.topics.drink_count_repartition)
