"""``brewstream status``: how far a store is behind its input, and what the instances of
its pipeline are doing (from their announcements), for people and health checks."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, TopicPartition

from restorer.reader import retention_risk
from restorer.store import StateDir, Store
from service.instance.health import FENCED, RESTORING
from service.instance.lease import LEASE_PARTITION, Announcement
from service.records.limits import printable
from topics.clock import format_duration, utc_iso, wait_until
from topics.errors import BrewError
from topics.kafka import KafkaConnection, end_offsets, partitions_of, watermarks


@dataclass(frozen=True)
class PartitionLag:
    partition: int
    stored: int | None  # next offset the store will apply; None: nothing applied yet
    end: int  # as a read_committed reader sees it: the last stable offset
    lag: int
    held_back: int = 0  # records past ``end`` an open upstream transaction holds back (``held_back``)
    held_since_ms: int | None = None  # the timestamp of the first of them: the transaction's first record


@dataclass(frozen=True)
class InstanceView:
    """An instance's last announcement and how old it is."""

    what: Announcement
    age_s: float

    def as_json(self) -> dict[str, object]:
        a = self.what
        return {"instance": a.instance, "host": a.host, "pid": a.pid, "state_dir": a.state_dir, "role": a.role,
                "holds_lease": a.holds_lease, "seq": a.seq, "generation": a.generation, "tasks": list(a.tasks),
                "age_s": round(self.age_s, 3)}


@dataclass(frozen=True)
class TaskView:
    """A task (``restorer.tasks``): how far this store has applied its changelog partition,
    the instance that commits it (``task_owner``), and its role on this state dir's instance."""

    task: int
    seq: int  # the last batch committed to it that this store holds
    position: int | None  # the next changelog offset this store will apply; None: none yet
    end: int  # the changelog partition's end, as read_committed readers see it
    owner: str | None = None
    generation: int | None = None
    role: str | None = None  # as the instance on this state dir last announced it

    @property
    def lag(self) -> int:
        """Changelog offsets of the task this store has not applied: 0 exactly when it is
        whole. Every batch's transaction writes to every changelog partition (its markers,
        ``restorer.codec``), so a partition always ends with the commit marker of the last
        batch, one offset past what a store that applied that batch records."""
        return self.end if self.position is None else max(0, self.end - self.position - 1)

    def as_json(self) -> dict[str, object]:
        return {"task": self.task, "seq": self.seq, "changelog_position": self.position, "changelog_end": self.end,
                "lag": self.lag, "owner": self.owner, "generation": self.generation, "role": self.role}


@dataclass(frozen=True)
class Status:
    store: Path
    topic: str
    partitions: list[PartitionLag]
    last_batch_ms: int | None
    batches: int
    instances: list[InstanceView] = field(default_factory=list)
    role: str | None = None  # what the instance on this state dir last announced
    changelog_risk: str | None = None  # how the changelog deletes records by itself (``retention_risk``)
    tasks: list[TaskView] = field(default_factory=list)
    # The pipeline's other inputs (revenue's menu), by topic: how far the store has read each.
    side: dict[str, list[PartitionLag]] = field(default_factory=dict)

    @property
    def lag(self) -> int:
        """Records of every input the store has not applied: a side input stuck counts too."""
        return sum(p.lag for p in self.partitions) + sum(p.lag for lags in self.side.values() for p in lags)

    def batch_age_s(self, now: float) -> float | None:
        return None if self.last_batch_ms is None else now - self.last_batch_ms / 1000

    def as_json(self, now: float) -> dict[str, object]:
        return {"store": str(self.store), "topic": self.topic, "lag": self.lag, "batches": self.batches,
                "last_batch_age_s": self.batch_age_s(now), "role": self.role,
                "changelog_risk": self.changelog_risk,
                "instances": [i.as_json() for i in self.instances],
                "tasks": [t.as_json() for t in self.tasks],
                "partitions": [{"partition": p.partition, "stored": p.stored, "end": p.end, "lag": p.lag,
                                "held_back": p.held_back,
                                "held_since": None if p.held_since_ms is None else utc_iso(p.held_since_ms / 1000)}
                               for p in self.partitions],
                "side_inputs": {topic: [{"partition": p.partition, "stored": p.stored, "end": p.end, "lag": p.lag}
                                        for p in lags] for topic, lags in self.side.items()}}


def input_lag(stored: Mapping[int, int], ends: Mapping[int, tuple[int, int]]) -> dict[int, int]:
    """Records per partition beyond the store's next offset; all of them when it has none."""
    return {p: max(0, high - stored.get(p, low)) for p, (low, high) in ends.items()}


def side_lags(stored: Mapping[int, int], ends: Mapping[int, tuple[int, int]]) -> list[PartitionLag]:
    """A side input's lag per partition (``input_lag``)."""
    lag = input_lag(stored, ends)
    return [PartitionLag(p, stored.get(p), high, lag[p]) for p, (_low, high) in sorted(ends.items())]


# An open upstream transaction shorter than this is a producer at work, not a stall
# (``service.ops.stalls``).
HELD_BACK_AFTER_S = 5.0


def held_back(stored: Mapping[int, int], stable: Mapping[int, int],
              end: Mapping[int, int]) -> dict[int, tuple[int, int]]:
    """Pure: partition -> (its last stable offset, records past it) for each partition that
    an open upstream transaction holds back from the store: records lie past the LSO (the
    first offset of the oldest transaction still open there: a read_committed reader reads
    no further) and the store has applied everything up to it. Short of the LSO, the store
    is behind: that is lag, not a partition held back."""
    return {p: (lso, end[p] - lso) for p, lso in stable.items()
            if p in end and end[p] > lso and p in stored and stored[p] >= lso}


def read_status(conn: KafkaConnection, state_dir: Path, topic: str, instances_topic: str | None = None,
                changelog: str | None = None, side_topics: tuple[str, ...] = ()) -> Status:
    store_path = StateDir(state_dir).store_path
    with Store(store_path, read_only=True) as store:
        stored, last, batches = store.next_offsets(topic), store.last_batch_ms(), store.last_seq()
        positions, commits = store.positions(), store.commit_markers()
        side_stored = {t: store.next_offsets(t) for t in side_topics}
    partitions = partitions_of(conn, topic)
    try:
        changelog_parts = partitions_of(conn, changelog) if changelog else []
    except BrewError:  # a changelog deleted: the input's lag still says something; a start says the rest
        changelog_parts = []
    consumer, everything = conn.consumer(), conn.consumer({"isolation.level": "read_uncommitted"})
    try:
        ends = end_offsets(consumer, topic, partitions)
        uncommitted = end_offsets(everything, topic, partitions)
        held = held_back({p: stored.get(p, low) for p, (low, _high) in ends.items()},
                         {p: high for p, (_low, high) in ends.items()},
                         {p: high for p, (_low, high) in uncommitted.items()})
        since = {p: first_record_ms(everything, topic, p, lso) for p, (lso, _n) in held.items()}
        changelog_ends = end_offsets(consumer, changelog, changelog_parts) if changelog and changelog_parts else {}
        side_ends = {t: end_offsets(consumer, t, partitions_of(conn, t)) for t in side_topics}
    finally:
        consumer.close()
        everything.close()
    now_ms = time.time() * 1000
    # A transaction younger than HELD_BACK_AFTER_S is a producer at work (its record's time
    # unknown: said all the same).
    held = {p: h for p, h in held.items() if (ms := since[p]) is None or now_ms - ms >= HELD_BACK_AFTER_S * 1000}
    lag = input_lag(stored, ends)
    lags = [PartitionLag(p, stored.get(p), high, lag[p], held.get(p, (0, 0))[1], since.get(p) if p in held else None)
            for p, (_low, high) in sorted(ends.items())]
    views = read_instances(conn, instances_topic, changelog) if instances_topic and changelog else []
    home = str(Path(state_dir).resolve())
    here = next((v.what for v in views if v.what.state_dir == home and v.what.host == socket.gethostname()), None)
    risk = retention_risk(conn, changelog) if changelog else None
    tasks = [task_view(t, commits.get(t, 0), positions.get(t), high, [v.what for v in views], here)
             for t, (_low, high) in sorted(changelog_ends.items())]
    side = {t: side_lags(side_stored[t], ends_t) for t, ends_t in side_ends.items()}
    return Status(store_path, topic, lags, last, batches, views, None if here is None else here.role, risk, tasks,
                  side)


def task_owner(task: int, announced: Iterable[Announcement]) -> Announcement | None:
    """Pure: the instance that commits ``task``, by the last announcement of each: of those
    that say they run it (not stopped, not fenced since: ``Announcement.runs``), the one of
    the latest generation; a woken older holder still announcing does not displace it. None
    while nobody runs it (a stopped instance owns nothing)."""
    return max((a for a in announced if a.runs(task)), key=lambda a: a.generation, default=None)


def task_view(task: int, seq: int, position: int | None, end: int, announced: list[Announcement],
              here: Announcement | None) -> TaskView:
    owner = task_owner(task, announced)
    role = here.tasks[task] if here is not None and task < len(here.tasks) else None
    return TaskView(task, seq, position, end, None if owner is None else owner.instance,
                    None if owner is None else owner.generation, role)


# How long ``status`` waits for the first record an open transaction holds back.
_FIRST_RECORD_WAIT_S = 2.0


def first_record_ms(consumer: Consumer, topic: str, partition: int, offset: int) -> int | None:
    """The timestamp of the record at ``offset`` (read by a read_uncommitted ``consumer``),
    or None when it does not come within a moment."""
    consumer.assign([TopicPartition(topic, partition, offset)])
    deadline = time.monotonic() + _FIRST_RECORD_WAIT_S
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None and msg.partition() == partition:
                kind, ms = msg.timestamp()
                return int(ms) if kind != TIMESTAMP_NOT_AVAILABLE else None
        return None
    finally:
        consumer.unassign()


def read_instances(conn: KafkaConnection, topic: str, changelog: str) -> list[InstanceView]:
    """The last announcement of every instance home of ``changelog``, newest first."""
    consumer = conn.consumer()
    latest: dict[bytes, tuple[Announcement, int]] = {}
    try:
        tp = TopicPartition(topic, LEASE_PARTITION)
        low, high = watermarks(consumer, topic, LEASE_PARTITION)
        if high > low:
            consumer.assign([TopicPartition(topic, LEASE_PARTITION, max(low, high - 2000))])

            def read() -> bool:
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    what = Announcement.decode(msg.value())
                    if what is not None and what.changelog == changelog:
                        latest[what.key] = (what, msg.timestamp()[1])
                    return (msg.offset() or 0) >= high - 1
                return consumer.position([tp])[0].offset >= high

            wait_until(read, 30, f"the announcements on {topic}", every=0)
    finally:
        consumer.close()
    now_ms = time.time() * 1000
    views = [InstanceView(what, max(0.0, (now_ms - at) / 1000)) for what, at in latest.values()]
    return sorted(views, key=lambda v: v.age_s)


def health_problems(status: Status, now: float, max_lag: int | None, max_batch_age_s: float | None) -> list[str]:
    """What makes the pipeline unhealthy for ``status``'s exit code, one phrase each."""
    problems = []
    if max_lag is not None and status.lag > max_lag:
        problems.append(f"lag {status.lag} is above --max-lag {max_lag}")
    age = status.batch_age_s(now)
    if max_batch_age_s is not None and (age is None or age > max_batch_age_s):
        problems.append("no batch committed yet" if age is None else
                        f"last batch {age:.0f}s ago is older than --max-batch-age {format_duration(max_batch_age_s)}")
    if status.role in (RESTORING, FENCED):
        problems.append(f"the instance on this state dir is {status.role}")
    return problems


def status_text(s: Status, now: float | None = None) -> str:
    now = time.time() if now is None else now
    age = s.batch_age_s(now)
    when = ("never" if s.last_batch_ms is None else
            f"{utc_iso(s.last_batch_ms / 1000)} ({age:.1f}s ago)")
    lines = [f"store {s.store}: {s.batches} batches committed, last batch {when}",
             f"{'PARTITION':<10}{'STORED':>12}{'END':>12}{'LAG':>10}"]
    lines += [f"{p.partition:<10}{'-' if p.stored is None else p.stored:>12}{p.end:>12}{p.lag:>10}"
              for p in s.partitions]
    lines.append(f"total lag on {s.topic}: {sum(p.lag for p in s.partitions)}")
    for topic, lags in s.side.items():
        lines.append(f"{'PARTITION':<10}{'STORED':>12}{'END':>12}{'LAG':>10}  of {topic}")
        lines += [f"{p.partition:<10}{'-' if p.stored is None else p.stored:>12}{p.end:>12}{p.lag:>10}" for p in lags]
        lines.append(f"total lag on {topic}: {sum(p.lag for p in lags)}")
    for p in s.partitions:
        if p.held_back:
            since = "" if p.held_since_ms is None else (f" since {utc_iso(p.held_since_ms / 1000)} "
                                                       f"({(now * 1000 - p.held_since_ms) / 1000:.0f}s)")
            lines.append(f"partition {p.partition} held back by an open upstream transaction{since}: {p.held_back} "
                         f"records past its last stable offset {p.end}; read_committed readers see them once the "
                         "producer commits or aborts it")
    if s.tasks:
        lines.append(f"{'TASK':<10}{'SEQ':>8}{'POSITION':>12}{'END':>12}{'LAG':>10}  {'HERE':<11}OWNER")
        # Owners and roles are read from a topic anyone with access may write to.
        lines += [f"{t.task:<10}{t.seq:>8}{'-' if t.position is None else t.position:>12}{t.end:>12}{t.lag:>10}  "
                  f"{printable(t.role or '-')[:10]:<11}"
                  f"{'-' if t.owner is None else f'{printable(t.owner)} (generation {t.generation})'}"
                  for t in s.tasks]
    if s.changelog_risk is not None:
        lines.append(s.changelog_risk)
    for v in s.instances:
        a = v.what
        # Announcements are read from a topic anyone with access may write to.
        lines.append(f"instance {printable(a.instance)}: {printable(a.role)}"
                     f"{' (holds the lease)' if a.holds_lease else ''}, batch {a.seq}, pid {a.pid} on "
                     f"{printable(a.host)}, state dir {printable(a.state_dir)}, announced {v.age_s:.1f}s ago")
    return "\n".join(lines)
