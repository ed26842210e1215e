"""The shuffle between the stage that reads the input and the tasks (pure): what a part of
the repartition topic holds, and the one rule by which a task applies each part once.

The input is keyed by shop, the state by its state key, so a key's records arrive on every
input partition. The input stage counts a batch per input partition and state key and hands
each task its share through the repartition topic (R partitions, one per task, as the
changelog): for each input partition ``p`` a batch read over ``[start, end)``, and each task
``t``, one *share*, cut into *parts* of bounded size, all in one transaction. A part names
its share (``p``, ``start``, ``end``) and its place in it (``index`` of ``count``), and
carries the share's entries for its keys: opaque bytes, the pipeline's delta per key.

**The rule, stated once** (``Cursor.admit``): a task keeps, per input partition, a cursor:
every share below ``offset`` is applied, and of the share that starts at ``offset`` the parts
below ``part``. It is committed with the task's state in one changelog transaction, so it
always says exactly what the store holds. A part is applied when it is the next one after
the cursor, skipped when the cursor has passed it, and anything else is refused
(``ShuffleBroken``): a part missing before it, or a share whose range cuts across one
already applied. Hence each part is applied once, whatever happens between the stages:

- a task that re-reads its partition from an earlier position (a killed instance, a Spark
  checkpoint behind the store) meets parts it has applied, and skips them;
- an input stage that runs a batch again (killed after its transaction committed, before
  Spark's checkpoint) writes the same share again after the first: the first is applied
  whole before the second is read (one partition is read in order), which is then skipped,
  however it was cut into parts;
- an aborted transaction's parts are never read (``read_committed``).

What the rule relies on, and who keeps it: each input partition has one input-stage writer
at a time, fenced by its transactional id; that writer's shares of one partition follow
each other, each starting where the last committed one ended (it resumes from its own
committed progress); and a part of the repartition topic is purged only once every task
has applied it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from restorer.tasks import BY_WHOLE_KEY, Routing, task_of
from topics.errors import BrewError

FORMAT = 1  # the first byte of every part; another is refused
_HEAD = struct.Struct(">BiqqII")  # format, input partition, start, end, index, count
_LEN = struct.Struct(">I")
MAX_OFFSET = 2**63 - 1


class ShuffleBroken(BrewError):
    """A part the rule can neither apply nor skip: the repartition topic lost a part, or two
    writers cut one input partition's offsets differently. Applying it would count records
    twice or not at all, so the task stops; its store and changelog stay as they were."""


class Verdict(Enum):
    APPLY = "apply"
    SKIP = "skip"


@dataclass(frozen=True)
class Part:
    """One part of one share: the state keys' entries of a batch read over
    ``[start, end)`` of input partition ``partition``, for one task."""

    partition: int
    start: int
    end: int
    index: int
    count: int
    entries: tuple[tuple[bytes, bytes], ...] = ()

    def __post_init__(self) -> None:
        if not 0 <= self.partition < 2**31:
            raise ValueError(f"input partition {self.partition} is out of range")
        if not 0 <= self.start < self.end <= MAX_OFFSET:
            raise ValueError(f"input range [{self.start}, {self.end}) is empty or out of range")
        if not 0 <= self.index < self.count < 2**32:
            raise ValueError(f"part {self.index} of {self.count} does not exist")


@dataclass(frozen=True)
class Cursor:
    """How far a task has applied one input partition's shares: all below ``offset``, and
    of the share that starts there, its parts below ``part``."""

    offset: int
    part: int = 0

    def admit(self, p: Part) -> Verdict:
        """The rule (see the module): apply the next part, skip a passed one, refuse the rest."""
        if p.end <= self.offset or (p.start == self.offset and p.index < self.part):
            return Verdict.SKIP
        if p.start == self.offset and p.index == self.part:
            return Verdict.APPLY
        if p.start > self.offset and self.part == 0 and p.index == 0:
            return Verdict.APPLY  # offsets the input no longer holds, or never held, lie between
        if p.start < self.offset:
            raise ShuffleBroken(f"input partition {p.partition}: a share over [{p.start}, {p.end}) cuts across "
                                f"offset {self.offset}, up to which this task has applied another")
        raise ShuffleBroken(f"input partition {p.partition}: part {p.index} of the share from offset {p.start} "
                            f"came where part {self.part} of the share from {self.offset} was due")

    def after(self, p: Part) -> Cursor:
        """The cursor once ``p`` (admitted) is applied."""
        return Cursor(p.end) if p.index + 1 == p.count else Cursor(p.start, p.index + 1)


def first_cursor(p: Part) -> Cursor:
    """A task that has applied nothing of an input partition takes its first share from
    the first part of it (a later part first means the parts before it are lost)."""
    return Cursor(p.start)


def admit(cursor: Cursor | None, p: Part) -> Verdict:
    return (cursor or first_cursor(p)).admit(p)


def encode_part(p: Part) -> bytes:
    out = [_HEAD.pack(FORMAT, p.partition, p.start, p.end, p.index, p.count)]
    for key, value in p.entries:
        out += [_LEN.pack(len(key)), key, _LEN.pack(len(value)), value]
    return b"".join(out)


def decode_part(blob: bytes) -> Part:
    """A part as ``encode_part`` wrote it; ValueError for any other bytes."""
    if len(blob) < _HEAD.size:
        raise ValueError(f"a part holds at least {_HEAD.size} bytes, this one {len(blob)}")
    fmt, partition, start, end, index, count = _HEAD.unpack_from(blob)
    if fmt != FORMAT:
        raise ValueError(f"part format {fmt}, this brewstream reads {FORMAT}")
    entries: list[tuple[bytes, bytes]] = []
    at = _HEAD.size
    while at < len(blob):
        key, at = _field(blob, at)
        value, at = _field(blob, at)
        entries.append((key, value))
    return Part(partition, start, end, index, count, tuple(entries))


def _field(blob: bytes, at: int) -> tuple[bytes, int]:
    if at + _LEN.size > len(blob):
        raise ValueError(f"a part ends inside a length at byte {at}")
    (n,) = _LEN.unpack_from(blob, at)
    at += _LEN.size
    if at + n > len(blob):
        raise ValueError(f"a part ends inside a field of {n} bytes at byte {at}")
    return blob[at:at + n], at + n


def cut_share(partition: int, start: int, end: int, entries: Sequence[tuple[bytes, bytes]],
              max_bytes: int) -> list[Part]:
    """One task's share of a batch as parts of at most ``max_bytes`` of entries each (an
    entry larger than that alone in its part); a share with no entries is one empty part,
    so the task still learns that the range holds nothing for it."""
    if max_bytes <= 0:
        raise ValueError("max_bytes must be positive")
    groups: list[list[tuple[bytes, bytes]]] = [[]]
    size = 0
    for key, value in entries:
        n = 2 * _LEN.size + len(key) + len(value)
        if groups[-1] and size + n > max_bytes:
            groups.append([])
            size = 0
        groups[-1].append((key, value))
        size += n
    return [Part(partition, start, end, i, len(groups), tuple(g)) for i, g in enumerate(groups)]


def split_batch(shares: Mapping[int, Sequence[tuple[bytes, bytes]]], ranges: Mapping[int, tuple[int, int]],
                tasks: int, routing: Routing = BY_WHOLE_KEY, max_bytes: int = 512 * 1024) -> dict[int, list[Part]]:
    """A batch of the input stage as each task's parts: ``shares`` holds, per input
    partition, the batch's entries (a state key and its delta) read over that partition's
    ``ranges`` ``[start, end)``. Every task gets a share of every input partition the batch
    read, an empty one too, so that its cursor follows the input."""
    missing = set(shares) - set(ranges)
    if missing:
        raise ValueError(f"input partitions {sorted(missing)} have entries but no range")
    out: dict[int, list[Part]] = {t: [] for t in range(tasks)}
    for partition, (start, end) in sorted(ranges.items()):
        by_task: dict[int, list[tuple[bytes, bytes]]] = {t: [] for t in range(tasks)}
        for key, value in shares.get(partition, ()):
            by_task[task_of(key, tasks, routing)].append((key, value))
        for t, entries in by_task.items():
            out[t] += cut_share(partition, start, end, entries, max_bytes)
    return out


@dataclass(frozen=True)
class Admitted:
    """What a task applies of the parts it read, and its cursors once it has."""

    parts: list[Part]
    cursors: dict[int, Cursor]


def admit_all(cursors: Mapping[int, Cursor], parts: Iterable[Part]) -> Admitted:
    """The rule (``Cursor.admit``) over parts in the order the task's partition holds them."""
    now = dict(cursors)
    applied: list[Part] = []
    for p in parts:
        if admit(now.get(p.partition), p) is Verdict.APPLY:
            applied.append(p)
            now[p.partition] = (now.get(p.partition) or first_cursor(p)).after(p)
    return Admitted(applied, now)
