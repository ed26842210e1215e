"""Before every start: bring the store up to date with its changelog.

Usually nothing is to do, or only the last transaction's markers; after a crash between
the changelog and the store commits, the last batch; after a lost disk, everything (a
full restore, with progress). What the changelog must hold for that is decided in
``restorer.integrity``; a changelog that was re-created, or lost records the store still
had, gets the whole store published to it again.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from restorer.changelog import ChangelogWriter
from restorer.commit import ChangelogShapeChanged, commit_batch
from restorer.integrity import REPUBLISH, RESTORE, plan_start, routing_refusal
from restorer.progress import RestoreProgress
from restorer.reader import ProgressFn, ValueCheck, apply_changelog, store_facts, view_changelog
from restorer.store import Store
from restorer.tasks import Routing
from topics.errors import BrewError
from topics.kafka import KafkaConnection

log = logging.getLogger("brewstream")


def check_routing(store: Store, topic: str, partitions: int, routing: Routing, name: str | None = None) -> None:
    """``ChangelogShapeChanged`` unless the store's history was routed to the ``partitions``
    of changelog ``topic`` by ``routing`` (``integrity.routing_refusal``); ``name``: the
    store's pipeline, for the command the refusal names."""
    why = routing_refusal(topic, partitions, store.last_seq() > 0, store.route_markers(), routing.version, name)
    if why is not None:
        raise ChangelogShapeChanged(why)


def bring_store_up_to_date(conn: KafkaConnection, store: Store, changelog: ChangelogWriter,
                           auto_restore: bool, check_value: ValueCheck, accept_loss: bool = False,
                           on_progress: ProgressFn | None = None, name: str | None = None) -> int:
    """Apply what the changelog holds beyond the store; returns the records applied.
    ``on_progress`` hears (partition, start, position, end) during a full restore.

    The store's history must have been routed to the changelog's partitions by the rule
    ``changelog`` writes by (``check_routing``; ``name``, the store's pipeline, for
    the command a refusal names): asked of the store as found, before anything is
    published from it, and of what it holds once brought up to date, restored included.
    Every later batch keeps the rule its writer has, so nothing else asks again."""
    def check() -> None:
        check_routing(store, changelog.topic, len(changelog.partitions), changelog.routing, name)

    check()
    applied = _apply_changelog(conn, store, changelog, auto_restore, check_value, accept_loss, on_progress)
    check()
    return applied


def _apply_changelog(conn: KafkaConnection, store: Store, changelog: ChangelogWriter, auto_restore: bool,
                     check_value: ValueCheck, accept_loss: bool, on_progress: ProgressFn | None) -> int:
    topic = changelog.topic
    view, facts, only = view_changelog(conn, topic), store_facts(store), None
    if changelog.owned != changelog.partitions:
        # A writer of some tasks brings only their partitions up to date.
        only = set(changelog.owned)
        view = replace(view, low={p: o for p, o in view.low.items() if p in only},
                       end={p: o for p, o in view.end.items() if p in only})
        facts = replace(facts, positions={p: o for p, o in facts.positions.items() if p in only})
    plan = plan_start(view, facts, accept_loss)
    if plan.warning:
        log.warning(plan.warning)
    if plan.action == REPUBLISH:
        log.warning("%s; publishing the whole store to it again", plan.reason)
        done = commit_batch(store, changelog, [], republish=True)
        log.info("changelog re-seeded with the store (batch %d)", done.seq)
        return 0
    todo = plan.todo
    if not todo:
        return 0
    if plan.action != RESTORE:
        result = apply_changelog(conn, topic, store, start=plan.start, check_value=check_value, only=only)
        if result.records:
            log.info("caught up the store with %d changelog records its last run committed but did not "
                     "store", result.records)
        return result.records
    if not auto_restore:
        raise BrewError(f"the store in {store.path} is empty but the changelog holds data; run "
                        "`brewstream restore` or drop --no-auto-restore")
    log.info("the store is empty: restoring it from %s (partition: (from, to) %s)", topic, todo)
    with RestoreProgress("restore") as progress:
        def report(partition: int, start: int, position: int, end: int) -> None:
            progress.update(partition, start, position, end)
            if on_progress is not None:
                on_progress(partition, start, position, end)

        result = apply_changelog(conn, topic, store, start=plan.start, on_progress=report, check_value=check_value,
                                 only=only)
    log.info(result.summary())
    return result.records
