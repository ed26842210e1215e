"""The repartition topic between the input stage and the tasks (``shuffle``): the input
stage's transaction, a task's parts read back, and the purge of what every task applied.

- **The topic.** R partitions, one per task as in the changelog, written to by partition
  number (a task's parts in its own partition, whatever their keys). No time or size
  retention (``topics.catalog.REPARTITION``): a part leaves only by ``purge``, since one
  removed before its task applied it is a lost part (``shuffle.ShuffleBroken``).
- **The input stage's transaction** (``PartWriter.publish``), one per batch: every task's
  parts (``shuffle.split_batch``), the batch's output records (its DLQ records), and the
  input offsets it reached as its consumer group's (``send_offsets_to_transaction``). Its
  progress thus commits with its parts, all or nothing, and a stage whose Spark checkpoint
  was lost resumes exactly after its last committed batch (``resume_offsets``).
- **One input-stage writer at a time.** The transactional id belongs to the repartition
  topic (``input_stage_id``): a second writer fences the first, whose transaction in flight
  is aborted, so each input partition's shares follow each other as ``shuffle``'s rule
  needs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from confluent_kafka import KafkaException, Producer, TopicPartition

from restorer.changelog import Delivered, OutputRecord, TransactionalWriter
from restorer.shuffle import Part, ShuffleBroken, decode_part, encode_part
from topics.errors import BrewError
from topics.kafka import METADATA_TIMEOUT_S, KafkaConnection, failed
from topics.records import produce_waiting

PURGE_TIMEOUT_S = 30.0


def input_stage_id(topic: str) -> str:
    """The input stage's fencing identity: one per repartition topic."""
    return f"brewstream:{topic}"


def input_group(topic: str) -> str:
    """The consumer group whose committed offsets are the input stage's progress."""
    return f"brewstream.{topic}"


class PartWriter:
    """The input stage's writer of one repartition topic of ``tasks`` partitions."""

    def __init__(self, conn: KafkaConnection, topic: str, tasks: int, input_topic: str,
                 max_record_bytes: int = 1_000_000) -> None:
        self.topic = topic
        self.tasks = tasks
        self.input_topic = input_topic
        self._conn = conn
        self._txn = TransactionalWriter(conn, input_stage_id(topic), f"repartition topic {topic}", max_record_bytes)
        # Never subscribes: it only names the group its offsets commit to, which no member joins.
        self._group = conn.consumer({"group.id": input_group(topic)})

    def start(self) -> None:
        """Register the transactional id: fences an older input stage, aborts its open txn."""
        self._txn.start()

    def publish(self, parts: Mapping[int, Sequence[Part]], next_offsets: Mapping[int, int],
                outputs: Iterable[OutputRecord] = (),
                before_commit: Callable[[], None] | None = None) -> dict[int, int]:
        """One batch of the input stage in one transaction: each task's ``parts`` in its
        partition, ``outputs``, and ``next_offsets`` (input partition -> the offset the
        next batch starts at) as the stage's progress. Returns, per task partition written,
        the offset just past the batch's parts."""
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

        def offsets(producer: Producer) -> None:
            if next_offsets:
                positions = [TopicPartition(self.input_topic, p, o) for p, o in sorted(next_offsets.items())]
                producer.send_offsets_to_transaction(positions, self._group.consumer_group_metadata(),
                                                     METADATA_TIMEOUT_S)

        return self._txn.transact(write, before_commit, offsets).positions

    def close(self) -> None:
        self._txn.close()
        self._group.close()


def resume_offsets(conn: KafkaConnection, topic: str, input_topic: str, partitions: Sequence[int]) -> dict[int, int]:
    """Where the input stage of ``topic`` resumes on each input partition: the offset its
    last committed batch reached; a partition it never read is left out. A transaction
    still open is waited for (the broker answers only once it has ended)."""
    consumer = conn.consumer({"group.id": input_group(topic), "isolation.level": "read_committed"})
    try:
        found = consumer.committed([TopicPartition(input_topic, p) for p in partitions], timeout=METADATA_TIMEOUT_S)
    except KafkaException as exc:
        raise failed(conn, f"cannot read the input stage's progress on {input_topic}", exc) from None
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found if tp.offset >= 0}


def parts_of(records: Iterable[tuple[int, bytes | None]]) -> list[Part]:
    """The parts a task read, in its partition's order, from (offset, value) pairs. Only
    ``PartWriter`` writes there: bytes that are no part are a defect of the topic (another
    writer, a lost segment), never input to skip, so the task stops (``ShuffleBroken``)."""
    out = []
    for offset, value in records:
        try:
            out.append(decode_part(value or b""))
        except ValueError as exc:
            raise ShuffleBroken(f"the repartition record at offset {offset} is no part ({exc}); "
                                "something other than brewstream's input stage wrote there") from None
    return out


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
