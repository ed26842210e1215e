"""The repartition topic between the input stage and the tasks (``shuffle``): the input
stage's transaction, a task's parts read back, and the purge of what every task applied.

- **The topic.** R partitions, one per task as in the changelog, written to by partition
  number (a task's parts in its own partition, whatever their keys). No time or size
  retention (``topics.catalog.REPARTITION``): a part leaves only by ``purge``, since one
  removed before its task applied it is a lost part (``shuffle.ShuffleBroken``).
- **The input stage's transaction** (``PartWriter.publish``), one per batch: every task's
  parts (``shuffle.split_batch``) and the batch's output records (its DLQ records).
- **Its progress lives in its parts** (``resume_offsets``): every batch hands every task a
  share of each input partition it read, so the highest end among the committed parts is
  where the last committed batch ended; where the purge left no part, every task has
  applied all it was handed, and its cursor says the same. A stage whose Spark checkpoint
  was lost resumes exactly there. (Not a consumer group's offsets committed with the
  transaction: librdkafka's ``send_offsets_to_transaction`` can block for good past its
  timeout once the group's coordinator is lost, confluentinc/librdkafka#5456, and a group
  with no member loses its offsets after ``offsets.retention.minutes``.)
- **One input-stage writer at a time.** The transactional id belongs to the repartition
  topic (``input_stage_id``): a second writer fences the first, whose transaction in flight
  is aborted, so each input partition's shares follow each other as ``shuffle``'s rule
  needs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from confluent_kafka import KafkaException, Producer, TopicPartition

from restorer.changelog import Delivered, OutputRecord, TransactionalWriter
from restorer.codec import decode_entries, task_offset_prefix, task_part_prefix
from restorer.shuffle import Part, decode_part, encode_part
from restorer.store import Store
from topics.errors import BrewError
from topics.kafka import KafkaConnection, failed
from topics.records import produce_waiting, read_from

PURGE_TIMEOUT_S = 30.0


def input_stage_id(topic: str) -> str:
    """The input stage's fencing identity: one per repartition topic."""
    return f"brewstream:{topic}"


class PartWriter:
    """The input stage's writer of one repartition topic of ``tasks`` partitions."""

    def __init__(self, conn: KafkaConnection, topic: str, tasks: int, max_record_bytes: int = 1_000_000) -> None:
        self.topic = topic
        self.tasks = tasks
        self._conn = conn
        self._txn = TransactionalWriter(conn, input_stage_id(topic), f"repartition topic {topic}", max_record_bytes,
                                        left="its parts as of its last committed batch")

    def start(self) -> None:
        """Register the transactional id: fences an older input stage, aborts its open txn."""
        self._txn.start()

    def publish(self, parts: Mapping[int, Sequence[Part]], outputs: Iterable[OutputRecord] = (),
                before_commit: Callable[[], None] | None = None) -> dict[int, int]:
        """One batch of the input stage in one transaction: each task's ``parts`` in its
        partition, and ``outputs``. Returns, per task partition written, the offset just
        past the batch's parts."""
        wrong = sorted(t for t in parts if not 0 <= t < self.tasks)
        if wrong:
            raise ValueError(f"tasks {wrong} do not exist among {self.tasks}")

        def write(producer: Producer, delivered: Delivered) -> None:
            for task, task_parts in sorted(parts.items()):
                for p in task_parts:
                    produce_waiting(producer, self.topic, str(p.partition).encode(), encode_part(p), partition=task,
                                    on_delivery=delivered.tracked)
            for out in outputs:
                produce_waiting(producer, out.topic, out.key, out.value, headers=out.headers,
                                on_delivery=delivered.checked)

        return self._txn.transact(write, before_commit).positions

    def close(self) -> None:
        self._txn.close()


def resume_offsets(conn: KafkaConnection, topic: str, applied: Mapping[int, int] = MappingProxyType({})
                   ) -> dict[int, int]:
    """Where the input stage of ``topic`` resumes on each input partition (see the module):
    the highest end among the committed parts the topic holds, or, where it holds none of
    a partition, ``applied``: the furthest any task's cursor reached on it. A partition
    neither names is left out. Register the stage's writer first (``PartWriter.start``):
    a transaction a killed stage left open holds back every committed read until it ends."""
    out = dict(applied)
    for task in read_partitions(conn, topic):
        for p in parts_of(task)[0]:
            out[p.partition] = max(out.get(p.partition, 0), p.end)
    return out


def read_partitions(conn: KafkaConnection, topic: str) -> Iterator[list[tuple[int, bytes | None]]]:
    """Each partition's committed records, as (offset, value), one partition at a time."""
    records: list[tuple[int, bytes | None]] = []
    at: int | None = None
    for m in read_from(conn, topic):
        if m.partition() != at and records:
            yield records
            records = []
        at = m.partition()
        records.append((m.offset() or 0, m.value()))
    if records:
        yield records


@dataclass(frozen=True)
class Stray:
    """A record of a task's partition that is no part: nothing the input stage wrote."""

    offset: int
    why: str


def parts_of(records: Iterable[tuple[int, bytes | None]]) -> tuple[list[Part], list[Stray]]:
    """The parts a task read, in its partition's order, from (offset, value) pairs, and the
    records that are none. Only ``PartWriter`` writes parts, in transactions; anything else
    found there (another producer's record) holds no share of the input, so passing it by
    loses nothing: a part that is really missing is still caught by the task's cursors
    (``shuffle.ShuffleBroken``)."""
    parts: list[Part] = []
    strays: list[Stray] = []
    for offset, value in records:
        try:
            parts.append(decode_part(value or b""))
        except ValueError as exc:
            strays.append(Stray(offset, str(exc)))
    return parts, strays


def cursors_apart(store: Store, source_topic: str, tasks: int) -> str | None:
    """Why the parts a repartition topic held cannot all be derived again from the source,
    or None when they can: on each input partition every task's cursor stands at one
    offset, at a share's end. A stage whose topic holds no part resumes there
    (``resume_offsets``) and hands each task its shares from there on, which its cursor
    takes (``shuffle.Cursor.admit``): a repartition topic re-created then loses nothing.
    Cursors apart, the tasks behind would never get the shares between."""
    state = decode_entries(store.scan(task_offset_prefix(source_topic)) + store.scan(task_part_prefix()))
    offsets = [state.task_offsets.get(t, {}).get(source_topic, {}) for t in range(tasks)]
    parts = [state.task_parts.get(t, {}).get(source_topic, {}) for t in range(tasks)]
    for p in sorted({p for per in offsets for p in per}):
        at = [per.get(p) for per in offsets]
        if len(set(at)) > 1:
            return (f"the tasks stand at different offsets of {source_topic}[{p}]: "
                    + ", ".join(f"task {t} at {'none' if o is None else o}" for t, o in enumerate(at)))
        midway = [t for t in range(tasks) if parts[t].get(p, 0)]
        if midway:
            return f"task {midway[0]} has applied a share of {source_topic}[{p}] in part"
    return None


def purge(conn: KafkaConnection, topic: str, below: Mapping[int, int]) -> dict[int, int]:
    """Delete each task partition's parts below the given offset: those its task has applied
    and committed (never more, or the task would meet a lost part). Returns each partition's
    first offset after the purge."""
    if not below:
        return {}
    admin = conn.admin()
    futures = admin.delete_records([TopicPartition(topic, t, o) for t, o in sorted(below.items())],
                                   request_timeout=PURGE_TIMEOUT_S, operation_timeout=PURGE_TIMEOUT_S)
    out: dict[int, int] = {}
    for tp, future in futures.items():
        try:
            result = future.result()
        except KafkaException as exc:
            raise failed(conn, f"cannot purge {topic}[{tp.partition}] below offset {tp.offset}", exc) from None
        low = getattr(result, "low_watermark", None)
        if not isinstance(low, int):
            raise BrewError(f"purging {topic}[{tp.partition}] gave no first offset ({result!r})")
        out[tp.partition] = low
    return out
