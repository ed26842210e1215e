"""The shuffle's parts and its apply-once rule (pure): a part's bytes read back or are
refused, a share cut into parts loses nothing, and a task reading a repartition partition
with replayed shares, re-read positions and crashes applies every share exactly once
(against an oracle that sums each share once); a lost part or a misaligned share is refused."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from restorer.shuffle import (
    Cursor,
    Part,
    ShuffleBroken,
    admit,
    admit_all,
    cut_share,
    decode_part,
    encode_part,
    split_batch,
)
from restorer.tasks import task_of

entries_st = st.lists(st.tuples(st.binary(max_size=12), st.binary(max_size=12)), max_size=8)


@st.composite
def parts(draw: st.DrawFn) -> Part:
    count = draw(st.integers(1, 5))
    start = draw(st.integers(0, 2**63 - 2))
    return Part(draw(st.integers(0, 2**31 - 1)), start, draw(st.integers(start + 1, 2**63 - 1)),
                draw(st.integers(0, count - 1)), count, tuple(draw(entries_st)))


@given(parts())
def test_a_part_reads_back_as_written(p: Part) -> None:
    assert decode_part(encode_part(p)) == p


@given(st.binary(max_size=80))
def test_any_bytes_read_back_as_a_part_or_are_refused(blob: bytes) -> None:
    try:
        p = decode_part(blob)
    except ValueError:
        return
    assert encode_part(p) == blob


@given(parts(), st.data())
def test_a_cut_or_padded_part_is_refused(p: Part, data: st.DataObject) -> None:
    """A part cut between two entries is a part of fewer entries; cut anywhere else, or
    padded, it is refused."""
    blob = encode_part(p)
    boundaries = {len(encode_part(Part(p.partition, p.start, p.end, p.index, p.count, p.entries[:n])))
                  for n in range(len(p.entries) + 1)}
    cut = data.draw(st.integers(0, len(blob) - 1))
    if cut in boundaries:
        assert decode_part(blob[:cut]).entries == p.entries[:len(decode_part(blob[:cut]).entries)]
    else:
        with pytest.raises(ValueError):
            decode_part(blob[:cut])
    with pytest.raises(ValueError):
        decode_part(blob + data.draw(st.binary(min_size=1, max_size=7)))


@given(entries_st, st.integers(1, 64))
def test_a_share_cut_into_parts_loses_nothing(entries: list[tuple[bytes, bytes]], max_bytes: int) -> None:
    cut = cut_share(2, 10, 20, entries, max_bytes)
    assert [e for p in cut for e in p.entries] == entries
    assert [(p.index, p.count) for p in cut] == [(i, len(cut)) for i in range(len(cut))]
    for p in cut:
        size = sum(8 + len(k) + len(v) for k, v in p.entries)
        assert size <= max_bytes or len(p.entries) == 1


@dataclass(frozen=True)
class Share:
    partition: int
    start: int
    end: int
    deltas: tuple[tuple[bytes, int], ...]

    def parts(self, max_bytes: int) -> list[Part]:
        entries = [(k, n.to_bytes(8, "big")) for k, n in self.deltas]
        return cut_share(self.partition, self.start, self.end, entries, max_bytes)


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[Share], list[Part]]:
    """An input stage's shares for one task, per input partition contiguous from an offset
    (with gaps of offsets the input no longer held), and the task's repartition partition
    as read: each partition's parts in order, partitions interleaved, and some shares
    written again after they were whole (a batch the input stage ran twice), cut anew."""
    shares: list[Share] = []
    per_partition: list[list[Part]] = []
    for partition in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, 100))
        seq: list[Part] = []
        for _ in range(draw(st.integers(0, 5))):
            at += draw(st.sampled_from([0, 0, 0, 7]))  # offsets the input no longer held
            end = at + draw(st.integers(1, 50))
            deltas = tuple(draw(st.lists(st.tuples(st.sampled_from([b"a", b"b", b"mocha", b"latte"]),
                                                   st.integers(1, 9)), max_size=5)))
            share = Share(partition, at, end, deltas)
            shares.append(share)
            seq += share.parts(draw(st.integers(1, 40)))
            if draw(st.integers(0, 3)) == 0:  # run again once committed: the same range, cut anew
                seq += share.parts(draw(st.integers(1, 40)))
            at = end
        per_partition.append(seq)
    log: list[Part] = []
    while any(per_partition):
        q = draw(st.sampled_from([i for i, s in enumerate(per_partition) if s]))
        log.append(per_partition[q].pop(0))
    return shares, log


def oracle(shares: list[Share]) -> Counter[bytes]:
    total: Counter[bytes] = Counter()
    for share in shares:
        for key, n in share.deltas:
            total[key] += n
    return total


@given(histories(), st.data())
def test_a_task_applies_every_share_once_through_replays_and_crashes(
        history: tuple[list[Share], list[Part]], data: st.DataObject) -> None:
    """The task's state (totals and cursors) commits after each run of records it reads; a
    crash loses what it read since, and it reads again from any position at or before the
    one it committed (a Spark checkpoint behind the store)."""
    shares, log = history
    committed: tuple[Counter[bytes], dict[int, Cursor]] = (Counter(), {})
    committed_at = 0
    at = 0
    while at < len(log):
        totals = Counter(committed[0])
        run = data.draw(st.integers(1, 4))
        admitted = admit_all(committed[1], log[at:at + run])
        for p in admitted.parts:
            for key, value in p.entries:
                totals[key] += int.from_bytes(value, "big")
        cursors = admitted.cursors
        if data.draw(st.booleans()) and data.draw(st.booleans()):  # killed before its commit
            at = data.draw(st.integers(0, committed_at))
            continue
        committed, committed_at = (totals, cursors), max(committed_at, min(at + run, len(log)))
        at = data.draw(st.integers(0, committed_at)) if data.draw(st.integers(0, 4)) == 0 else committed_at
    assert committed[0] == oracle(shares)
    ends = {s.partition: s.end for s in shares}
    assert committed[1] == {q: Cursor(end) for q, end in ends.items()}


def test_a_lost_part_is_refused() -> None:
    share = Share(0, 0, 10, ((b"a", 1), (b"b", 2), (b"c", 3)))
    p0, _lost, p2 = share.parts(17)
    cursor = Cursor(0).after(p0)
    with pytest.raises(ShuffleBroken, match="part 2 of the share from offset 0 came where part 1"):
        admit(cursor, p2)
    with pytest.raises(ShuffleBroken):
        admit(None, p2)  # the share's first parts purged before this task applied them


def test_a_share_cut_across_an_applied_offset_is_refused() -> None:
    with pytest.raises(ShuffleBroken, match=r"\[5, 15\) cuts across offset 10"):
        admit(Cursor(10), Part(0, 5, 15, 0, 1))


def test_a_new_share_before_the_last_one_is_whole_is_refused() -> None:
    with pytest.raises(ShuffleBroken):
        admit(Cursor(10, 1), Part(0, 20, 30, 0, 1))


@pytest.mark.parametrize("bad", [dict(start=5, end=5), dict(index=2, count=2), dict(partition=-1),
                                 dict(start=-1), dict(count=0, index=0)])
def test_a_part_that_cannot_exist_is_refused(bad: dict[str, int]) -> None:
    f = {"partition": 0, "start": 0, "end": 10, "index": 0, "count": 1} | bad
    with pytest.raises(ValueError):
        Part(f["partition"], f["start"], f["end"], f["index"], f["count"])


@given(st.dictionaries(st.integers(0, 5), st.lists(st.tuples(st.binary(min_size=1, max_size=6), st.binary(max_size=8)),
                                                     max_size=10)),
       st.integers(1, 8), st.integers(1, 64))
def test_a_batch_splits_into_every_tasks_share_of_every_partition(
        shares: dict[int, list[tuple[bytes, bytes]]], tasks: int, max_bytes: int) -> None:
    ranges = {q: (q * 100, q * 100 + 10) for q in shares}
    out = split_batch(shares, ranges, tasks, max_bytes=max_bytes)
    assert set(out) == set(range(tasks))
    for t, parts in out.items():
        assert {p.partition for p in parts} == set(shares)  # an empty share too
        for p in parts:
            assert (p.start, p.end) == ranges[p.partition]
            assert all(task_of(k, tasks) == t for k, _ in p.entries)
    for q, entries in shares.items():
        got = sorted(e for parts in out.values() for p in parts if p.partition == q for e in p.entries)
        assert got == sorted(entries)


def test_entries_without_a_range_are_refused() -> None:
    with pytest.raises(ValueError, match=r"input partitions \[1\]"):
        split_batch({1: [(b"a", b"x")]}, {}, 3)
