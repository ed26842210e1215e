"""The restore and republish commands: a store rebuilt from its changelog, and a changelog
rebuilt from its store (the way to move a store to another partition count)."""

from __future__ import annotations

import logging
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic

from restorer.changelog import ChangelogWriter
from restorer.codec import (
    CHANGELOG_PARTITIONS,
    CHANGELOG_TOPIC,
    CHANGELOG_TOPIC_ID,
    Entry,
    changelog_partition_of,
    encode_u64,
    local_key,
    offset_key,
    pinned_prefixes,
    position_prefix,
    task_prefixes,
)
from restorer.commit import commit_batch
from restorer.integrity import plan_start, unapplied
from restorer.progress import RestoreProgress
from restorer.reader import RestoreResult, ValueCheck, apply_changelog, store_facts, view_changelog
from restorer.repartition import cursors_apart
from restorer.store import StateDir, Store
from restorer.tasks import BY_WHOLE_KEY, Routing
from topics.clock import wait_until
from topics.errors import BrewError
from topics.kafka import KafkaConnection, describe_topic, require_broker

log = logging.getLogger("brewstream")

TOPIC_TIMEOUT_S = 60.0


def restore_store(conn: KafkaConnection, changelog: str, state_dir: Path, clean: bool, accept_loss: bool,
                  check_value: ValueCheck) -> RestoreResult:
    """Rebuild an empty (or ``clean``ed) store from its changelog, with progress."""
    with StateDir(state_dir) as sd:
        if clean:
            sd.remove_store()
        with Store(sd.store_path) as store:
            if store.holds_state():
                raise BrewError(f"the store in {sd.store_path} is not empty; pass --clean to rebuild it "
                                "from the changelog")
            plan = plan_start(view_changelog(conn, changelog), store_facts(store), accept_loss)
            if plan.warning:
                log.warning(plan.warning)
            with RestoreProgress("restore") as progress:
                return apply_changelog(conn, changelog, store, start=plan.start, on_progress=progress.update,
                                       check_value=check_value)


def check_restored(conn: KafkaConnection, store: Store, changelog: str) -> None:
    """Refuse, in one line, to read ``store`` as its pipeline's state when it holds none while
    its changelog holds records it has not applied (``integrity.unapplied``), or when that
    cannot be told (Kafka away). A store that holds state is read as it is, without Kafka."""
    if store.holds_state():
        return
    facts = store_facts(store)
    topic = facts.topic or changelog  # a store restored from an empty changelog names it
    try:
        require_broker(conn)
        missing = unapplied(view_changelog(conn, topic), facts)
    except BrewError as exc:
        raise BrewError(f"the store in {store.path} is empty, and whether changelog {topic} holds state it has not "
                        f"applied cannot be told ({exc}); an empty store may be one whose restore has not begun: ask "
                        "again with Kafka reachable (--bootstrap, --kafka-config, --topic-prefix)") from None
    if missing:
        where = ", ".join(f"{p}: {a}..{b}" for p, (a, b) in missing.items())
        raise BrewError(f"the store in {store.path} is empty but changelog {topic} holds records it has not applied "
                        f"(partition: offsets {where}): its restore has not finished, or its disk was lost. Wait for "
                        "the daemon on it to restore it (`brewstream status` shows the role), or, with none running, "
                        f"run `brewstream restore --state-dir {store.path.parent}`")


def republish_changelog(conn: KafkaConnection, changelog: str, topic_config: dict[str, str], state_dir: Path,
                        partitions: int, replication_factor: int, check_value: ValueCheck,
                        routing: Routing = BY_WHOLE_KEY) -> str:
    """Re-create the changelog with ``partitions`` (and ``topic_config``) and publish the
    whole store to it, each key to its task's partition by ``routing``."""
    with StateDir(state_dir) as sd, Store(sd.store_path) as store:
        if not store.holds_state():
            built = store.local(CHANGELOG_PARTITIONS)
            old = describe_topic(conn, changelog)
            log.info("the store is empty: restoring it from %s first", changelog)
            with RestoreProgress("restore") as progress:
                apply_changelog(conn, changelog, store, start={p: 0 for p in range(old.partitions)},
                                on_progress=progress.update, check_value=check_value,
                                built_partitions=int(built) if built else None)
        # Behind a shuffle the tasks' own keys are numbered by the old count: the store goes
        # on as if counted directly up to where they all stand (``_one_place``).
        offsets, shuffled = _one_place(store)
        forget = [(k, None) for k, _ in store.scan(position_prefix())]
        if shuffled:
            forget += [(k, None) for prefix in task_prefixes() for k, _ in store.scan(prefix)]
        # The markers of partitions a smaller changelog will not have: published, they would
        # go to partitions that do not exist; kept, the store would go on reporting batches
        # and shapes of a changelog that is gone.
        forget += [(k, None) for prefix in pinned_prefixes() for k, _ in store.scan(prefix)
                   if (changelog_partition_of(k) or 0) >= partitions]
        store.commit([*forget, (local_key(CHANGELOG_TOPIC_ID), None), (local_key(CHANGELOG_TOPIC), None),
                      (local_key(CHANGELOG_PARTITIONS), None)])
        _recreate(conn, changelog, partitions, replication_factor, topic_config)
        writer = ChangelogWriter(conn, changelog, list(range(partitions)), routing=routing)
        writer.start()
        try:
            done = commit_batch(store, writer, offsets, republish=True)
        finally:
            writer.close()
        keys = store.key_count()
    shuffle = (f"; for run --shuffle its repartition topic needs {partitions} partitions too (delete it, then "
               f"`brewstream topics create --tasks {partitions}`)") if shuffled else ""
    return (f"republished {changelog} with {partitions} partitions (replication factor {replication_factor}): "
            f"the store's {keys} keys, as batch {done.seq}{shuffle}")


def _one_place(store: Store) -> tuple[list[Entry], bool]:
    """The store's input offsets, for every task of the new count to take as its own, and
    whether the store was counted through the shuffle (``restorer.shuffle``). Such a store
    holds each task's cursors instead, numbered by the old count: they move only where every
    task stands at one place on each input partition (``repartition.cursors_apart``), which
    is then the store's offset there, as if counted directly (the shuffle goes on from such
    a store). Apart, a key moving to another task would take that task's cursor, ahead of
    its own, and never get the shares between: refused. The tasks' offsets on the
    repartition topic are no input offsets: that topic is re-created with the new count."""
    state = store.read_all()
    sources = {topic for per in state.task_parts.values() for topic in per}
    if sources:
        tasks = 1 + max((t for t, per in state.task_offsets.items() if sources & set(per)), default=-1)
        for source in sorted(sources):
            why = cursors_apart(store, source, tasks)
            if why is not None:
                raise BrewError(f"the store was counted through the shuffle, and its tasks do not stand at one "
                                f"place: {why}; let them apply all they were handed first (brewstream run --shuffle "
                                "--available-now), then republish")
    derived = {topic for per in state.task_offsets.values() for topic in per} - sources if sources else set()
    return [(offset_key(topic, p), encode_u64(o)) for topic, parts in state.offsets.items() if topic not in derived
            for p, o in parts.items()], bool(sources)


def _recreate(conn: KafkaConnection, topic: str, partitions: int, replication_factor: int,
              config: dict[str, str]) -> None:
    admin = conn.admin()
    try:
        admin.delete_topics([topic], request_timeout=TOPIC_TIMEOUT_S)[topic].result()
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise BrewError(f"deleting {topic} failed: {exc.args[0].str()}") from None

    def created() -> bool:
        try:
            admin.create_topics([NewTopic(topic, partitions, replication_factor, config=dict(config))],
                                request_timeout=TOPIC_TIMEOUT_S)[topic].result()
        except KafkaException as exc:
            # The deletion takes a moment to finish; until then the name is taken.
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise BrewError(f"creating {topic} failed: {exc.args[0].str()}") from None
            return False
        return True

    wait_until(created, TOPIC_TIMEOUT_S, f"{topic} to be created again", every=0.5)
