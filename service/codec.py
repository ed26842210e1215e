"""The bytes of the store and the changelog: one key space for both (pure).

A drink's key is its name in UTF-8 and its value an 8-byte big-endian unsigned count,
as in the seed. Everything else the store keeps (input offsets, counters, commit
markers) lives under keys that start with 0xFF: that byte never occurs in UTF-8, so
such a key can never be a drink name. All values are 8-byte big-endian unsigned ints.
An empty value is a tombstone.

One family of keys is local to the store and never published: the changelog position
per changelog partition, i.e. how far into the changelog the store has applied.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

U64_LEN = 8
RESERVED = b"\xff"
_OFFSET = RESERVED + b"offset\x00"
_META = RESERVED + b"meta\x00"
_COMMIT = RESERVED + b"commit\x00"
_POSITION = RESERVED + b"position\x00"

# Names of the counters under the meta prefix.
PROCESSED_ORDERS = "processed_orders"
BAD_ORDERS = "bad_orders"
LAST_BATCH_MS = "last_batch_ms"

Entry = tuple[bytes, bytes | None]  # key, value (None: delete)


def encode_u64(n: int) -> bytes:
    return n.to_bytes(U64_LEN, "big", signed=False)


def decode_u64(value: bytes) -> int:
    if len(value) != U64_LEN:
        raise ValueError(f"expected {U64_LEN} bytes, got {len(value)}")
    return int.from_bytes(value, "big", signed=False)


def drink_key(drink: str) -> bytes:
    return drink.encode("utf-8")


def offset_key(topic: str, partition: int) -> bytes:
    return _OFFSET + topic.encode() + b"\x00" + str(partition).encode()


def meta_key(name: str) -> bytes:
    return _META + name.encode()


def commit_key(changelog_partition: int) -> bytes:
    """Key of the commit marker that every transaction writes to one changelog partition."""
    return _COMMIT + str(changelog_partition).encode()


def position_key(changelog_partition: int) -> bytes:
    """Store-local: the changelog offset up to which this store has applied partition p."""
    return _POSITION + str(changelog_partition).encode()


def offset_prefix(topic: str) -> bytes:
    return _OFFSET + topic.encode() + b"\x00"


def position_prefix() -> bytes:
    return _POSITION


def commit_prefix() -> bytes:
    return _COMMIT


def is_local(key: bytes) -> bool:
    return key.startswith(_POSITION)


def changelog_partition_of(key: bytes) -> int | None:
    """The partition a key must be produced to, when it is not left to the partitioner."""
    if key.startswith(_COMMIT):
        return int(key[len(_COMMIT):])
    return None


@dataclass
class StoreState:
    """A decoded view of the whole key space: what `brewstream counts --json` prints."""

    counts: dict[str, int] = field(default_factory=dict)
    offsets: dict[str, dict[int, int]] = field(default_factory=dict)
    meta: dict[str, int] = field(default_factory=dict)
    commits: dict[int, int] = field(default_factory=dict)
    positions: dict[int, int] = field(default_factory=dict)

    def next_offsets(self, topic: str) -> dict[int, int]:
        return dict(self.offsets.get(topic, {}))

    @property
    def processed_orders(self) -> int:
        return self.meta.get(PROCESSED_ORDERS, 0)

    def is_empty(self) -> bool:
        return not (self.counts or self.offsets or self.meta or self.commits or self.positions)

    def as_json(self) -> dict[str, object]:
        return {
            "counts": dict(sorted(self.counts.items())),
            "offsets": {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in sorted(self.offsets.items())},
        }


def decode_entries(entries: Iterable[tuple[bytes, bytes]]) -> StoreState:
    """Decode raw key/value pairs; a key of unknown shape is an error, not silently skipped."""
    state = StoreState()
    for key, value in entries:
        n = decode_u64(value)
        if not key.startswith(RESERVED):
            state.counts[key.decode("utf-8")] = n
        elif key.startswith(_OFFSET):
            topic, _, part = key[len(_OFFSET):].rpartition(b"\x00")
            state.offsets.setdefault(topic.decode(), {})[int(part)] = n
        elif key.startswith(_META):
            state.meta[key[len(_META):].decode()] = n
        elif key.startswith(_COMMIT):
            state.commits[int(key[len(_COMMIT):])] = n
        elif key.startswith(_POSITION):
            state.positions[int(key[len(_POSITION):])] = n
        else:
            raise ValueError(f"unknown reserved key {key!r}")
    return state
