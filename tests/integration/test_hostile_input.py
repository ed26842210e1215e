"""Input nobody on the team wrote: poison records, floods of garbage, huge names, aborted
and open upstream transactions, a damaged checkpoint. The daemon keeps counting, the counts are
exact, every bad record reaches the DLQ once."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer

from tests.support.drink_count import make_orders
from tests.support.helpers import Pipeline, counts_json, oracle, order_bytes, produce, read_topic, set_topic_config
from topics.clock import wait_until
from topics.event_time import encode_event_time

pytestmark = pytest.mark.spark


def run_cli(pipe: Pipeline, tmp_path: Path, *extra: str, timeout: float = 600) -> Any:
    proc = pipe.brew("run", "--state-dir", str(tmp_path / "state"), "--checkpoint-dir", str(tmp_path / "ckpt"),
                     "--available-now", *extra, timeout=timeout)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc


def dlq_by_offset(pipe: Pipeline) -> dict[tuple[int, int], Any]:
    out = {}
    for m in read_topic(pipe.conn, pipe.topics.dlq):
        h = dict(m.headers())
        out[(int(h["source-partition"]), int(h["source-offset"]))] = m
    return out


def test_poison_orders_go_to_the_dlq_and_counting_goes_on(pipe: Pipeline, tmp_path: Path) -> None:
    """items a number, a 5 MB order, a 100 KB drink name: each to the DLQ with a reason."""
    set_topic_config(pipe.conn, pipe.topics.orders, max_message_bytes=str(8 * 1024 * 1024))
    good = make_orders(300, seed=40)
    poison = [
        b'{"order_id":"b","shop_id":"s","items":5}',
        b'{"order_id":"b","shop_id":"s","items":true}',
        b'{"order_id":"b","shop_id":"s","items":[[1]]}',
        b'{"order_id":"' + b"x" * (5 * 1024 * 1024) + b'","shop_id":"s"}',  # 5 MB, no items
        json.dumps({"order_id": "o", "shop_id": "s", "items": [{"drink": "y" * 100_000, "quantity": 1}]}).encode(),
    ]
    p = Producer({"bootstrap.servers": pipe.conn.bootstrap, "message.max.bytes": 8 * 1024 * 1024})
    where: dict[bytes, tuple[int, int]] = {}
    for i, raw in enumerate(poison):
        # Brokers apply a config change a moment after they acknowledge it: retry until taken.
        def sent(raw: bytes = raw, i: int = i) -> bool:
            result: list[Any] = []
            p.produce(pipe.topics.orders, key=b"poison", value=raw, partition=i % 3,
                      on_delivery=lambda err, msg: result.append((err, msg.partition(), msg.offset())))
            p.flush(30)
            if result and result[0][0] is None:
                where[raw[:60]] = (result[0][1], result[0][2])
                return True
            assert result and result[0][0].code() == KafkaError.MSG_SIZE_TOO_LARGE, result
            return False

        wait_until(sent, 60, "the broker to take a 5 MB record")
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in good))

    proc = run_cli(pipe, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert counts_json(pipe.conn, tmp_path / "state")["counts"] == oracle(good)
    dlq = dlq_by_offset(pipe)
    assert len(dlq) == len(read_topic(pipe.conn, pipe.topics.dlq)) == len(poison)
    reasons = {raw[:60]: dict(dlq[where[raw[:60]]].headers())["error"].decode() for raw in poison}
    assert reasons[poison[0][:60]] == "items is not a list"
    assert reasons[poison[2][:60]] == "item 0 is not an object"
    assert "over the 256-byte limit" in reasons[poison[4][:60]]
    big = dlq[where[poison[3][:60]]]
    headers = dict(big.headers())
    assert headers["truncated"] == b"value" and int(headers["original-size"]) == len(poison[3])
    assert poison[3].startswith(big.value()) and 0 < len(big.value()) < 1_048_588  # the DLQ topic's limit
    # The top-N snapshot never carries a name over the limit.
    snapshot = json.loads(read_topic(pipe.conn, pipe.topics.counts)[-1].value())
    assert all(len(r["drink"]) <= 256 for r in snapshot["top"])


def test_large_orders_are_counted_by_the_second_pass(pipe: Pipeline, tmp_path: Path) -> None:
    """Orders whose key and value exceed what the first pass sends unmeasured (3,355 bytes
    by default; aggregate_batch): good ones are counted, bad ones reach the DLQ, once each,
    beside small orders in the same batch."""
    small = make_orders(200, seed=41)
    large = [{"order_id": f"big-{i}", "shop_id": "shop-01",
              "items": [{"drink": f"drink-{j % 7}", "quantity": 1 + (i + j) % 3} for j in range(150)]}
             for i in range(6)]
    assert all(len(order_bytes(o)[1]) > 4_000 for o in large)
    long_key = ({"order_id": "k", "shop_id": "s", "items": [{"drink": "latte", "quantity": 2}]}, b"k" * 5_000)
    bad_large = b'{"order_id":"b","shop_id":"s","items":[' + b'{"drink":"x","quantity":1},' * 200 + b'5]}'
    records = [order_bytes(o) for o in small[:100]] + [order_bytes(o) for o in large]
    records += [(long_key[1], json.dumps(long_key[0]).encode()), (b"s", bad_large)]
    records += [order_bytes(o) for o in small[100:]]
    where = produce(pipe.conn, pipe.topics.orders, records)

    proc = run_cli(pipe, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert counts_json(pipe.conn, tmp_path / "state")["counts"] == oracle([*small, *large, long_key[0]])
    dlq = dlq_by_offset(pipe)
    assert list(dlq) == [where[-len(small[100:]) - 1]]
    assert dict(dlq[where[-len(small[100:]) - 1]].headers())["error"] == b"item 200 is not an object"


def test_a_flood_of_big_garbage_goes_whole_to_the_dlq(pipe: Pipeline, tmp_path: Path) -> None:
    """1,300 garbage records of ~0.9 MB (1.2 GB, more than the driver's default 1 GiB heap)
    with default flags: the run ends, each record whole in the DLQ, the counts exact. (What
    a batch costs in memory is measured by the benchmark, not asserted here.)"""
    junk = [bytes([65 + i % 26]) * 900_000 for i in range(1300)]
    good = make_orders(200, seed=41)
    p = Producer({"bootstrap.servers": pipe.conn.bootstrap, "linger.ms": 20})
    for i, raw in enumerate(junk):
        p.produce(pipe.topics.orders, key=str(i).encode(), value=raw)
        if i % 50 == 0:
            p.poll(0)
    assert p.flush(120) == 0
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in good))

    proc = run_cli(pipe, tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert counts_json(pipe.conn, tmp_path / "state")["counts"] == oracle(good)
    dlq = dlq_by_offset(pipe)
    assert len(dlq) == len(junk)
    assert {dict(m.headers())["error"] for m in dlq.values()} == {b"not JSON"}
    assert sorted(len(m.value()) for m in dlq.values()) == [900_000] * len(junk)  # whole: they fit


def test_aborted_upstream_transactions_count_nothing(pipe: Pipeline, tmp_path: Path) -> None:
    good = make_orders(400, seed=42)
    aborted = make_orders(150, seed=43)
    p = Producer({"bootstrap.servers": pipe.conn.bootstrap, "transactional.id": f"upstream-{pipe.topics.prefix}"})
    p.init_transactions(30)
    for chunk, commit in ((good[:200], True), (aborted, False), (good[200:], True)):
        p.begin_transaction()
        for o in chunk:
            k, v = order_bytes(o)
            p.produce(pipe.topics.orders, key=k, value=v)
        p.flush(30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    first = run_cli(pipe, tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert counts_json(pipe.conn, tmp_path / "state")["counts"] == oracle(good)
    # The store's offsets agree with Spark's across the transaction markers: the next
    # start resumes from the checkpoint instead of dropping it.
    more = make_orders(100, seed=44)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in more))
    second = run_cli(pipe, tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resuming from the checkpoint" in second.stderr
    assert "ahead of the store" not in second.stderr
    assert counts_json(pipe.conn, tmp_path / "state")["counts"] == oracle(good + more)


def test_an_open_upstream_transaction_holds_back_only_what_follows_it(pipe: Pipeline, tmp_path: Path) -> None:
    """An upstream producer leaves a transaction open: a read-committed reader stops at its
    first record (the last stable offset), so the run counts what came before it and ends;
    once it commits, the next run counts it and everything after it, each once."""
    before, pending, after = make_orders(200, seed=46), make_orders(100, seed=47), make_orders(150, seed=48)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in before), partition=0)
    p = Producer({"bootstrap.servers": pipe.conn.bootstrap, "transactional.id": f"open-{pipe.topics.prefix}"})
    p.init_transactions(30)
    p.begin_transaction()
    for o in pending:
        k, v = order_bytes(o)
        p.produce(pipe.topics.orders, key=k, value=v, partition=0)
    p.flush(30)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in after), partition=0)
    first = run_cli(pipe, tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert counts_json(pipe.conn, tmp_path / "state")["counts"] == oracle(before)
    p.commit_transaction(30)
    second = run_cli(pipe, tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    assert counts_json(pipe.conn, tmp_path / "state")["counts"] == oracle(before + pending + after)


def test_a_partition_held_back_by_an_open_upstream_transaction_is_said_once(pipe: Pipeline,
                                                                            tmp_path: Path) -> None:
    """Under a running daemon, an upstream producer leaves a transaction open on partition 1:
    by Kafka's design that partition stands still until the transaction ends (the others go
    on). Before, nothing said why. Now the log says it once, `status` names the partition and
    the metric holds the records held back; all of it clears once the transaction commits,
    and the counts are exact."""
    from sandbox.broker import free_port
    from tests.support.http import metric

    first, pending, later = make_orders(200, seed=146), make_orders(60, seed=147), make_orders(90, seed=148)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in first))
    state, port, log = tmp_path / "state", free_port(), tmp_path / "daemon.log"
    daemon = pipe.spawn("run", "--state-dir", str(state), "--checkpoint-dir", str(tmp_path / "ckpt"), "--flush", "1s",
                        "--http-port", str(port), log=log)
    upstream = Producer({"bootstrap.servers": pipe.conn.bootstrap, "transactional.id": f"held-{pipe.topics.prefix}",
                         "transaction.timeout.ms": 300_000})
    open_transaction = False
    said = f"input {pipe.topics.orders} partition 1 is held back by an open upstream transaction"

    def status() -> dict[str, Any]:
        proc = pipe.brew("status", "--state-dir", str(state), "--json", check=True)
        return {p["partition"]: p for p in json.loads(proc.stdout)["partitions"]}

    try:
        wait_until(lambda: "processed=200" in log.read_text(), 300, "the daemon to count the first orders")
        upstream.init_transactions(30)
        upstream.begin_transaction()
        open_transaction = True
        for o in pending:
            k, v = order_bytes(o)
            upstream.produce(pipe.topics.orders, key=k, value=v, partition=1)
        upstream.flush(30)
        behind = [order_bytes(o) for o in later]
        produce(pipe.conn, pipe.topics.orders, behind[:45], partition=1)  # behind the open transaction
        produce(pipe.conn, pipe.topics.orders, behind[45:], partition=0)  # another partition goes on
        line = wait_until(lambda: next((ln for ln in log.read_text().splitlines() if said in ln), None), 120,
                          "the daemon to say partition 1 is held back")
        assert f"{len(pending) + 45} records past its last stable offset" in line, line
        held = status()
        assert held[1]["held_back"] == len(pending) + 45 and held[1]["held_since"], held
        assert held[0]["held_back"] == 0 and held[0]["lag"] == 0, held  # it went on
        text = pipe.brew("status", "--state-dir", str(state), check=True).stdout
        assert "partition 1 held back by an open upstream transaction since" in text, text
        assert wait_until(lambda: metric(port, "brewstream_input_held_back_records", partition="1"), 30,
                          "the metric") == len(pending) + 45
        upstream.commit_transaction(30)
        open_transaction = False
        wait_until(lambda: f"input {pipe.topics.orders} partition 1 goes on" in log.read_text(), 120,
                   "the daemon to say partition 1 goes on")
        wait_until(lambda: metric(port, "brewstream_input_held_back_records", partition="1") == 0, 30,
                   "the metric to clear")
        wait_until(lambda: status()[1]["held_back"] == 0, 60, "status to clear")
        wait_until(lambda: counts_json(pipe.conn, state)["counts"] == oracle(first + pending + later), 120,
                   "every order counted once")
        assert log.read_text().count(said) == 1  # said once
    finally:
        if open_transaction:  # the shared broker keeps no transaction of this test open
            upstream.abort_transaction(30)
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(120) == 0, log.read_text()[-3000:]


def test_a_truncated_checkpoint_is_dropped_with_a_warning(pipe: Pipeline, tmp_path: Path) -> None:
    first = make_orders(500, seed=45)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in first))
    assert run_cli(pipe, tmp_path, "--max-offsets-per-trigger", "200").returncode == 0
    offsets = tmp_path / "ckpt" / "offsets"
    last = max((f for f in offsets.iterdir() if f.name.isdigit()), key=lambda f: int(f.name))
    last.write_bytes(last.read_bytes()[: len(last.read_bytes()) // 2])  # a crash on a full disk
    second = make_orders(300, seed=46)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in second))
    proc = run_cli(pipe, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "checkpoint" in proc.stderr and "damaged" in proc.stderr
    assert counts_json(pipe.conn, tmp_path / "state")["counts"] == oracle(first + second)


def test_a_batch_planned_but_never_committed_is_planned_again_to_the_inputs_end(pipe: Pipeline,
                                                                               tmp_path: Path) -> None:
    """A driver killed after its store commit and before Spark's: Spark would run that
    batch's range again on its own, then the rest; brewstream has it planned again with
    everything since, one batch, and the store's offsets keep what it had applied once."""
    first = make_orders(500, seed=47)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in first))
    assert run_cli(pipe, tmp_path, "--max-offsets-per-trigger", "200").returncode == 0
    commits = tmp_path / "ckpt" / "commits"
    last = max(int(f.name) for f in commits.iterdir() if f.name.isdigit())
    for f in commits.iterdir():
        if f.name.lstrip(".").split(".")[0] == str(last):
            f.unlink()  # Spark never recorded the batch the store holds
    second = make_orders(300, seed=48)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in second))
    proc = run_cli(pipe, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"batch {last} was planned but not committed by the last run" in proc.stderr
    batches = re.findall(r"batch (\d+) \(seq \d+\): orders=(\d+)", proc.stderr)
    assert batches == [(str(last), "300")], proc.stderr[-3000:]
    assert counts_json(pipe.conn, tmp_path / "state")["counts"] == oracle(first + second)


def test_poison_events_do_not_stop_the_windows(pipe: Pipeline, tmp_path: Path) -> None:
    """An event-time of 2^64-1, an amount of 1e300, a 70,000-character shop with sessions."""
    t0 = 1_795_000_000 * 10**9
    p = Producer({"bootstrap.servers": pipe.conn.bootstrap})
    poison = [
        (b"s", b'{"shop_id":"s","drink":"latte","amount":2.5}', encode_event_time(2**64 - 1)),
        (b"s", b'{"shop_id":"s","drink":"latte","amount":1e300}', encode_event_time(t0)),
        (b"s", json.dumps({"shop_id": "x" * 70_000, "drink": "latte", "amount": 1}).encode(), encode_event_time(t0)),
        (b"s", b'{"shop_id":"s","drink":"latte","amount":2}', b"\x01\x02"),
    ]
    for k, v, h in poison:
        p.produce(pipe.topics.events, key=k, value=v, partition=0, headers=[("event-time", h)])
    good = [(f"shop-{i % 3}", t0 + i * 10**9) for i in range(50)]
    for shop, t in good:
        p.produce(pipe.topics.events, key=shop.encode(), partition=0, headers=[("event-time", encode_event_time(t))],
                  value=json.dumps({"shop_id": shop, "drink": "latte", "amount": 2.5}).encode())
    assert p.flush(30) == 0
    proc = pipe.brew("windows", "--state-dir", str(tmp_path / "state"), "--checkpoint-dir", str(tmp_path / "ckpt"),
                     "--available-now", "--session-gap", "5s", "--from", "earliest", "--watermark-delay", "1s",
                     timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    dlq = read_topic(pipe.conn, pipe.topics.dlq)
    assert len(dlq) == len(poison)
    reasons = sorted(dict(m.headers())["error"].decode() for m in dlq)
    assert any("event time" in r and "out of range" in r for r in reasons), reasons
    assert any(r.startswith("amount") and "out of range" in r for r in reasons), reasons
    assert any("shop_id is 70000 bytes" in r for r in reasons), reasons
    assert "events=54" in proc.stderr
