"""Scenario 2: restore throughput from a changelog that compaction has not touched.

brewstream's side: ``--changelog-records`` records over ``--changelog-keys`` drink keys,
written with plain (non-transactional) produces to a changelog topic created with
``cleanup.policy=delete``, so every record is still there to be read. ``brewstream
restore`` rebuilds an empty store from it; the limit is a plain consumer reading the
same topic into a dict.

Quix's side: Quix can only recover a changelog in its own format (key prefixes, JSON
values, column-family headers), so its own application writes one of the same size
over the same number of keys (see bench/quix/changelog_app.py), and a cold start on an
empty state dir recovers it. Every restore must end with the last value of every key.
"""

from __future__ import annotations

from typing import Any

import orjson

from bench.context import BenchContext
from bench.dataset import produce_changelog
from bench.errors import BenchError
from bench.kafka_topics import create_plain, high_watermarks, topics_containing
from bench.runs import RestoreRun
from bench.stats import ratio, summarize
from bench.systems import kstreams, ours, plain, quix


def run(ctx: BenchContext) -> dict[str, Any]:
    cfg = ctx.cfg
    records, keys = cfg.changelog_records, cfg.changelog_keys
    topics = ctx.topics("restore")
    create_plain(ctx.conn, topics.changelog, cfg.partitions, {"cleanup.policy": "delete", "retention.ms": "-1"})
    ctx.say(f"restore: writing {records:,} changelog records over {keys:,} keys to {topics.changelog}")
    expected = produce_changelog(ctx.conn, topics.changelog, records, keys, cfg.partitions)
    written = sum(high_watermarks(ctx.conn, topics.changelog).values())
    if written != records:
        raise BenchError(f"{topics.changelog} holds {written} records, expected {records}")

    systems: dict[str, list[RestoreRun]] = {}
    for rep in range(1, cfg.reps + 1):
        if cfg.runs("plain"):
            systems.setdefault("limit", []).append(_say(ctx, rep, plain.restore(ctx, topics.changelog, expected)))
        if cfg.runs("ours"):
            systems.setdefault("ours", []).append(_say(ctx, rep, ours.restore(ctx, topics, expected)))

    ks_setup = None
    if cfg.runs("kstreams"):
        ks_setup = _kstreams_changelog(ctx, expected)
        systems["kafka streams"] = [_say(ctx, rep, kstreams.restore(
            ctx, ks_setup["app_id"], ks_setup["input"], ks_setup["output"], expected, records))
            for rep in range(1, cfg.reps + 1)]

    quix_setup = None
    if cfg.runs("quix"):
        quix_setup = _quix_changelog(ctx)
        for rep in range(1, cfg.reps + 1):
            _probe(ctx, quix_setup["topic"], cfg.partitions)
            systems.setdefault("quix", []).append(_say(ctx, rep, quix.recover(
                ctx, quix_setup["topic"], quix_setup["group"], cfg.partitions, keys, quix_setup["records"],
                quix_setup["last_round"])))

    med = {name: summarize([r.records_per_s for r in runs]).median for name, runs in systems.items()}
    return {
        "records": records, "keys": keys, "topic_config": "cleanup.policy=delete (nothing compacted)",
        "systems": {name: _summary(runs) for name, runs in systems.items()},
        "quix_changelog": quix_setup,
        "kstreams_changelog": ks_setup,
        "ratios": {f"ours/{name}": ratio(med.get("ours"), m) for name, m in med.items() if name != "ours"},
        "values_verified": True,
    }


def _kstreams_changelog(ctx: BenchContext, expected: dict[str, int]) -> dict[str, Any]:
    """Kafka Streams' changelog of a key-value store holds what brewstream's does: the key in
    UTF-8 and the value as an 8-byte big-endian long (Serdes.Long; a timestamped store keeps
    the timestamp in the record's). So the same records are written again, the same way, to
    the changelog topic of the application's store, created as brewstream's was (no
    compaction); the application then restores it into an empty state dir."""
    cfg = ctx.cfg
    app_id = f"bench-{ctx.stamp}-{ctx.fresh('kstreams-restore')}"
    changelog = kstreams.changelog_topic(app_id)
    setup = {"app_id": app_id, "input": f"{app_id}-orders", "output": f"{app_id}-out", "changelog": changelog}
    for topic in (setup["input"], setup["output"]):
        create_plain(ctx.conn, topic, cfg.partitions)
    create_plain(ctx.conn, changelog, cfg.partitions, {"cleanup.policy": "delete", "retention.ms": "-1"})
    ctx.say(f"restore: writing the same {cfg.changelog_records:,} records to Kafka Streams' changelog {changelog}")
    if produce_changelog(ctx.conn, changelog, cfg.changelog_records, cfg.changelog_keys, cfg.partitions) != expected:
        raise BenchError("the Kafka Streams changelog differs from brewstream's")
    return setup


def _quix_changelog(ctx: BenchContext) -> dict[str, Any]:
    """Quix's application writes its own changelog: one message per slot and round, each
    setting every key of its slot, so rounds x keys records land in Quix's changelog."""
    cfg = ctx.cfg
    slots, keys = cfg.partitions, cfg.changelog_keys
    rounds = max(1, cfg.changelog_records // keys)
    topic = ctx.topics("quix-restore").prefix + "writes"
    group = f"bench-{ctx.stamp}-{ctx.fresh('quix-restore')}"
    create_plain(ctx.conn, topic, slots)
    producer = ctx.conn.producer({"linger.ms": 5, "enable.idempotence": True})
    for rnd in range(rounds):
        for slot in range(slots):
            producer.produce(topic, key=f"slot-{slot}".encode(), value=orjson.dumps({"round": rnd, "slot": slot}),
                             partition=slot)
        producer.poll(0)
    producer.flush(60)
    ctx.say(f"restore: Quix writes its own changelog ({rounds:,} rounds x {keys:,} keys)")
    write_s = quix.write_changelog(ctx, topic, group, slots, keys, rounds * slots)
    changelogs = [t for t in topics_containing(ctx.conn, f"changelog__{group}") if t.endswith("--default")]
    if len(changelogs) != 1:
        raise BenchError(f"expected one Quix changelog topic for group {group}, found {changelogs}")
    records = sum(high_watermarks(ctx.conn, changelogs[0]).values())
    if records != rounds * keys:
        raise BenchError(f"Quix wrote {records} changelog records, expected {rounds * keys}")
    return {"topic": topic, "group": group, "changelog_topic": changelogs[0], "records": records,
            "rounds": rounds, "last_round": rounds - 1, "write_s": write_s,
            "written_by": "Quix at-least-once, commit_every=1 (one checkpoint per message)"}


def _probe(ctx: BenchContext, topic: str, slots: int) -> None:
    """One message per partition for the recovering app to read its state back with."""
    producer = ctx.conn.producer({"linger.ms": 0})
    for slot in range(slots):
        producer.produce(topic, key=f"slot-{slot}".encode(), value=orjson.dumps({"probe": True, "slot": slot}),
                         partition=slot)
    producer.flush(30)


def _say(ctx: BenchContext, rep: int, run: RestoreRun) -> RestoreRun:
    ctx.say(f"restore: {run.system} rep {rep}: {run.records:,} records in {run.seconds:.2f}s = "
            f"{run.records_per_s:,.0f} records/s (wall {run.wall_s:.1f}s)")
    return run


def _summary(runs: list[RestoreRun]) -> dict[str, Any]:
    return {
        "records_per_s": summarize([r.records_per_s for r in runs]),
        "seconds": summarize([r.seconds for r in runs]),
        "wall_s": summarize([r.wall_s for r in runs]),
        "peak_rss_bytes": summarize([float(r.peak_rss) for r in runs]),
        "runs": [{"records": r.records, "keys": r.keys, "seconds": r.seconds, "wall_s": r.wall_s,
                  "peak_rss_bytes": r.peak_rss, **r.detail} for r in runs],
    }
