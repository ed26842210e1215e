"""The bytes of the store and the changelog: one key space for both (pure).

A pipeline's own keys (a drink, a window) are its own business (its wing's codec); the
state layer only keeps its bookkeeping beside them, under keys that start with 0xFF:
that byte never occurs in UTF-8, so such a key is never a name a pipeline writes. Every
bookkeeping value is an 8-byte big-endian unsigned int. An empty value is a tombstone.

The bookkeeping: the next input offset to apply per input partition, counters (under
the meta prefix, named by the pipeline), and a commit marker per changelog partition.
Input offsets are kept per task (``task_offset_key``: in the task's own changelog
partition, so a task restored on its own knows how far its input has been applied); the
store-wide ``StoreState.offsets`` is the least of them, and a store or changelog of an
earlier brewstream, which kept one offset per input partition for the whole store, is
migrated by its next batch (``spread_offsets``).
Two families are local to the store and never published: the changelog position per
changelog partition (how far into the changelog the store has applied), and facts about
the topics the store was built against (the changelog's topic id, name and partition
count, the input's topic id), whose values are raw bytes rather than counts.

Every transaction also writes a shape marker to each changelog partition: the partition
count the changelog had when it was written. A restore that finds another count refuses,
because keys would then hash to other partitions than their older values. For the same
reason, a store whose keys go to partitions by a part of the key (``restorer.tasks.Routing``:
a window by its key, not its start) writes a route marker to each partition as well, the
version of that rule; a store or changelog written by another rule is refused before
a start (``restorer.catchup``). A store routed by its whole keys writes none, as before.

A writer by task (behind a shuffle: each task's entries in a transaction of its own, so
each task is fenced on its own) writes a tasked marker to each partition it commits to.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

U64_LEN = 8
RESERVED = b"\xff"
_OFFSET = RESERVED + b"offset\x00"
_TASK_OFFSET = RESERVED + b"toffset\x00"
_TASK_PART = RESERVED + b"tpart\x00"
_META = RESERVED + b"meta\x00"
_COMMIT = RESERVED + b"commit\x00"
_POSITION = RESERVED + b"position\x00"
_SHAPE = RESERVED + b"shape\x00"
_ROUTE = RESERVED + b"route\x00"
_TASKED = RESERVED + b"tasked\x00"
_LOCAL = RESERVED + b"local\x00"
U64_MAX = 2**64 - 1

# The counter every pipeline's batch writes under the meta prefix: when it committed.
LAST_BATCH_MS = "last_batch_ms"

# Names of the store-local facts under the local prefix (raw byte values).
CHANGELOG_TOPIC_ID = "changelog_topic_id"
CHANGELOG_TOPIC = "changelog_topic"  # its name: which pipeline's state the store holds
CHANGELOG_PARTITIONS = "changelog_partitions"


def input_topic_id_name(topic: str) -> str:
    return f"input_topic_id:{topic}"

Entry = tuple[bytes, bytes | None]  # key, value (None: delete)


def encode_u64(n: int) -> bytes:
    return n.to_bytes(U64_LEN, "big", signed=False)


def decode_u64(value: bytes) -> int:
    if len(value) != U64_LEN:
        raise ValueError(f"expected {U64_LEN} bytes, got {len(value)}")
    return int.from_bytes(value, "big", signed=False)


def encode_i64(n: int) -> bytes:
    """A signed value (a watermark before 1970) in the same 8 bytes, two's complement."""
    return encode_u64(n & U64_MAX)


def as_signed(n: int) -> int:
    """The signed value of what ``encode_i64`` stored and ``decode_u64`` read."""
    return n - 2**64 if n >= 2**63 else n


def offset_key(topic: str, partition: int) -> bytes:
    return _OFFSET + topic.encode() + b"\x00" + str(partition).encode()


def task_offset_key(topic: str, partition: int, task: int) -> bytes:
    """One task's next input offset to apply in ``topic``'s ``partition``; it goes to the
    task's own changelog partition."""
    return _TASK_OFFSET + topic.encode() + b"\x00" + str(partition).encode() + b"\x00" + str(task).encode()


def task_part_key(topic: str, partition: int, task: int) -> bytes:
    """Behind a shuffle (``restorer.shuffle``): of the share of ``topic``'s ``partition``
    that starts at the task's next input offset (``task_offset_key``), how many parts the
    task has applied; the two are the task's cursor. In the task's own changelog partition."""
    return _TASK_PART + topic.encode() + b"\x00" + str(partition).encode() + b"\x00" + str(task).encode()


def task_part_prefix() -> bytes:
    return _TASK_PART


def task_offset_prefix(topic: str) -> bytes:
    return _TASK_OFFSET + topic.encode() + b"\x00"


def task_prefixes() -> tuple[bytes, ...]:
    """The families a shuffle's tasks keep of their own, whatever the topic: their input
    offsets and parts (the cursors, and their repartition offsets), and the tasked marker."""
    return (_TASK_OFFSET, _TASK_PART, _TASKED)


def spread_offsets(entries: Iterable[Entry], tasks: Iterable[int], legacy: Collection[bytes] = ()) -> list[Entry]:
    """A batch's entries with each input offset (``offset_key``) written as every task's
    own (``task_offset_key``), and the store-wide key it replaces deleted where ``legacy``
    (the store-wide keys the store still holds: an earlier brewstream's) names it."""
    tasks = list(tasks)
    out: list[Entry] = []
    for key, value in entries:
        if not key.startswith(_OFFSET):
            out.append((key, value))
            continue
        topic, part = _topic_partition(key[len(_OFFSET):])
        out += [(task_offset_key(topic, part, t), value) for t in tasks]
        if key in legacy:
            out.append((key, None))
    return out


def _topic_partition(rest: bytes) -> tuple[str, int]:
    """``<topic> 0x00 <partition>``, as input offsets name them (after their prefix)."""
    topic, _, part = rest.rpartition(b"\x00")
    return topic.decode(), int(part)


def is_offset_key(key: bytes) -> bool:
    """A store-wide input offset (``offset_key``), as pipelines write them and earlier
    brewstreams kept them."""
    return key.startswith(_OFFSET)


def meta_key(name: str) -> bytes:
    return _META + name.encode()


def commit_key(changelog_partition: int) -> bytes:
    """Key of the commit marker that every transaction writes to one changelog partition."""
    return _COMMIT + str(changelog_partition).encode()


def position_key(changelog_partition: int) -> bytes:
    """Store-local: the changelog offset up to which this store has applied partition p."""
    return _POSITION + str(changelog_partition).encode()


def shape_key(changelog_partition: int) -> bytes:
    """Key of the marker holding the changelog's partition count, in that partition."""
    return _SHAPE + str(changelog_partition).encode()


def route_key(changelog_partition: int) -> bytes:
    """Key of the marker holding the version of the rule that routed keys to partitions."""
    return _ROUTE + str(changelog_partition).encode()


def tasked_key(changelog_partition: int) -> bytes:
    """Key of the marker saying the partition's batches are committed task by task, each
    task in a transaction of its own (``restorer.changelog``'s writer by task), so a
    restore never waits for the partitions to name one batch."""
    return _TASKED + str(changelog_partition).encode()


def local_key(name: str) -> bytes:
    """Store-local fact (never published); its value is raw bytes."""
    return _LOCAL + name.encode()


def offset_prefix(topic: str) -> bytes:
    return _OFFSET + topic.encode() + b"\x00"


def position_prefix() -> bytes:
    return _POSITION


def commit_prefix() -> bytes:
    return _COMMIT


def shape_prefix() -> bytes:
    return _SHAPE


def route_prefix() -> bytes:
    return _ROUTE


def tasked_prefix() -> bytes:
    return _TASKED


def local_prefix() -> bytes:
    return _LOCAL


def published_prefixes() -> tuple[bytes, ...]:
    """The reserved families that travel through the changelog."""
    return (_OFFSET, _TASK_OFFSET, _META, _COMMIT, _SHAPE, _ROUTE, _TASKED)


def is_reserved(key: bytes) -> bool:
    """Not a pipeline's own key (a drink, a window): bookkeeping under the reserved byte."""
    return key.startswith(RESERVED)


def is_local(key: bytes) -> bool:
    return key.startswith((_POSITION, _LOCAL))


def pinned_prefixes() -> tuple[bytes, ...]:
    """The families whose keys name the changelog partition they belong to: the markers,
    and each task's input offsets."""
    return (_COMMIT, _SHAPE, _ROUTE, _TASKED, _TASK_OFFSET)


def changelog_partition_of(key: bytes) -> int | None:
    """The partition a key must be produced to, when it is not left to the partitioner."""
    if key.startswith((_TASK_OFFSET, _TASK_PART)):
        return int(key.rpartition(b"\x00")[2])
    for prefix in (_COMMIT, _SHAPE, _ROUTE, _TASKED):
        if key.startswith(prefix):
            return int(key[len(prefix):])
    return None


@dataclass
class StoreState:
    """A decoded view of the whole key space: the pipeline's own keys as raw bytes
    (``names``, for its wing to decode), the bookkeeping decoded."""

    names: dict[bytes, bytes] = field(default_factory=dict)
    # The next input offset per topic and partition: the least any task of the store has
    # (equal for every task while one instance holds them all), else an earlier
    # brewstream's store-wide one.
    offsets: dict[str, dict[int, int]] = field(default_factory=dict)
    task_offsets: dict[int, dict[str, dict[int, int]]] = field(default_factory=dict)  # task -> its own
    task_parts: dict[int, dict[str, dict[int, int]]] = field(default_factory=dict)  # task -> its cursors' parts
    meta: dict[str, int] = field(default_factory=dict)
    commits: dict[int, int] = field(default_factory=dict)
    positions: dict[int, int] = field(default_factory=dict)
    shapes: dict[int, int] = field(default_factory=dict)  # changelog partition -> partition count
    routes: dict[int, int] = field(default_factory=dict)  # changelog partition -> routing version
    tasked: set[int] = field(default_factory=set)  # changelog partitions committed task by task
    local: dict[str, bytes] = field(default_factory=dict)

    @property
    def last_seq(self) -> int:
        """The sequence number of the last batch committed (0: none yet)."""
        return max(self.commits.values(), default=0)

    def next_offsets(self, topic: str) -> dict[int, int]:
        return dict(self.offsets.get(topic, {}))

    def is_empty(self) -> bool:
        return not (self.names or self.offsets or self.task_offsets or self.task_parts or self.meta or self.commits
                    or self.positions or self.shapes or self.routes or self.tasked or self.local)

    def offsets_json(self) -> dict[str, dict[str, int]]:
        """The next input offset per partition, as ``brewstream counts --json`` prints them."""
        return {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in sorted(self.offsets.items())}


def decode_entries(entries: Iterable[tuple[bytes, bytes]]) -> StoreState:
    """Decode raw key/value pairs; a reserved key of unknown shape is an error, not
    silently skipped."""
    state = StoreState()
    for key, value in entries:
        if key.startswith(_LOCAL):
            state.local[key[len(_LOCAL):].decode()] = value
            continue
        if not key.startswith(RESERVED):
            state.names[key] = value
            continue
        n = decode_u64(value)
        if key.startswith(_OFFSET):
            topic, part = _topic_partition(key[len(_OFFSET):])
            state.offsets.setdefault(topic, {})[part] = n
        elif key.startswith(_TASK_OFFSET):
            rest, _, task = key[len(_TASK_OFFSET):].rpartition(b"\x00")
            topic, part = _topic_partition(rest)
            state.task_offsets.setdefault(int(task), {}).setdefault(topic, {})[part] = n
        elif key.startswith(_TASK_PART):
            rest, _, task = key[len(_TASK_PART):].rpartition(b"\x00")
            topic, part = _topic_partition(rest)
            state.task_parts.setdefault(int(task), {}).setdefault(topic, {})[part] = n
        elif key.startswith(_META):
            state.meta[key[len(_META):].decode()] = n
        elif key.startswith(_COMMIT):
            state.commits[int(key[len(_COMMIT):])] = n
        elif key.startswith(_POSITION):
            state.positions[int(key[len(_POSITION):])] = n
        elif key.startswith(_SHAPE):
            state.shapes[int(key[len(_SHAPE):])] = n
        elif key.startswith(_ROUTE):
            state.routes[int(key[len(_ROUTE):])] = n
        elif key.startswith(_TASKED):
            if n:
                state.tasked.add(int(key[len(_TASKED):]))
        else:
            raise ValueError(f"unknown reserved key {key!r}")
    least: dict[str, dict[int, int]] = {}
    for per_topic in state.task_offsets.values():
        for name, parts in per_topic.items():
            view = least.setdefault(name, {})
            for p, o in parts.items():
                view[p] = min(view.get(p, o), o)
    for name, parts in least.items():
        state.offsets.setdefault(name, {}).update(parts)
    return state
