"""Who does what in a Kafka cluster right now, for drills that aim a fault at a role: the
active KRaft controller, the leader of a partition, the transaction coordinator of a
transactional.id (and the state of its transaction); and a wait for every partition of some topics to have its full ISR
again (a rolling restart brings each broker back into every ISR before the next).

The controller and the coordinator come from Kafka's own answers (DescribeQuorum and
FindCoordinator, ``sandbox.kafka_wire``), asked of the first node that answers; leaders
and ISRs from a metadata request. Each is a snapshot: leadership moves whenever a
broker dies, and a caller that acts on the answer should expect it to be stale.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from sandbox.kafka_wire import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    NOT_COORDINATOR,
    Coordinator,
    Quorum,
    TransactionState,
    WireError,
    describe_quorum,
    describe_transaction,
    find_transaction_coordinator,
)
from topics.clock import WaitTimedOut, wait_until
from topics.errors import BrewError
from topics.kafka import KafkaConnection

ISR_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    leader: int | None  # None while the partition has no leader
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def full(self) -> bool:
        return self.leader is not None and set(self.isr) == set(self.replicas)


def quorum(bootstrap: str, timeout: float = 2.0) -> Quorum:
    """The KRaft quorum (leader, epoch, voters) from the first of ``bootstrap``'s brokers that
    answers; any broker forwards DescribeQuorum to the active controller."""
    errors = []
    for host, port in _addresses(bootstrap):
        try:
            return describe_quorum(host, port, timeout)
        except WireError as exc:
            errors.append(str(exc))
    raise WireError("; ".join(errors) or f"no broker in {bootstrap!r}")


def active_controller(bootstrap: str, timeout: float = 2.0) -> int | None:
    """The node id of the active controller (the quorum's leader); None during an election."""
    leader = quorum(bootstrap, timeout).leader_id
    return leader if leader >= 0 else None


def transaction_coordinator(bootstrap: str, transactional_id: str, timeout: float = 30.0) -> int:
    """The node coordinating ``transactional_id``, waiting up to ``timeout`` while the
    cluster cannot say (its __transaction_state partition has no leader yet)."""
    return _coordinator(bootstrap, transactional_id, timeout).node_id


def transaction_state(bootstrap: str, transactional_id: str, timeout: float = 30.0) -> TransactionState:
    """The state of ``transactional_id``'s transaction, as its coordinator has it now
    (DescribeTransactions), waiting up to ``timeout`` while the coordinator moves."""
    found: list[TransactionState] = []

    def described() -> bool:
        where = _coordinator(bootstrap, transactional_id, timeout)
        try:
            found.append(describe_transaction(where.host, where.port, transactional_id, timeout=2.0))
        except WireError as exc:
            if exc.code not in (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, None):
                raise
            return False
        return True

    try:
        wait_until(described, timeout, f"the transaction state of {transactional_id!r}", every=0.2)
    except WaitTimedOut as exc:
        raise BrewError(str(exc)) from None
    return found[-1]


def _coordinator(bootstrap: str, transactional_id: str, timeout: float) -> Coordinator:
    def ask() -> Coordinator | None:
        for host, port in _addresses(bootstrap):
            try:
                return find_transaction_coordinator(host, port, transactional_id, timeout=2.0)
            except WireError as exc:
                if exc.code not in (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, None):
                    raise
        return None

    found: list[Coordinator] = []

    def known() -> bool:
        where = ask()
        if where is not None:
            found.append(where)
        return where is not None

    try:
        wait_until(known, timeout, f"a transaction coordinator for {transactional_id!r}", every=0.2)
    except WaitTimedOut as exc:
        raise BrewError(str(exc)) from None
    return found[-1]


def partitions(conn: KafkaConnection, topics: Iterable[str], timeout: float = 5.0) -> list[PartitionState]:
    """Leader, replicas and ISR of every partition of ``topics``, from one metadata request."""
    names = list(topics)
    meta = conn.admin().list_topics(timeout=timeout)
    out = []
    for name in names:
        info = meta.topics.get(name)
        if info is None or info.error is not None:
            why = f" ({info.error.str()})" if info is not None and info.error is not None else ""
            raise BrewError(f"topic {name} does not exist{why}")
        for pid, p in sorted(info.partitions.items()):
            out.append(PartitionState(name, pid, p.leader if p.leader >= 0 else None, tuple(p.replicas),
                                      tuple(p.isrs)))
    return out


def partition_leader(conn: KafkaConnection, topic: str, partition: int) -> int | None:
    """The node leading ``topic``-``partition``; None while it has no leader."""
    for p in partitions(conn, [topic]):
        if p.partition == partition:
            return p.leader
    raise BrewError(f"topic {topic} has no partition {partition}")


def wait_full_isr(conn: KafkaConnection, topics: Iterable[str], timeout: float = ISR_TIMEOUT_S) -> float:
    """Wait until every partition of ``topics`` has a leader and every replica in its ISR;
    return the seconds it took. A failed metadata request (a broker just died) is asked again."""
    names = list(topics)
    began = time.monotonic()
    lagging: list[PartitionState] = []

    def complete() -> bool:
        nonlocal lagging
        try:
            lagging = [p for p in partitions(conn, names) if not p.full]
        except Exception:
            return False
        return not lagging

    try:
        wait_until(complete, timeout, f"every partition of {', '.join(names)} to have its full ISR", every=0.2)
    except WaitTimedOut as exc:
        short = ", ".join(f"{p.topic}-{p.partition} isr {list(p.isr)} of {list(p.replicas)}" for p in lagging[:5])
        raise BrewError(f"{exc}" + (f" (still short: {short})" if short else "")) from None
    return time.monotonic() - began


def _addresses(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for item in bootstrap.split(","):
        host, _, port = item.strip().rpartition(":")
        if host and port.isdigit():
            out.append((host.strip("[]"), int(port)))
    return out
