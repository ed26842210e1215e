"""One Kafka transaction per batch: changelog entries, commit and shape markers, and output
records (DLQ, window results, late events).

The transactional.id belongs to the changelog (see ``transactional_id``), so any two
instances writing one changelog fence each other: starting one aborts whatever the other
left open, and the other's next transaction fails as fenced. A reader with
isolation.level=read_committed therefore sees every batch whole, or not at all.

Every changelog key goes to the partition Kafka's own partitioner would pick for its state
key (``restorer.tasks``) and the partition count the changelog was built with (murmur2,
like the Java client), so a topic that grows later never splits a key's history over two
partitions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from restorer.codec import Entry, changelog_partition_of, commit_key, encode_u64, route_key, shape_key, tasked_key
from restorer.tasks import BY_WHOLE_KEY, Routing, task_of
from topics.errors import BrewError, KafkaUnavailable
from topics.kafka import KafkaConnection, TopicShape, describe_topic, failed, is_transient
from topics.records import call_until, close_transactional, is_fenced, produce_waiting

log = logging.getLogger(__name__)
T = TypeVar("T")


class Fenced(BrewError):
    """Another instance registered the same changelog writer: this one must stop writing."""


@dataclass(frozen=True)
class OutputRecord:
    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None = None
    # By task (``ChangelogWriter(by_task=True)``): the task whose transaction carries it,
    # so it is written exactly when that task's entries are.
    task: int | None = None


TXN_TIMEOUT_S = 60.0
# How long a commit waits for the cluster (a partition leader being elected, the
# coordinator moving, the ISR below min.insync.replicas) before the batch is given up as
# ``KafkaUnavailable``: the daemon then waits for the cluster and starts the batch over.
COMMIT_WAIT_S = 30.0
# The producer blocks once this much is queued, so a batch with a flood of big DLQ records
# streams through it instead of piling up in memory.
QUEUE_KBYTES = 64 * 1024


# What a partition leader or transaction coordinator answers for a transaction the cluster
# itself ended or lost while a broker was paused, killed or failing over (a produce that
# reached a leader after the coordinator moved, say): not this writer's doing nor the
# batch's, so the batch is done again from the start once Kafka serves, like any refusal of
# a healing cluster. Seen under a coordinator SIGSTOPped for 40 s: the daemon exited on it.
_ENDED_BY_THE_CLUSTER = frozenset({KafkaError.INVALID_TXN_STATE})


def cluster_trouble_in(err: KafkaError, failures: Sequence[KafkaError]) -> bool:
    """Pure: whether a changelog transaction that failed with ``err`` (its records' own
    failures in ``failures``) failed on the cluster's trouble, which waiting out mends
    (``KafkaUnavailable``): a transient error, or one the cluster ends transactions with,
    of the call itself or of every record when the transaction must be aborted. A fenced
    writer is told apart before this; anything else is the batch's or the writer's own."""
    def theirs(e: KafkaError) -> bool:
        return is_transient(e) or (not e.fatal() and e.code() in _ENDED_BY_THE_CLUSTER)
    return theirs(err) or (bool(err.txn_requires_abort()) and all(theirs(f) for f in failures))


def transactional_id(changelog_topic: str) -> str:
    """The fencing identity: one per changelog, whatever the state dir, host or instance."""
    return f"brewstream:{changelog_topic}"


def task_transactional_id(changelog_topic: str, task: int) -> str:
    """A task's fencing identity, for a changelog written by task: one per partition."""
    return f"brewstream:{changelog_topic}:task-{task}"


class Delivered:
    """What one transaction's records came back with: the offset just past each partition's
    last tracked record, and every failure."""

    def __init__(self) -> None:
        self.positions: dict[int, int] = {}
        self.failures: list[KafkaError] = []

    def tracked(self, err: KafkaError | None, msg: Message) -> None:
        """A delivery report that moves its partition's position."""
        p, o = msg.partition(), msg.offset()
        if err is not None:
            self.failures.append(err)
        elif p is not None and o is not None and o + 1 > self.positions.get(p, 0):
            self.positions[p] = o + 1

    def checked(self, err: KafkaError | None, _msg: Message) -> None:
        """A delivery report only checked for failure."""
        if err is not None:
            self.failures.append(err)


class TransactionalWriter:
    """A transactional producer and the one way its transactions end: committed, fenced
    (``Fenced``: a newer writer registered the same id), given up on the cluster's trouble
    (``KafkaUnavailable``), or failed (``BrewError``); never half-applied. ``what`` names
    what it writes, in every message."""

    def __init__(self, conn: KafkaConnection, transactional_id: str, what: str,
                 max_record_bytes: int = 1_000_000, left: str = "its store as of its last committed batch") -> None:
        self.transactional_id = transactional_id
        self.what = what
        self.left = left  # what a fenced writer leaves behind, for its message
        self._conn = conn
        self.producer: Producer = conn.producer({
            "transactional.id": transactional_id,
            "transaction.timeout.ms": int(TXN_TIMEOUT_S * 1000),
            "linger.ms": 5,
            "queue.buffering.max.kbytes": QUEUE_KBYTES,
            # Room for the largest output record the topics take (see kafka.fit_record).
            "message.max.bytes": max(1_000_000, min(max_record_bytes + 4096, 1_000_000_000)),
        })

    def start(self) -> None:
        """Register the transactional.id: fences older writers, aborts their open txn."""
        try:
            self.producer.init_transactions(TXN_TIMEOUT_S)
        except KafkaException as exc:
            what = f"cannot start {self.what} transactions as {self.transactional_id}"
            raise failed(self._conn, what, exc, self.producer) from None

    def transact(self, write: Callable[[Producer, Delivered], None],
                 before_commit: Callable[[], None] | None = None) -> Delivered:
        """One transaction: ``write`` produces its records (reporting to the ``Delivered``
        it is given), then it commits."""
        producer = self.producer
        delivered = Delivered()
        try:
            producer.begin_transaction()
            write(producer, delivered)
            if before_commit is not None:
                before_commit()
            self._commit()  # serves every delivery report before it returns
        except KafkaException as exc:
            err = exc.args[0]
            failures = delivered.failures
            # A commit can fail on the cluster's trouble and the abort after it on the
            # fence a successor raised meanwhile: fenced all the same. Taken for the
            # cluster's trouble, it would start again as the writer and fence the successor.
            fence = err if is_fenced(err) else self._abort() if err.txn_requires_abort() else None
            if fence is not None:
                raise Fenced(f"another instance took over the {self.what} (this one was fenced out: {fence.str()}); "
                             f"it commits nothing more, {self.left}") from None
            text = f"the {self.what} transaction failed: {err.str()}" + (f" ({failures[0].str()})" if failures else "")
            if cluster_trouble_in(err, failures):
                # The cluster refused or lost the batch while it heals; whether or not it
                # committed, the next start (or the daemon's own, once Kafka serves again)
                # finds out from what was committed and repeats nothing twice.
                raise KafkaUnavailable(text) from None
            raise BrewError(f"{text}; nothing of this batch was committed, the next start repeats it") from None
        if delivered.failures:  # a committed transaction never has failed deliveries; stay safe anyway
            raise BrewError(f"a record of the {self.what} transaction failed: {delivered.failures[0].str()}")
        return delivered

    def _commit(self) -> None:
        """Commit, asking again past retriable errors until ``COMMIT_WAIT_S`` (``call_until``);
        then the last error is raised."""
        call_until(self.producer.commit_transaction, time.monotonic() + COMMIT_WAIT_S)

    def _abort(self) -> KafkaError | None:
        """Abort the transaction; the fence when the abort found this writer fenced."""
        try:
            self.producer.abort_transaction(TXN_TIMEOUT_S)
        except KafkaException as exc:
            err = exc.args[0]
            if is_fenced(err):
                return err
            log.warning("aborting the %s transaction failed: %s", self.what, err.str())
        return None

    def close(self) -> None:
        err = close_transactional(self.producer)
        if err is not None:
            log.debug("closing the %s writer: %s", self.what, err.str())


class ChangelogWriter:
    """The changelog's writer: each batch in one transaction over every partition, or with
    ``by_task``, each task's share of it (its partition's entries) in a transaction of the
    task's own (``task_transactional_id``), so that a task is fenced on its own. A batch
    split so may commit for some tasks only, which a store behind a shuffle takes in its
    stride: each task applies its input by cursors of its own (``restorer.shuffle``)."""

    def __init__(self, conn: KafkaConnection, topic: str, partitions: Sequence[int],
                 max_record_bytes: int = 1_000_000, routing: Routing = BY_WHOLE_KEY, by_task: bool = False,
                 tasks: Iterable[int] | None = None) -> None:
        """``tasks``, by task: the tasks this writer holds (default: all), the only ones its
        batches may write to; their stores are the only ones it brings up to date."""
        self.topic = topic
        self.partitions = list(partitions)
        self.routing = routing
        self.by_task = by_task
        self.owned = sorted(tasks) if by_task and tasks is not None else list(self.partitions)
        if not set(self.owned) <= set(self.partitions):
            raise ValueError(f"tasks {self.owned} are not all among the changelog's partitions {self.partitions}")
        self.transactional_id = transactional_id(topic)
        self._conn = conn
        self._txn = TransactionalWriter(conn, self.transactional_id, f"changelog {topic}", max_record_bytes)
        self._tasks = {t: TransactionalWriter(conn, task_transactional_id(topic, t), f"changelog {topic} (task {t})",
                                              max_record_bytes) for t in (self.owned if by_task else ())}
        self._pool = ThreadPoolExecutor(max_workers=max(1, min(len(self._tasks), 16)),
                                        thread_name_prefix="changelog-tasks")

    def start(self) -> None:
        """Register the transactional.id: fences older instances, aborts their open txn.
        By task, every task's too; the changelog's own id is still registered, so a writer
        of the whole changelog is fenced as well."""
        self._txn.start()
        self._at_once([task.start for task in self._tasks.values()])

    def shape(self) -> TopicShape:
        """The changelog's topic id and partition count as the broker has them now."""
        return describe_topic(self._conn, self.topic)

    def markers(self, seq: int, partitions: Iterable[int] | None = None) -> list[Entry]:
        """The entries a transaction writes to each partition it commits to (default: every
        partition): batch ``seq``, the partition count and, for keys routed by a part of
        them, the routing's version, so a restore can prove it read one whole batch of the
        same shape; by task, the tasked marker too (``codec.tasked_key``)."""
        parts = self.partitions if partitions is None else sorted(partitions)
        n = encode_u64(len(self.partitions))
        markers: list[Entry] = [(commit_key(p), encode_u64(seq)) for p in parts]
        if self.routing.version:
            markers += [(route_key(p), encode_u64(self.routing.version)) for p in parts]
        if self.by_task:
            markers += [(tasked_key(p), encode_u64(1)) for p in parts]
        return markers + [(shape_key(p), n) for p in parts]

    def batch_markers(self, seq: int, entries: Iterable[Entry]) -> list[Entry]:
        """The markers of a batch of ``entries``: every partition's in one transaction; by
        task, those of the tasks it writes to."""
        return self.markers(seq, {self.partition_of(k) for k, _ in entries} if self.by_task else None)

    def partition_of(self, key: bytes) -> int:
        pinned = changelog_partition_of(key)
        return pinned if pinned is not None else task_of(key, len(self.partitions), self.routing)

    def publish(self, entries: Sequence[Entry], outputs: Iterable[OutputRecord] = (),
                before_commit: Callable[[], None] | None = None) -> dict[int, int]:
        """Produce ``entries`` and ``outputs`` in one transaction and commit it; by task,
        each task's entries in a transaction of its own, all but the last at once, then the
        last (``before_commit`` before its commit: the others are committed by then), each
        output in the transaction of its ``task``, which must write entries too.

        ``outputs`` is consumed lazily, so it may stream records too big to hold at once.
        Returns, per changelog partition written, the offset just past this batch's
        records: the store's position once it has applied them. Raises ``Fenced`` when
        another instance has taken the changelog (or a task of it) over.
        """
        if self.by_task:
            return self._publish_by_task(entries, outputs, before_commit)

        def write(producer: Producer, delivered: Delivered) -> None:
            for key, value in entries:
                assert key is not None
                produce_waiting(producer, self.topic, key, value, partition=self.partition_of(key),
                                on_delivery=delivered.tracked)
            for out in outputs:
                produce_waiting(producer, out.topic, out.key, out.value, headers=out.headers,
                                on_delivery=delivered.checked)

        return self._txn.transact(write, before_commit).positions

    def _publish_by_task(self, entries: Sequence[Entry], outputs: Iterable[OutputRecord],
                         before_commit: Callable[[], None] | None) -> dict[int, int]:
        shares: dict[int, list[Entry]] = {}
        for key, value in entries:
            shares.setdefault(self.partition_of(key), []).append((key, value))
        carried: dict[int, list[OutputRecord]] = {}
        for out in outputs:
            if out.task not in shares:
                raise ValueError(f"an output record by task goes with the entries of its task, and task {out.task} "
                                 "writes none in this batch")
            carried.setdefault(out.task, []).append(out)
        if not shares:
            return {}
        foreign = sorted(set(shares) - set(self._tasks))
        if foreign:
            raise BrewError(f"a batch writes to task(s) {foreign} of changelog {self.topic}, which this instance does "
                            f"not hold (it holds {sorted(self._tasks)}); nothing of it was committed")

        def transaction(task: int, share: list[Entry], before: Callable[[], None] | None = None) -> Delivered:
            def write(producer: Producer, delivered: Delivered) -> None:
                for key, value in share:
                    produce_waiting(producer, self.topic, key, value, partition=task, on_delivery=delivered.tracked)
                for out in carried.get(task, ()):
                    produce_waiting(producer, out.topic, out.key, out.value, headers=out.headers,
                                    on_delivery=delivered.checked)
            return self._tasks[task].transact(write, before)

        # The tasks' transactions at once, each on its own producer, the last one after them:
        # two round trips to the cluster a batch, however many tasks it writes to.
        *others, (last, share) = sorted(shares.items())
        positions: dict[int, int] = {}
        for done in self._at_once([partial(transaction, t, s) for t, s in others]):
            positions.update(done.positions)
        positions.update(transaction(last, share, before_commit).positions)
        return positions

    def _at_once(self, calls: Sequence[Callable[[], T]]) -> list[T]:
        """``calls`` run at once; once all ended, a failure is raised (a fence before any
        other: a fenced task must never be taken for the cluster's trouble)."""
        if len(calls) <= 1:
            return [call() for call in calls]
        futures = [self._pool.submit(call) for call in calls]
        wait(futures)
        errors = [e for e in (f.exception() for f in futures) if e is not None]
        if errors:
            raise next((e for e in errors if isinstance(e, Fenced)), errors[0])
        return [f.result() for f in futures]

    def close(self) -> None:
        self._txn.close()
        for task in self._tasks.values():
            task.close()
        self._pool.shutdown(wait=False)
