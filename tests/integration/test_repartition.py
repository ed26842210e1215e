"""The repartition topic on a real broker: the input stage's batches, a batch written again
(cut anew) and a writer fenced mid-transaction by its successor, read back by each task with
``shuffle``'s rule, give every task each share once (against an oracle that sums each
batch once); the stage resumes where its last committed batch ended, by its parts or,
once they are purged, by the tasks' cursors; the purge removes only what a task applied,
and the task goes on from there. Parts lost before a task applied them are refused, or
skipped by that task alone."""

from __future__ import annotations

import random
import time
from collections import Counter
from functools import partial
from pathlib import Path

import pytest

from restorer.changelog import ChangelogWriter, Fenced, OutputRecord
from restorer.codec import decode_entries, encode_u64, task_offset_key, task_offset_prefix, task_part_key
from restorer.commit import commit_batch
from restorer.repartition import PartWriter, cursors_apart, parts_of, purge, resume_offsets
from restorer.shuffle import Cursor, Part, admit_all, split_batch
from restorer.store import Store
from restorer.tasks import task_of
from tests.support.helpers import create_topic, read_topic
from topics.catalog import REPARTITION
from topics.clock import wait_until
from topics.errors import BrewError
from topics.kafka import KafkaConnection
from topics.records import read_from

TASKS, INPUTS = 4, 3
Batch = tuple[dict[int, list[tuple[bytes, bytes]]], dict[int, tuple[int, int]]]


def batch(rng: random.Random, starts: dict[int, int]) -> Batch:
    """A batch of the input stage: per input partition, a range and its (key, delta) entries."""
    shares, ranges = {}, {}
    for p in range(INPUTS):
        n = rng.randint(1, 40)
        ranges[p] = (starts[p], starts[p] + n)
        counted = Counter(f"drink-{rng.randint(0, 30)}".encode() for _ in range(n))
        shares[p] = [(k, v.to_bytes(8, "big")) for k, v in sorted(counted.items())]
    return shares, ranges


def totals(batches: list[Batch]) -> dict[int, Counter[bytes]]:
    """The oracle: each batch counted once, each key in its task."""
    out: dict[int, Counter[bytes]] = {t: Counter() for t in range(TASKS)}
    for shares, _ in batches:
        for entries in shares.values():
            for k, v in entries:
                out[task_of(k, TASKS)][k] += int.from_bytes(v, "big")
    return out


def task_parts(kafka: KafkaConnection, topic: str, task: int) -> list[tuple[int, Part]]:
    msgs = sorted((m.offset() or 0, m.value()) for m in read_from(kafka, topic) if m.partition() == task)
    parts, strays = parts_of(msgs)
    assert not strays
    return list(zip([o for o, _ in msgs], parts, strict=True))


def applied(parts: list[Part], cursors: dict[int, Cursor] | None = None) -> tuple[Counter[bytes], dict[int, Cursor]]:
    done = admit_all(cursors or {}, parts)
    sums: Counter[bytes] = Counter()
    for p in done.parts:
        for k, v in p.entries:
            sums[k] += int.from_bytes(v, "big")
    return sums, done.cursors


def ends(b: Batch) -> dict[int, int]:
    return {p: end for p, (_, end) in b[1].items()}


def test_each_task_applies_every_share_once_through_a_replay_a_fence_and_a_purge(kafka: KafkaConnection) -> None:
    stamp = time.time_ns()
    topic, dlq = f"rp-{stamp}", f"rp-dlq-{stamp}"
    create_topic(kafka, topic, TASKS, REPARTITION)
    create_topic(kafka, dlq)
    rng = random.Random(stamp)
    first = batch(rng, dict.fromkeys(range(INPUTS), 0))
    second = batch(rng, ends(first))
    third = batch(rng, ends(second))

    old = PartWriter(kafka, topic, TASKS)
    old.start()
    assert resume_offsets(kafka, topic) == {}
    old.publish(split_batch(*first, TASKS), [OutputRecord(dlq, b"k", b"bad 1")])
    # Spark runs the batch again (its checkpoint never learned of the commit), cut otherwise.
    old.publish(split_batch(*first, TASKS, max_bytes=30), [OutputRecord(dlq, b"k", b"bad 1")])
    new = PartWriter(kafka, topic, TASKS)
    try:
        with pytest.raises(Fenced, match="another instance took over the repartition topic"):
            old.publish(split_batch(*second, TASKS), [OutputRecord(dlq, b"k", b"lost")],
                        before_commit=new.start)  # the successor registers mid-transaction
        old.close()
        resumed = resume_offsets(kafka, topic)
        assert resumed == ends(first)  # the fenced batch committed nothing, its offsets neither
        new.publish(split_batch(*second, TASKS, max_bytes=60))
        new.publish(split_batch(*third, TASKS))
        assert resume_offsets(kafka, topic) == ends(third)
    finally:
        new.close()
    assert [m.value() for m in read_topic(kafka, dlq)] == [b"bad 1", b"bad 1"]  # the DLQ is the batch's own

    oracle = totals([first, second, third])
    for task in range(TASKS):
        read = task_parts(kafka, topic, task)
        sums, cursors = applied([p for _, p in read])
        assert sums == oracle[task]
        assert all(task_of(k, TASKS) == task for _, p in read for k, _ in p.entries)
        assert cursors == {p: Cursor(end) for p, end in ends(third).items()}

    # The purge of what task 0 applied by the end of the first read of its second batch's
    # parts: it goes on from its cursors there and ends where it ended before.
    read = task_parts(kafka, topic, 0)
    cut = next(i for i, (_, p) in enumerate(read) if p.start == ends(first)[0] and p.partition == 0)
    before, cursors_then = applied([p for _, p in read[:cut]])
    low = purge(kafka, topic, {0: read[cut][0]})
    assert low == {0: read[cut][0]}
    rest = task_parts(kafka, topic, 0)
    assert [o for o, _ in rest] == [o for o, _ in read[cut:]]
    after, cursors = applied([p for _, p in rest], cursors_then)
    assert before + after == oracle[0] and cursors == {p: Cursor(end) for p, end in ends(third).items()}

    # Every part of every task purged once applied: the progress is the tasks' cursors then.
    everything = {t: task_parts(kafka, topic, t)[-1][0] + 1 for t in range(TASKS)}
    purge(kafka, topic, everything)
    assert resume_offsets(kafka, topic) == {}
    assert resume_offsets(kafka, topic, ends(third)) == ends(third)



def repartition_with_records(kafka: KafkaConnection, name: str, per_task: int) -> tuple[str, str]:
    """A new repartition topic with ``per_task`` records in each task's partition, and a
    new changelog of as many partitions: their names."""
    stamp = f"{name}-{time.time_ns()}"
    topic, changelog = f"{stamp}.repartition", f"{stamp}.changelog"
    create_topic(kafka, topic, TASKS, REPARTITION)
    create_topic(kafka, changelog, TASKS, {"cleanup.policy": "compact"})
    producer = kafka.producer()
    for task in range(TASKS):
        for i in range(per_task):
            producer.produce(topic, value=b"part %d" % i, partition=task)
    producer.flush(30)
    return topic, changelog


def test_repartition_input_lost_and_accepted_moves_only_its_tasks_offset(kafka: KafkaConnection,
                                                                          tmp_path: Path) -> None:
    """Parts lost from the repartition topic before their task applied them: refused, then,
    with the loss accepted, skipped by that task alone; the other tasks' offsets and their
    partitions stay as they were (a skip written as every task's offset would hold the
    least of them there for good, and the purge and the replay filter with it)."""
    from service.engine.input_guard import check_input

    topic, changelog = repartition_with_records(kafka, "guard", 10)
    with Store(tmp_path / "store") as store:
        writer = ChangelogWriter(kafka, changelog, range(TASKS))
        writer.start()
        try:
            commit_batch(store, writer, [(task_offset_key(topic, t, t), encode_u64(5)) for t in range(TASKS)])
            purge(kafka, topic, {1: 8})
            with pytest.raises(BrewError, match=r"partition 1 offsets 5\.\.7 were deleted.*--accept-input-loss"):
                check_input(kafka, store, writer, topic, False, by_task=True)
            check_input(kafka, store, writer, topic, True, by_task=True)
            held = decode_entries(store.scan(task_offset_prefix(topic))).task_offsets
        finally:
            writer.close()
    assert held == {t: {topic: {t: 8 if t == 1 else 5}} for t in range(TASKS)}


def test_a_repartition_topic_recreated_loses_nothing_when_every_task_stands_at_one_place(
        kafka: KafkaConnection, tmp_path: Path) -> None:
    """The repartition topic deleted and re-created empty: where every task's cursor on
    each input partition stands at one offset, at a share's end, what it held is derived
    again from the source, so the tasks' offsets on it restart unasked; cursors apart (a
    task had not applied what it was handed), it is refused, naming them."""
    from service.engine.input_guard import check_input

    topic, changelog = repartition_with_records(kafka, "again", 6)
    source = topic.removesuffix(".repartition") + ".orders"
    cursors = [(task_offset_key(source, p, t), encode_u64(40 + p)) for t in range(TASKS) for p in range(2)]
    with Store(tmp_path / "store") as store:
        writer = ChangelogWriter(kafka, changelog, range(TASKS), by_task=True)
        writer.start()
        try:
            offsets = [(task_offset_key(topic, t, t), encode_u64(6)) for t in range(TASKS)]
            commit_batch(store, writer, [*cursors, *offsets])
            derived = partial(cursors_apart, store, source, TASKS)
            check_input(kafka, store, writer, topic, False, by_task=True, derived=derived)  # records its identity
            admin = kafka.admin()
            admin.delete_topics([topic])[topic].result()
            wait_until(lambda: recreate(kafka, topic), 60, "the repartition topic to be re-created")
            commit_batch(store, writer, [(task_part_key(source, 1, 2), encode_u64(1))])  # task 2 midway
            with pytest.raises(BrewError, match=r"task 2 has applied a share of .*\[1\] in part.*--accept-input-loss"):
                check_input(kafka, store, writer, topic, False, by_task=True, derived=derived)
            commit_batch(store, writer, [(task_part_key(source, 1, 2), encode_u64(0)),
                                         (task_offset_key(source, 0, 1), encode_u64(39))])  # task 1 behind
            with pytest.raises(BrewError, match=r"task 0 at 40, task 1 at 39, task 2 at 40"):
                check_input(kafka, store, writer, topic, False, by_task=True, derived=derived)
            commit_batch(store, writer, [(task_offset_key(source, 0, 1), encode_u64(40))])
            check_input(kafka, store, writer, topic, False, by_task=True, derived=derived)
            held = decode_entries(store.scan(task_offset_prefix(topic))).task_offsets
            check_input(kafka, store, writer, topic, False, by_task=True, derived=derived)  # its new identity kept
        finally:
            writer.close()
    assert held == {t: {topic: {t: 0}} for t in range(TASKS)}


def recreate(kafka: KafkaConnection, topic: str) -> bool:
    try:
        create_topic(kafka, topic, TASKS, REPARTITION)
    except Exception:  # still being deleted
        return False
    return True


def test_a_store_counted_through_the_shuffle_republishes_only_with_its_tasks_at_one_place(
        kafka: KafkaConnection, tmp_path: Path) -> None:
    """republish-changelog to another task count: the tasks' cursors are numbered by the old
    count, so they move only where every task stands at one place on each input partition,
    as the store's offsets (its keys then in their tasks' partitions of the new count, its
    repartition offsets left behind); a task behind is refused, and nothing is deleted."""
    from restorer.restore import republish_changelog
    from service.drink_count.counts import check_count

    stamp = f"move-{time.time_ns()}"
    changelog, source, repartition = f"{stamp}.changelog", f"{stamp}.orders", f"{stamp}.repartition"
    create_topic(kafka, changelog, TASKS, {"cleanup.policy": "compact"})
    drinks = {f"drink {i}".encode(): encode_u64(i + 1) for i in range(30)}
    cursors = [e for t in range(TASKS) for p in range(2)
               for e in ((task_offset_key(source, p, t), encode_u64(70 + p)),
                         (task_part_key(source, p, t), encode_u64(0)))]
    state = tmp_path / "state"
    state.mkdir()
    with Store(state / "store") as store:
        writer = ChangelogWriter(kafka, changelog, range(TASKS), by_task=True)
        writer.start()
        try:
            commit_batch(store, writer, [*drinks.items(), *cursors, (task_offset_key(repartition, 1, 1), encode_u64(9)),
                                         (task_part_key(source, 1, 3), encode_u64(2))])  # task 3: midway
        finally:
            writer.close()
    with pytest.raises(BrewError, match=r"do not stand at one place: task 3 has applied a share .*--available-now"):
        republish_changelog(kafka, changelog, {"cleanup.policy": "compact"}, state, TASKS + 1, 1, check_count)
    assert {m.partition() for m in read_topic(kafka, changelog)} == set(range(TASKS)), "the changelog was deleted"

    with Store(state / "store") as store:
        writer = ChangelogWriter(kafka, changelog, range(TASKS), by_task=True)
        writer.start()
        try:
            commit_batch(store, writer, [(task_part_key(source, 1, 3), encode_u64(0))])
        finally:
            writer.close()
    republish_changelog(kafka, changelog, {"cleanup.policy": "compact"}, state, TASKS + 1, 1, check_count)
    with Store(state / "store", read_only=True) as store:
        held = store.read_all()
    assert held.offsets == {source: {0: 70, 1: 71}} and not held.task_parts
    assert set(held.task_offsets) == set(range(TASKS + 1))
    latest = {m.key(): (m.partition(), m.value()) for m in read_topic(kafka, changelog) if m.key() in drinks}
    assert latest == {k: (task_of(k, TASKS + 1), v) for k, v in drinks.items()}
