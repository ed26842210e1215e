"""The input, checked before a query starts: what the store still has to count must still
be in the topic (a decision, never a crash, when it is not), and a brand-new store that
starts at the latest offsets records them first."""

from __future__ import annotations

import logging

from restorer.changelog import ChangelogWriter
from restorer.codec import Entry, encode_u64, input_topic_id_name, local_key, offset_key
from restorer.commit import commit_batch
from restorer.store import Store
from service.engine.start_point import input_gaps
from service.ops.metrics import Metrics
from topics.errors import BrewError
from topics.kafka import KafkaConnection, describe_topic, end_offsets

log = logging.getLogger("brewstream")


def check_input(conn: KafkaConnection, store: Store, changelog: ChangelogWriter, topic: str, accept_loss: bool,
                metrics: Metrics | None = None) -> None:
    """Refuse to start when the input lost what the store has not counted yet (deleted by
    retention, or the topic re-created); with ``accept_loss``, skip it, say so and count it."""
    shape = describe_topic(conn, topic)
    recorded = store.local(input_topic_id_name(topic))
    consumer = conn.consumer()
    try:
        offsets = end_offsets(consumer, topic, list(range(shape.partitions)))
    finally:
        consumer.close()
    recreated = recorded is not None and recorded.decode() != shape.topic_id
    gaps = input_gaps(store.next_offsets(topic), offsets, recreated)
    identity: list[Entry] = [(local_key(input_topic_id_name(topic)), shape.topic_id.encode())]
    if not gaps:
        if recorded is None:
            store.commit(identity)
        return
    what = "; ".join(g.describe() for g in gaps)
    if not accept_loss:
        raise BrewError(f"input {topic} no longer holds records the store has not counted: {what}; pass "
                        "--accept-input-loss to skip them (logged, and counted in "
                        "brewstream_input_lost_records_total)")
    log.warning("skipping input lost from %s (--accept-input-loss): %s", topic, what)
    entries: list[Entry] = [(offset_key(topic, g.partition), encode_u64(g.low)) for g in gaps]
    commit_batch(store, changelog, entries, local=identity)
    if metrics is not None:
        for g in gaps:
            metrics.input_lost.labels(metrics.pipeline, str(g.partition)).inc(g.lost)


def pin_latest(conn: KafkaConnection, store: Store, changelog: ChangelogWriter, topic: str,
                partitions: list[int]) -> None:
    """A brand-new store that starts at the latest offsets records them first, so that a
    partition without data until a restart is not read from its beginning then."""
    if store.next_offsets(topic):
        return
    consumer = conn.consumer()
    try:
        ends = {p: high for p, (_, high) in end_offsets(consumer, topic, partitions).items()}
    finally:
        consumer.close()
    commit_batch(store, changelog, [(offset_key(topic, p), encode_u64(o)) for p, o in sorted(ends.items())])
    log.info("new store: starting %s at its latest offsets %s", topic, ends)
