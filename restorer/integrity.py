"""Does the changelog still hold what the store needs? The decision made before every start
and every restore (pure).

The store records the changelog it was published to (name, topic id and partition count)
and how far into each partition it has applied (its positions). Against what the
changelog holds now (its topic id, partition count, and per partition the first offset
left and the end), one of these follows:

- a store that holds state was published to a changelog of another name: refuse. It is
  another pipeline's state (a state dir reused with another --topic-prefix); its input
  offsets name other topics, so this input would be counted from its start on top of
  the other pipeline's counts, and the other changelog's state published into this one;
- the partition count changed: refuse. Keys would hash to other partitions than their
  history, so compaction keeps stale values and a restore would be wrong;
- the store is empty: restore, from offset 0. If the changelog lost its oldest records
  (retention, kafka-delete-records) a restore would be incomplete: refuse, unless told
  to restore what is left;
- the topic was deleted and re-created (another topic id), or ends before what the store
  applied: publish the whole store to it again;
- records the store has not applied yet are gone: refuse, unless told to publish the
  store again (its input offsets then recount what the lost records had counted);
- otherwise: catch up from the store's positions (usually nothing, or the last batch
  after a crash between the changelog and the store commits).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from topics.errors import BrewError

CATCH_UP, RESTORE, REPUBLISH = "catch-up", "restore", "republish"


class ChangelogRefused(BrewError):
    """The changelog cannot give this store what it needs; the message says what to do."""


@dataclass(frozen=True)
class ChangelogView:
    """What a changelog holds now."""

    topic: str
    topic_id: str
    partitions: int
    low: Mapping[int, int]  # first offset still there, per partition
    end: Mapping[int, int]  # last stable offset, per partition


@dataclass(frozen=True)
class StoreFacts:
    """What a store knows about the changelog it was published to."""

    empty: bool
    positions: Mapping[int, int] = field(default_factory=dict)
    topic_id: str | None = None
    partitions: int | None = None
    topic: str | None = None  # its name (stores written before it was recorded: None)


@dataclass(frozen=True)
class StartPlan:
    action: str  # CATCH_UP, RESTORE or REPUBLISH
    start: dict[int, int] = field(default_factory=dict)  # where reading starts (CATCH_UP, RESTORE)
    end: Mapping[int, int] = field(default_factory=dict)
    reason: str = ""
    warning: str | None = None

    @property
    def todo(self) -> dict[int, tuple[int, int]]:
        """(start, end) of every partition with records beyond ``start``."""
        return {p: (s, self.end.get(p, s)) for p, s in self.start.items() if s < self.end.get(p, s)}


def plan_start(view: ChangelogView, store: StoreFacts, accept_loss: bool = False,
               loss_flag: str = "--accept-changelog-loss") -> StartPlan:
    """What to do with the changelog before the store is used; ``ChangelogRefused`` when
    nothing safe can be done without the user's say."""
    if not store.empty and store.topic is not None and store.topic != view.topic:
        raise ChangelogRefused(
            f"this store was published to changelog {store.topic}, not {view.topic}: it holds another "
            f"pipeline's state (was the state dir used with another --topic-prefix?), and this input would be "
            f"counted on top of it. Run with the store's own topics, or give this pipeline a --state-dir of its "
            f"own")
    if store.partitions is not None and store.partitions != view.partitions:
        raise ChangelogRefused(shape_message(view.topic, view.partitions, store.partitions))
    if store.empty:
        lost = {p: low for p, low in view.low.items() if low > 0}
        warning = None
        if lost:
            if not accept_loss:
                raise ChangelogRefused(
                    f"changelog {view.topic} no longer holds its oldest records (first offset left per partition: "
                    f"{_fmt(lost)}), so a store restored from it would lack their keys; restore from a copy of the "
                    f"state dir, or pass {loss_flag} to restore what is left")
            warning = (f"restoring from changelog {view.topic} although its records below {_fmt(lost)} are gone "
                       f"({loss_flag}): keys only they held are missing from the store")
        return StartPlan(RESTORE, {p: view.low.get(p, 0) for p in view.end}, view.end, "the store is empty",
                         warning)
    if store.topic_id is not None and store.topic_id != view.topic_id:
        return StartPlan(REPUBLISH, reason=f"changelog {view.topic} was deleted and re-created (topic id "
                                        f"{view.topic_id}, the store's was {store.topic_id})")
    behind = {p: (pos, view.end.get(p, 0)) for p, pos in store.positions.items() if view.end.get(p, 0) < pos}
    if behind:
        return StartPlan(REPUBLISH, reason=f"changelog {view.topic} ends before what the store has applied "
                                        f"(partition: (store position, end) {behind}): it was re-created or lost "
                                        "records")
    gone = {p: (store.positions.get(p, 0), low) for p, low in view.low.items() if low > store.positions.get(p, 0)}
    if gone:
        if not accept_loss:
            raise ChangelogRefused(
                f"changelog {view.topic} lost records this store has not applied yet (partition: (store position, "
                f"first offset left) {gone}); pass {loss_flag} to publish this store to it again and recount the "
                "input from the store's offsets (the DLQ may then hold the lost batches' bad records twice)")
        return StartPlan(REPUBLISH, reason=f"changelog {view.topic} lost records the store had not applied "
                                        f"{gone} ({loss_flag})")
    return StartPlan(CATCH_UP, {p: store.positions.get(p, 0) for p in view.end}, view.end)


def unapplied(view: ChangelogView, store: StoreFacts) -> dict[int, tuple[int, int]]:
    """(first, end) per changelog partition of the records an empty store has not applied;
    nothing for a store that holds state. A restore writes the store in one WriteBatch at
    its end, so an empty store beside a changelog that holds records is one whose restore
    has not begun (a lost disk) or not ended: not its pipeline's state, whatever it shows."""
    if not store.empty:
        return {}
    firsts = {p: max(store.positions.get(p, 0), view.low.get(p, 0)) for p in view.end}
    return {p: (firsts[p], end) for p, end in sorted(view.end.items()) if firsts[p] < end}


def shape_message(topic: str, now: int, built: int) -> str:
    return (f"changelog {topic} has {now} partitions but the state was built against {built}: keys would hash "
            f"to other partitions than their history, and restores would be wrong. Re-create it with {built} "
            f"partitions (a running store is published to it again on start), or move the state to {now} "
            f"partitions with `brewstream republish-changelog --partitions {now}`")


def routing_refusal(topic: str, partitions: int, committed: bool, routes: Mapping[int, int],
                    version: int, store: str | None = None) -> str | None:
    """Pure: why a store that holds batches (``committed``) and the route markers ``routes``
    cannot go on committing to changelog ``topic`` with keys routed by rule ``version``
    (``restorer.tasks.Routing``), or None. Its history was written by the routes it
    names (none: version 0, each key by itself); keys routed another way now would put
    their new values in other partitions than their old ones, and a restore would find
    both."""
    if not committed:
        return None
    found = set(routes.values()) or {0}
    if found == {version}:
        return None
    return (f"changelog {topic} was written with its keys routed to partitions by another rule (version "
            f"{max(found)}, this brewstream's is {version}: an earlier or later brewstream wrote it); stop "
            f"every instance of the pipeline and run `brewstream republish-changelog --store {store or 'STORE'} "
            f"--partitions {partitions}`, which re-creates it and publishes the store by this one's rule")


def _fmt(offsets: Mapping[int, int]) -> str:
    return "{" + ", ".join(f"{p}: {o}" for p, o in sorted(offsets.items())) + "}"
