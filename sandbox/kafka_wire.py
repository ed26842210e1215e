"""The Kafka requests the sandbox and its drills need and librdkafka does not offer, spoken
directly to one broker over one socket: DescribeQuorum (who leads the KRaft quorum, i.e.
the active controller), FindCoordinator for a transactional.id, and DescribeTransactions
(the state of that transactional.id's transaction, asked of its coordinator).

confluent-kafka 2.16's ``describe_cluster`` names a controller, but a KRaft broker
answers that field with a random live broker (clients cannot reach controllers), and
its AdminClient has no describe_transactions. Both requests here are in every Kafka 3.3+
broker's API (flexible versions only: compact strings and tagged fields); a reply is a
few hundred bytes, so a lookup costs a round trip, not a JVM start.
"""

from __future__ import annotations

import itertools
import socket
import struct
from dataclasses import dataclass

from topics.errors import BrewError

DESCRIBE_QUORUM = 55
FIND_COORDINATOR = 10
DESCRIBE_TRANSACTIONS = 65
API_VERSIONS = 18
METADATA_TOPIC = "__cluster_metadata"
TRANSACTION_KEY = 1  # FindCoordinator's key type for a transactional.id
CLIENT_ID = b"brewstream-sandbox"
# What a broker answers while it cannot yet (or no longer) say: retriable, not a bug.
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ERROR_NAMES = {
    COORDINATOR_LOAD_IN_PROGRESS: "COORDINATOR_LOAD_IN_PROGRESS",
    COORDINATOR_NOT_AVAILABLE: "COORDINATOR_NOT_AVAILABLE",
    NOT_COORDINATOR: "NOT_COORDINATOR",
    35: "UNSUPPORTED_VERSION",
    41: "NOT_CONTROLLER",
    31: "CLUSTER_AUTHORIZATION_FAILED",
    105: "TRANSACTIONAL_ID_NOT_FOUND",
    53: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
}

_correlation = itertools.count(1)


class WireError(BrewError):
    """The broker could not be asked, or answered with an error code."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Voter:
    node_id: int
    log_end_offset: int
    last_caught_up_ms: int  # the leader's clock; -1 when it does not know


@dataclass(frozen=True)
class Quorum:
    leader_id: int  # -1 while an election runs
    leader_epoch: int
    high_watermark: int
    voters: tuple[Voter, ...]
    observers: tuple[Voter, ...]


@dataclass(frozen=True)
class Coordinator:
    node_id: int
    host: str
    port: int


# A transaction still open (or being completed) in the coordinator's words; any other
# state (Empty, CompleteCommit, CompleteAbort, Dead) leaves nothing for readers to wait on.
OPEN_TRANSACTION_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})


@dataclass(frozen=True)
class TransactionState:
    transactional_id: str
    state: str  # Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, Dead …
    producer_id: int
    producer_epoch: int
    partitions: tuple[tuple[str, int], ...]  # what an open transaction has written to

    @property
    def open(self) -> bool:
        return self.state in OPEN_TRANSACTION_STATES


def describe_quorum(host: str, port: int, timeout: float = 5.0) -> Quorum:
    """The KRaft quorum as its leader sees it; any broker forwards the request there."""
    body = (_uvarint(2) + _compact_str(METADATA_TOPIC)  # one topic
            + _uvarint(2) + struct.pack(">i", 0) + _tags()  # its partition 0
            + _tags() + _tags())
    r = _Reader(_call(host, port, DESCRIBE_QUORUM, 1, body, timeout))
    _check(r.int16(), "describe the quorum")
    topics = r.compact_array_len()
    for _ in range(topics):
        r.compact_str()
        for _ in range(r.compact_array_len()):
            r.int32()  # partition index
            _check(r.int16(), "describe the quorum")
            leader, epoch, hw = r.int32(), r.int32(), r.int64()
            voters, observers = _replicas(r), _replicas(r)
            r.skip_tags()
            return Quorum(leader, epoch, hw, voters, observers)
    raise WireError(f"the broker at {host}:{port} described no metadata quorum")


def find_transaction_coordinator(host: str, port: int, transactional_id: str, timeout: float = 5.0) -> Coordinator:
    """The broker coordinating ``transactional_id``: the leader of its __transaction_state
    partition. ``WireError`` with code COORDINATOR_NOT_AVAILABLE while that partition has no
    leader (or the topic is being created)."""
    body = _compact_str(transactional_id) + struct.pack(">b", TRANSACTION_KEY) + _tags()
    r = _Reader(_call(host, port, FIND_COORDINATOR, 3, body, timeout))
    r.int32()  # throttle time
    code = r.int16()
    message = r.compact_nullable_str()
    _check(code, f"find the coordinator of {transactional_id!r}", message)
    node_id, host_, port_ = r.int32(), r.compact_str(), r.int32()
    return Coordinator(node_id, host_, port_)


def describe_transaction(host: str, port: int, transactional_id: str, timeout: float = 5.0) -> TransactionState:
    """The state of ``transactional_id``'s transaction, asked of its coordinator (at
    ``host``:``port``); ``WireError`` with code NOT_COORDINATOR when that broker is not it."""
    body = _uvarint(2) + _compact_str(transactional_id) + _tags()
    r = _Reader(_call(host, port, DESCRIBE_TRANSACTIONS, 0, body, timeout))
    r.int32()  # throttle time
    for _ in range(r.compact_array_len()):
        code, tid, state = r.int16(), r.compact_str(), r.compact_str()
        _check(code, f"describe the transaction of {transactional_id!r}")
        r.int32()  # transaction timeout
        r.int64()  # start time
        producer_id, epoch = r.int64(), r.int16()
        partitions = []
        for _ in range(r.compact_array_len()):
            topic = r.compact_str()
            partitions += [(topic, r.int32()) for _ in range(r.compact_array_len())]
            r.skip_tags()
        r.skip_tags()
        if tid == transactional_id:
            return TransactionState(tid, state, producer_id, epoch, tuple(partitions))
    raise WireError(f"the broker at {host}:{port} did not describe the transaction of {transactional_id!r}")


def answers(host: str, port: int, timeout: float = 2.0) -> bool:
    """Whether a Kafka broker serves requests on this port (an ApiVersions round trip):
    a node that accepts connections while it starts, or a paused one, does not."""
    try:
        r = _Reader(_call(host, port, API_VERSIONS, 3, _compact_str("brewstream") + _compact_str("1") + _tags(),
                          timeout, flexible_response_header=False))
        return r.int16() == 0
    except (OSError, WireError):
        return False


def _replicas(r: _Reader) -> tuple[Voter, ...]:
    out = []
    for _ in range(r.compact_array_len()):
        node, leo, _last_fetch, caught_up = r.int32(), r.int64(), r.int64(), r.int64()
        r.skip_tags()
        out.append(Voter(node, leo, caught_up))
    return tuple(out)


def _check(code: int, doing: str, message: str | None = None) -> None:
    if code:
        name = ERROR_NAMES.get(code, f"error {code}")
        raise WireError(f"could not {doing}: {name}" + (f" ({message})" if message else ""), code)


def _call(host: str, port: int, api_key: int, version: int, body: bytes, timeout: float,
          flexible_response_header: bool = True) -> bytes:
    """One request, one response; the response body after its header."""
    corr = next(_correlation) & 0x7FFFFFFF
    header = struct.pack(">hhih", api_key, version, corr, len(CLIENT_ID)) + CLIENT_ID + _tags()
    frame = header + body
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack(">i", len(frame)) + frame)
            size = struct.unpack(">i", _recv_exactly(sock, 4))[0]
            data = _recv_exactly(sock, size)
    except OSError as exc:
        raise WireError(f"cannot ask the broker at {host}:{port}: {exc}") from None
    r = _Reader(data)
    if r.int32() != corr:
        raise WireError(f"the broker at {host}:{port} answered another request")
    # ApiVersions answers with header v0 whatever its request version (so that a client
    # that asked for a version the broker lacks can still read the error).
    if flexible_response_header:
        r.skip_tags()
    return data[r.pos:]


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        chunks += chunk
    return bytes(chunks)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _compact_str(s: str) -> bytes:
    raw = s.encode()
    return _uvarint(len(raw) + 1) + raw


def _tags() -> bytes:
    return _uvarint(0)  # no tagged fields


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise WireError("the broker's answer is shorter than its own format says")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return int(value)

    def int16(self) -> int:
        return self._take(">h")

    def int32(self) -> int:
        return self._take(">i")

    def int64(self) -> int:
        return self._take(">q")

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self._take(">B")
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def compact_array_len(self) -> int:
        return max(self.uvarint() - 1, 0)

    def compact_nullable_str(self) -> str | None:
        n = self.uvarint()
        if n == 0:
            return None
        raw = self.data[self.pos:self.pos + n - 1]
        self.pos += n - 1
        return raw.decode(errors="replace")

    def compact_str(self) -> str:
        return self.compact_nullable_str() or ""

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.pos += self.uvarint()
