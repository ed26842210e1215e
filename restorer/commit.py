"""The one way anything reaches the changelog and the store: one Kafka transaction, then
one synced RocksDB WriteBatch, with the fault points between them (invariants 1, 3 and 6
of ``restorer``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from restorer.changelog import ChangelogWriter, Fenced, OutputRecord
from restorer.codec import (
    CHANGELOG_PARTITIONS,
    CHANGELOG_TOPIC,
    CHANGELOG_TOPIC_ID,
    Entry,
    encode_u64,
    is_local,
    is_offset_key,
    local_key,
    position_key,
    spread_offsets,
)
from restorer.faults import FaultPlan
from restorer.integrity import shape_message
from restorer.store import Store, StoreGone
from topics.errors import BrewError

log = logging.getLogger("brewstream")


class ChangelogShapeChanged(BrewError):
    """The changelog's partition count, or the rule routing keys to its partitions, is not
    the one the store was built against."""


@dataclass(frozen=True)
class Committed:
    seq: int
    entries: list[Entry]  # the batch's entries with the markers
    changelog_s: float
    store_s: float


def commit_batch(store: Store, changelog: ChangelogWriter, entries: list[Entry],
                 outputs: Iterable[OutputRecord] = (), faults: FaultPlan | None = None,
                 republish: bool = False, local: Iterable[Entry] = (), max_gap_s: float | None = None) -> Committed:
    """3. + 4. for one batch, the only way anything reaches the changelog and the store.

    Before the transaction, the changelog's shape is checked against the one the store
    recorded: a partition count that changed stops here (``ChangelogShapeChanged``), and
    a topic id that changed (the changelog was deleted and re-created) makes this
    transaction carry the whole store, so the new changelog is complete again
    (``republish`` asks for that in any case). ``local`` entries go to the store only.

    ``max_gap_s``: a process paused between the two commits for longer than this (a
    stopped or starved zombie) may have been taken over meanwhile, and another instance
    may own the changelog by now; it leaves its store as it was (the changelog holds the
    batch, so nothing is lost) and stops as fenced.
    """
    t0 = time.monotonic()
    gone = store.gone()
    if gone is not None:
        # Applying this batch to files that are gone would lose it on the next start, while
        # the changelog holds it: the daemon re-opens the store and catches up instead.
        raise StoreGone(f"{gone} while the daemon ran; nothing of this batch was committed")
    shape = changelog.shape()
    built = store.local(CHANGELOG_PARTITIONS)
    if shape.partitions != len(changelog.partitions) or (built is not None and int(built) != shape.partitions):
        raise ChangelogShapeChanged(shape_message(changelog.topic, shape.partitions,
                                                  int(built) if built else len(changelog.partitions)))
    recorded = store.local(CHANGELOG_TOPIC_ID)
    seq = store.last_seq() + 1
    # Each input offset as every task's own, in its changelog partition (``codec``).
    legacy = store.get_u64([k for k, _ in entries if is_offset_key(k)])
    spread = spread_offsets(entries, changelog.owned, legacy)
    entries = [*spread, *changelog.batch_markers(seq, spread)]
    published = entries
    recreated = recorded is not None and recorded.decode() != shape.topic_id
    if recreated:
        log.warning("changelog %s was deleted and re-created (topic id %s, was %s): publishing the whole store "
                    "to it again", changelog.topic, shape.topic_id, recorded.decode() if recorded else "-")
    if recreated or republish:
        batch = dict(entries)
        published = [(k, v) for k, v in store.items() if not is_local(k) and k not in batch] + entries

    # 3. Changelog entries and output records: all visible together, or not at all (by
    # task: each task's entries, ``ChangelogWriter``).
    reached = faults.reached if faults is not None else (lambda _point: None)
    positions = changelog.publish(published, outputs, before_commit=lambda: reached("mid-transaction"))
    t1 = time.monotonic()
    reached("after-changelog-commit")
    gap = time.monotonic() - t1
    if max_gap_s is not None and gap > max_gap_s:
        raise Fenced(f"this instance stalled {gap:.1f}s between its changelog and store commits, longer than the "
                     "takeover timeout; another instance may own the changelog by now, so it leaves its store as it "
                     "was (the next start applies the batch from the changelog)")

    # 4. The same entries locally, with how far into the changelog they reach and the
    # changelog's identity they were published to.
    store.commit(entries + [(position_key(p), encode_u64(o)) for p, o in positions.items()] + [
        (local_key(CHANGELOG_TOPIC_ID), shape.topic_id.encode()),
        (local_key(CHANGELOG_TOPIC), changelog.topic.encode()),
        (local_key(CHANGELOG_PARTITIONS), str(shape.partitions).encode()),
        *local,
    ])
    reached("after-store-commit")
    return Committed(seq, entries, t1 - t0, time.monotonic() - t1)
