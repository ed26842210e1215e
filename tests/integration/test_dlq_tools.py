"""`brewstream dlq show|export|replay` on a real broker and the real daemon: a rule-rejected
record replayed after the rule changed is counted once, an interrupted replay replays
nothing twice, an exported and repaired file goes back in and is counted once."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from tests.support.drink_count import make_orders, run_available_now
from tests.support.helpers import Pipeline, brew, counts_json, create_topic, oracle, order_bytes, produce, read_topic
from topics.admin import create_topics
from topics.catalog import Topics

pytestmark = pytest.mark.spark

LIMIT = 32  # --max-name-bytes for the runs that reject the long names
REASON = f"over the {LIMIT}-byte limit"


def long_orders(n: int, tag: str) -> list[dict[str, Any]]:
    """Orders whose one drink has a 35-byte name: bad under LIMIT, good under the default."""
    return [{"order_id": f"{tag}-{i}", "shop_id": "shop-09",
             "items": [{"drink": f"extra hot oat flat white {tag} {i:04d}"[:35].ljust(35, "."), "quantity": i + 1}]}
            for i in range(n)]


def input_copies(pipe: Pipeline, committed_only: bool = True) -> list[str]:
    """The dlq-source header of every record sent back to the input topic."""
    return [dict(m.headers() or [])["dlq-source"].decode() for m in read_topic(pipe.conn, pipe.topics.orders,
                                                                               committed_only)
            if "dlq-source" in dict(m.headers() or [])]


def replay(pipe: Pipeline, *args: str, fault: str | None = None) -> Any:
    env = {**pipe.env, **({"BREWSTREAM_FAULT": fault} if fault else {})}
    return brew(pipe.conn, "dlq", "replay", *args, env=env, timeout=120)


def test_a_rejected_record_is_replayed_after_the_limit_is_raised_and_counted_once(
        pipe: Pipeline, spark: Any, dirs: dict[str, Path]) -> None:
    good, long = make_orders(200, seed=50), long_orders(6, "a")
    produce(pipe.conn, pipe.topics.orders, [order_bytes(o) for o in good + long])
    assert run_available_now(pipe, spark, dirs, max_name_bytes=LIMIT) == 0
    assert counts_json(pipe.conn, dirs["state"])["counts"] == oracle(good)

    shown = json.loads(pipe.brew("dlq", "show", "--json", check=True).stdout)
    assert [(g["reason"], g["count"], g["replayed"]) for g in shown["reasons"]] == [
        ("drink is N bytes, over the N-byte limit", 6, 0)]
    assert shown["reasons"][0]["samples"][0]["reason"] == f"item 0: drink is 35 bytes, {REASON}"

    ends = read_topic(pipe.conn, pipe.topics.orders)
    dry = replay(pipe, "--dry-run")
    assert dry.returncode == 0 and f"would replay 6 (6 to {pipe.topics.orders})" in dry.stdout, dry.stderr
    assert len(read_topic(pipe.conn, pipe.topics.orders)) == len(ends)  # a dry run sends nothing

    # Replayed while the rule still holds: each lands in the DLQ again, with its reason, counted nowhere.
    first = replay(pipe, "--reason", REASON)
    assert first.returncode == 0 and "replayed 6" in first.stdout, first.stderr
    assert run_available_now(pipe, spark, dirs, max_name_bytes=LIMIT) == 0
    assert counts_json(pipe.conn, dirs["state"])["counts"] == oracle(good)
    dlq = read_topic(pipe.conn, pipe.topics.dlq)
    assert len(dlq) == 12 and all(REASON in dict(m.headers())["error"].decode() for m in dlq)

    # The rule is raised: the second-generation copies go back and are counted, once.
    second = replay(pipe, "--reason", REASON)
    assert second.returncode == 0, second.stderr
    assert "replayed 6" in second.stdout and "skipped 6 already replayed" in second.stdout
    assert run_available_now(pipe, spark, dirs) == 0
    assert counts_json(pipe.conn, dirs["state"])["counts"] == oracle(good + long)
    assert len(read_topic(pipe.conn, pipe.topics.dlq)) == 12

    third = replay(pipe)
    assert "replayed 0" in third.stdout and "skipped 12 already replayed" in third.stdout
    assert json.loads(pipe.brew("dlq", "show", "--json", check=True).stdout)["reasons"][0]["replayed"] == 12
    # Bytes and keys untouched: every copy is its original, byte for byte.
    originals = {f"{pipe.topics.orders}:{m.partition()}:{m.offset()}": (m.key(), m.value())
                 for m in read_topic(pipe.conn, pipe.topics.orders)}
    copies = [m for m in read_topic(pipe.conn, pipe.topics.orders) if "dlq-source" in dict(m.headers() or [])]
    assert len(copies) == 12
    for m in copies:
        assert originals[dict(m.headers())["dlq-source"].decode()] == (m.key(), m.value())


def test_an_interrupted_replay_run_again_replays_nothing_twice(pipe: Pipeline, spark: Any,
                                                              dirs: dict[str, Path]) -> None:
    good, long = make_orders(100, seed=51), long_orders(20, "b")
    produce(pipe.conn, pipe.topics.orders, [order_bytes(o) for o in good + long])
    assert run_available_now(pipe, spark, dirs, max_name_bytes=LIMIT) == 0

    # Killed inside its second transaction (five records committed, five open), then killed
    # right after its next commit (five more), then run to the end.
    killed = replay(pipe, "--batch", "5", fault="replay-mid-transaction@2")
    assert killed.returncode == -9, killed.stderr
    assert len(input_copies(pipe)) == 5
    killed = replay(pipe, "--batch", "5", fault="replay-after-commit@1")
    assert killed.returncode == -9, killed.stderr
    last = replay(pipe, "--batch", "5")
    assert last.returncode == 0, last.stderr
    assert "replayed 10" in last.stdout and "skipped 10 already replayed" in last.stdout

    committed = input_copies(pipe)
    assert len(committed) == 20 and len(set(committed)) == 20
    assert len(input_copies(pipe, committed_only=False)) == 25  # the aborted five are in the log, invisible
    assert run_available_now(pipe, spark, dirs) == 0
    assert counts_json(pipe.conn, dirs["state"])["counts"] == oracle(good + long)


def test_an_exported_and_repaired_file_goes_back_in_and_is_counted_once(
        pipe: Pipeline, spark: Any, tmp_path: Path) -> None:
    # A DLQ that holds at most 3,000 bytes a record, so the 6,000-byte order is cut in it.
    cut_pipe = Pipeline(pipe.conn, Topics(pipe.topics.prefix + "cut."))
    create_topic(pipe.conn, cut_pipe.topics.dlq, 3, {"max.message.bytes": "3000"})
    create_topics(pipe.conn, 3, 1, cut_pipe.topics)
    dirs = {"state": tmp_path / "s", "ckpt": tmp_path / "c"}
    good, long = make_orders(100, seed=52), long_orders(4, "c")
    big = {"order_id": "big", "shop_id": "shop-01", "items": [{"drink": "x" * 6000, "quantity": 3}]}
    where = produce(pipe.conn, cut_pipe.topics.orders, [order_bytes(o) for o in [*good, *long, big]])
    produce(pipe.conn, cut_pipe.topics.orders, [(None, b"\xff\xfe not an order")])
    assert run_available_now(cut_pipe, spark, dirs, max_name_bytes=LIMIT) == 0
    dlq = read_topic(pipe.conn, cut_pipe.topics.dlq)
    assert len(dlq) == 6 and sum("truncated" in dict(m.headers()) for m in dlq) == 1

    exported = tmp_path / "dlq.jsonl"
    out = cut_pipe.brew("dlq", "export", "--out", str(exported), check=True)
    assert "6 records" in out.stderr and "1 cut in the DLQ, written whole from their source topic" in out.stderr
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    assert not any(line["truncated"] for line in lines)
    assert next(line for line in lines if '"big"' in (line.get("value") or ""))["value"] == \
        json.dumps(big)  # whole again, read back from the input topic
    assert next(line for line in lines if "value_base64" in line)["reason"] == "invalid UTF-8"

    # The repair: shorter names; the undecodable record is dropped.
    repaired = []
    for line in lines:
        if "value_base64" in line:
            continue
        order = json.loads(line["value"])
        for item in order["items"]:
            item["drink"] = item["drink"][:10]
        line["value"] = json.dumps(order)
        repaired.append(order)
    fixed = tmp_path / "repaired.jsonl"
    fixed.write_text("".join(json.dumps(line) + "\n" for line in lines if "value_base64" not in line))
    fed = cut_pipe.brew("seed-orders", "--file", str(fixed), check=True)
    assert "sent 5 records" in fed.stdout
    assert run_available_now(cut_pipe, spark, dirs, max_name_bytes=LIMIT) == 0
    assert counts_json(pipe.conn, dirs["state"])["counts"] == oracle(good + repaired)
    assert Counter("dlq-source" in dict(m.headers() or []) for m in read_topic(pipe.conn, cut_pipe.topics.orders)
                   )[True] == 5

    # Once the input no longer holds the big order, its DLQ copy is all there is: exported in
    # part, and refused by seed-orders in one line before anything is sent.
    big_partition, big_offset = where[-1]
    admin = pipe.conn.admin()
    for f in admin.delete_records([TopicPartition(cut_pipe.topics.orders, big_partition, big_offset + 1)]).values():
        f.result()
    partial = cut_pipe.brew("dlq", "export", "--out", str(exported), "--reason", "drink is 6000", check=True)
    assert "1 only in part" in partial.stderr
    line = json.loads(exported.read_text())
    assert line["truncated"] is True and len(line["value"]) < 3000
    refused = cut_pipe.brew("seed-orders", "--file", str(exported))
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1
    assert "line 1 of" in refused.stderr and "only part of the record" in refused.stderr


def test_a_replay_ledger_that_deletes_by_retention_is_named(pipe: Pipeline) -> None:
    """A ledger that forgets (Kafka's default policy on a topic made by hand) would let the
    same replay, run again later, send its records twice: the replay says so."""
    from tests.support.helpers import set_topic_config
    from topics.clock import wait_until
    from topics.kafka import deletion_risk

    ledger = pipe.topics.dlq_replays
    quiet = replay(pipe, "--dry-run")
    assert quiet.returncode == 0 and "replay ledger" not in quiet.stderr, quiet.stderr
    set_topic_config(pipe.conn, ledger, cleanup_policy="delete")
    wait_until(lambda: deletion_risk(pipe.conn, ledger), 30, "the broker to apply the policy")
    warned = replay(pipe, "--dry-run")
    assert warned.returncode == 0, warned.stderr
    assert f"the replay ledger {ledger} is not compacted (cleanup.policy=delete)" in warned.stderr, warned.stderr
    assert "cleanup.policy=compact" in warned.stderr.split("is not compacted", 1)[1]
