"""Reading the menu topic on the driver: every record past what the store has applied, up
to where the topic ends now (committed records only), parsed.

The menu is small and every task of the join needs all of it (a global table), so it is
read here rather than through Spark; the offsets it reaches travel in the batch's own
transaction with the versions it adds, so a version is applied exactly once, like an order.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from confluent_kafka import Consumer, IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from service.records.badrecords import BadRecord, carry, internal_reason
from service.revenue.menu import BadMenu, MenuUpdate, parse_menu
from topics.errors import BrewError
from topics.event_time import EVENT_TIME
from topics.kafka import METADATA_TIMEOUT_S, KafkaConnection, describe_topic, failed

log = logging.getLogger("brewstream")

POLL_S = 0.05
READ_LIMIT_S = 5.0  # one read at most, so a huge menu backlog does not hold a batch for long


@dataclass
class MenuRead:
    updates: list[MenuUpdate] = field(default_factory=list)
    bad: list[BadRecord] = field(default_factory=list)
    next_offsets: dict[int, int] = field(default_factory=dict)  # the partitions that moved
    topic_id: int | None = None  # the topic's id (hashed) when it is not the one the store read

    @property
    def is_empty(self) -> bool:
        return not self.next_offsets and self.topic_id is None


class MenuUnavailable(Exception):
    """The menu cannot be read now (deleted, the cluster healing); the message says why."""


def topic_id_hash(topic_id: str) -> int:
    """A topic's id as the store keeps it: 8 bytes under the meta prefix, published with it."""
    return int.from_bytes(hashlib.blake2b(topic_id.encode(), digest_size=8).digest(), "big")


class MenuReader:
    def __init__(self, conn: KafkaConnection, topic: str, currency: str, max_ahead_ns: int, max_name_bytes: int,
                 record_bytes: int) -> None:
        self.conn, self.topic, self.currency = conn, topic, currency
        self.max_ahead_ns, self.max_name_bytes, self.record_bytes = max_ahead_ns, max_name_bytes, record_bytes
        self._consumer: Consumer | None = None
        self._admin: AdminClient | None = None
        self._partitions: list[int] = []
        self._said: set[tuple[int, str]] = set()

    def read(self, applied: Mapping[int, int], read_id: int | None) -> MenuRead:
        """The records past ``applied`` (the store's next offset per partition) of the topic
        whose id the store read (``read_id``; None: none yet). ``MenuUnavailable`` when the
        topic cannot be read now."""
        try:
            return self._read(applied, read_id)
        except KafkaException as exc:
            raise MenuUnavailable(str(failed(self.conn, f"reading the menu topic {self.topic}", exc))) from exc
        except BrewError as exc:
            raise MenuUnavailable(str(exc)) from exc

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _read(self, applied: Mapping[int, int], read_id: int | None) -> MenuRead:
        shape = describe_topic(self.conn, self.topic, retry_s=0)
        self._partitions = list(range(shape.partitions))
        out = MenuRead()
        now_id = topic_id_hash(shape.topic_id)
        if now_id != read_id:
            if read_id is not None:
                self._say(-1, f"id {shape.topic_id}", f"the menu topic {self.topic} was deleted and created again "
                          f"(topic id {shape.topic_id}): reading it from its start; the versions already read are "
                          "kept, and read again they change nothing")
                applied = {}
            out.topic_id = now_id
        if self._consumer is None:
            self._consumer = self.conn.consumer({"enable.auto.commit": False, "isolation.level": "read_committed",
                                                 "enable.partition.eof": False})
        consumer = self._consumer
        starts: dict[int, int] = {}
        ends: dict[int, int] = {}
        for p, (low, high) in self._bounds().items():
            start = applied.get(p, 0)
            if start > high:
                self._say(p, "below", f"the menu topic {self.topic} partition {p} ends at offset {high}, before "
                          f"offset {start} the store has read to: records were deleted under it; reading it "
                          "again from its start (versions already read are kept, and read again they change nothing)")
                start = low
            elif start < low:
                self._say(p, "gap", f"menu records of {self.topic} partition {p} at offsets {start}..{low - 1} were "
                          "deleted before they were read; their prices are missing (orders of those drinks at "
                          "those times go to the DLQ as unpriced, or take an older price if one held)")
                start = low
            if start < high:
                starts[p], ends[p] = start, high
            elif start != applied.get(p, 0):
                out.next_offsets[p] = start
        if not starts:
            return out
        consumer.assign([TopicPartition(self.topic, p, o) for p, o in starts.items()])
        reached = dict(starts)
        deadline = time.monotonic() + READ_LIMIT_S
        while time.monotonic() < deadline:
            # Done once each partition's position passed the last stable offset: past its
            # last record there may be only transaction markers, which move the position.
            left = [p for p in starts if reached[p] < ends[p]]
            if left and all(tp.offset >= ends[tp.partition] for tp in consumer.position(
                    [TopicPartition(self.topic, p) for p in left])):
                reached.update({p: ends[p] for p in left})
                left = []
            if not left:
                break
            for msg in consumer.consume(10_000, POLL_S):
                err = msg.error()
                if err is not None:
                    raise KafkaException(err)
                part, off = msg.partition(), msg.offset()
                if part is None or off is None or part not in starts or off < reached[part]:
                    continue
                reached[part] = off + 1
                self._parse(msg, out)
        for p in starts:
            if reached[p] != applied.get(p, 0):
                out.next_offsets[p] = reached[p]
        return out

    def _bounds(self) -> dict[int, tuple[int, int]]:
        """Each partition's first offset and last stable offset (committed records end there)."""
        if self._admin is None:
            self._admin = self.conn.admin()
        admin = self._admin

        def ask(spec: OffsetSpec, isolation: IsolationLevel) -> dict[int, int]:
            futures = admin.list_offsets({TopicPartition(self.topic, p): spec for p in self._partitions},
                                         isolation_level=isolation, request_timeout=METADATA_TIMEOUT_S)
            return {tp.partition: int(f.result().offset) for tp, f in futures.items()}

        low = ask(OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED)
        stable = ask(OffsetSpec.latest(), IsolationLevel.READ_COMMITTED)
        return {p: (low[p], stable[p]) for p in self._partitions}

    def _parse(self, msg: object, out: MenuRead) -> None:
        key, value = msg.key(), msg.value()  # type: ignore[attr-defined]
        headers = msg.headers() or []  # type: ignore[attr-defined]
        p, o = msg.partition(), msg.offset()  # type: ignore[attr-defined]
        try:
            stamps = [v for k, v in headers if k == EVENT_TIME]
            if stamps and stamps[0] is None:
                raise BadMenu("event-time header is null")
            ts_type, ts_ms = msg.timestamp()  # type: ignore[attr-defined]
            out.updates.append(parse_menu(key, value, stamps[0] if stamps else None,
                                          ts_ms * 10**6 if ts_type and ts_ms >= 0 else None,
                                          currency=self.currency, max_ahead_ns=self.max_ahead_ns,
                                          max_name_bytes=self.max_name_bytes))
        except Exception as exc:  # total per record, like the orders' path
            reason = f"bad menu record: {exc}" if isinstance(exc, BadMenu) else internal_reason(exc)
            k, v = carry(key, value, self.record_bytes)
            out.bad.append(BadRecord(p, o, k, v, reason, len(key or b""), len(value or b"")))

    def _say(self, partition: int, what: str, line: str) -> None:
        if (partition, what) not in self._said:
            self._said.add((partition, what))
            log.warning(line)

