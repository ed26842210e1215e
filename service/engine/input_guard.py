"""The input, checked before a query starts: what is still to be read from it must still be
in the topic (a decision, never a crash, when it is not), and a brand-new store that
starts at the latest offsets records them first."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from restorer.changelog import ChangelogWriter
from restorer.codec import Entry, encode_u64, input_topic_id_name, local_key, offset_key, task_offset_key
from restorer.commit import commit_batch
from restorer.store import Store
from service.engine.start_point import InputGap, input_gaps
from service.ops.metrics import Metrics
from topics.errors import BrewError
from topics.kafka import KafkaConnection, describe_topic, end_offsets

log = logging.getLogger("brewstream")


@dataclass(frozen=True)
class InputChecked:
    """What ``lost_input`` found: the gaps to skip, the partitions' (low, high) offsets, and
    the topic's identity for the store (``None``: the store records this one already)."""

    gaps: list[InputGap] = field(default_factory=list)
    offsets: dict[int, tuple[int, int]] = field(default_factory=dict)
    identity: Entry | None = None

    @property
    def earliest(self) -> dict[int, int]:
        return {p: low for p, (low, _) in self.offsets.items()}


def lost_input(conn: KafkaConnection, store: Store, topic: str, applied: Mapping[int, int], accept_loss: bool,
               metrics: Metrics | None, *, pending: str, reset_refusal: str | None = None,
               derived: Callable[[], str | None] | None = None) -> InputChecked:
    """The one rule for input lost before it was read: where ``topic`` no longer holds what
    is to be read from ``applied`` on (deleted by retention, or the topic re-created: its
    id is not the one the store recorded), refuse in one line; with ``accept_loss``, say
    it, count it (``brewstream_input_lost_records_total``) and return the gaps to skip.
    ``pending`` names what was not read ("the store has not counted"); ``reset_refusal``,
    when given, refuses offsets that restarted below ``applied`` even with ``accept_loss``,
    saying why. ``derived``, for a topic derived from another (a shuffle's repartition
    topic): None when what it held can all be derived again, else why not; the topic
    re-created, still empty, then loses nothing, and its gaps are skipped unasked."""
    shape = describe_topic(conn, topic)
    recorded = store.local(input_topic_id_name(topic))
    consumer = conn.consumer()
    try:
        offsets = end_offsets(consumer, topic, list(range(shape.partitions)))
    finally:
        consumer.close()
    recreated = recorded is not None and recorded.decode() != shape.topic_id
    gaps = input_gaps(applied, offsets, recreated)
    identity = (local_key(input_topic_id_name(topic)), shape.topic_id.encode()) if recorded is None or gaps else None
    if not gaps:
        return InputChecked([], offsets, identity)
    what = "; ".join(g.describe() for g in gaps)
    if reset_refusal is not None and any(g.reset for g in gaps):
        raise BrewError(f"input {topic} restarted its offsets below what {pending}: {what}; {reset_refusal}")
    why_not = None
    if derived is not None and recreated and all(low == high == 0 for low, high in offsets.values()):
        why_not = derived()
        if why_not is None:
            log.warning("%s was re-created (%s); nothing it held is lost: it is derived again from where every "
                        "task's state stands", topic, what)
            return InputChecked(gaps, offsets, identity)
    if not accept_loss:
        raise BrewError(f"input {topic} no longer holds records {pending}: {what}"
                        f"{f' ({why_not})' if why_not else ''}; pass --accept-input-loss to skip them (logged, and "
                        "counted in brewstream_input_lost_records_total)")
    log.warning("skipping input lost from %s (--accept-input-loss): %s", topic, what)
    if metrics is not None:
        for g in gaps:
            metrics.input_lost.labels(metrics.pipeline, str(g.partition)).inc(g.lost)
    return InputChecked(gaps, offsets, identity)


def check_input(conn: KafkaConnection, store: Store, changelog: ChangelogWriter, topic: str, accept_loss: bool,
                metrics: Metrics | None = None, by_task: bool = False,
                derived: Callable[[], str | None] | None = None) -> None:
    """Refuse to start when the input lost what the store has not counted yet
    (``lost_input``, ``derived`` too); with ``accept_loss``, the store's offsets move past
    it. ``by_task``: each partition of ``topic`` is its task's alone (a shuffle's
    repartition topic), so its offset moves for that task only, not for every task
    (``codec.spread_offsets``)."""
    checked = lost_input(conn, store, topic, store.next_offsets(topic), accept_loss, metrics,
                         pending="the store has not counted", derived=derived)
    identity = [checked.identity] if checked.identity is not None else []
    if not checked.gaps:
        if identity:
            store.commit(identity)
        return
    entries: list[Entry] = [(task_offset_key(topic, g.partition, g.partition) if by_task else
                             offset_key(topic, g.partition), encode_u64(g.low)) for g in checked.gaps]
    commit_batch(store, changelog, entries, local=identity)


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
