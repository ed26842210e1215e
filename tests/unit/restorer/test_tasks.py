"""Tasks: a store's keys and bookkeeping grouped by changelog partition."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from restorer.codec import (
    CHANGELOG_PARTITIONS,
    commit_key,
    decode_entries,
    encode_u64,
    local_key,
    meta_key,
    position_key,
)
from restorer.tasks import split_by_task, task_count, task_of, tasks_json
from service.drink_count.counts import drink_counts, drink_key
from topics.partitioner import murmur2_partition

names = st.dictionaries(st.text(min_size=1, max_size=12), st.integers(0, 2**64 - 1), max_size=40)


def store_entries(counts: dict[str, int], tasks: int | None, commits: dict[int, int],
                  positions: dict[int, int]) -> list[tuple[bytes, bytes]]:
    entries = [(drink_key(d), encode_u64(n)) for d, n in counts.items()]
    entries += [(commit_key(t), encode_u64(s)) for t, s in commits.items()]
    entries += [(position_key(t), encode_u64(o)) for t, o in positions.items()]
    entries.append((meta_key("processed_orders"), encode_u64(1)))
    if tasks is not None:
        entries.append((local_key(CHANGELOG_PARTITIONS), str(tasks).encode()))
    return entries


@given(names, st.integers(1, 64), st.dictionaries(st.integers(0, 63), st.integers(0, 10**6)),
       st.dictionaries(st.integers(0, 63), st.integers(0, 10**9)))
def test_every_key_is_in_exactly_its_partitioners_task(counts: dict[str, int], tasks: int,
                                                       commits: dict[int, int], positions: dict[int, int]) -> None:
    state = decode_entries(store_entries(counts, tasks, commits, positions))
    split = split_by_task(state)
    assert sorted(split) == list(range(tasks))
    # Oracle: each key, one by one, in the partition Kafka's partitioner picks; nothing else anywhere.
    for t, task in split.items():
        assert task.task == t
        assert task.names == {k: v for k, v in state.names.items() if murmur2_partition(k, tasks) == t}
        assert (task.seq, task.position) == (commits.get(t, 0), positions.get(t))
    assert sum(len(task.names) for task in split.values()) == len(state.names)
    assert all(task_of(drink_key(d), tasks) < tasks for d in counts)


@given(names, st.integers(1, 16))
def test_counts_json_splits_the_counts_by_task_without_losing_one(counts: dict[str, int], tasks: int) -> None:
    view = drink_counts(decode_entries(store_entries(counts, tasks, {}, {}))).as_json()
    per_task = view["tasks"]
    assert isinstance(per_task, dict)
    merged: dict[str, int] = {}
    for t, task in per_task.items():
        assert all(task_of(drink_key(d), tasks) == int(t) for d in task["counts"])
        assert task["keys"] == len(task["counts"])
        merged |= task["counts"]
    assert merged == view["counts"] == counts


@given(st.one_of(st.none(), st.binary(max_size=12)))
def test_a_recorded_task_count_is_trusted_only_when_it_is_a_positive_count(raw: bytes | None) -> None:
    entries = [] if raw is None else [(local_key(CHANGELOG_PARTITIONS), raw)]
    state = decode_entries(entries)
    n = task_count(state)
    try:
        expected: int | None = int(raw) if raw is not None else None
    except ValueError:
        expected = None
    assert n == (expected if expected is not None and expected > 0 else None)
    if n is None:
        assert split_by_task(state) == {} and tasks_json({}) == {}


def test_a_store_not_yet_built_has_no_tasks() -> None:
    state = decode_entries(store_entries({"latte": 3}, None, {}, {}))
    assert split_by_task(state) == {}
    assert drink_counts(state).as_json()["tasks"] == {}

