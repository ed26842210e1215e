"""Who writes a changelog: announcements on Kafka, a lease, and the takeover by a standby.

Every instance announces itself every ``interval`` on the instances topic (compacted,
one partition, broker time stamps): instance name, host, pid, state dir, role, the last
batch it committed, and whether it holds the lease (it is the active writer, or on its
way to be). A watcher thread in every instance tails that partition.

- A second instance about to start as active looks for a live lease holder of another
  home (host and state dir). If one announces within the takeover timeout, it refuses to
  start, naming it; otherwise the holder is gone and it goes ahead.
- A standby takes over once the holder has been silent for the takeover timeout. Silence
  is the broker's time from the standby's first own announcement after the holder's last
  one to its latest one (a standby watching a holder announces more often), through the
  same partition: one clock, whatever the hosts' clocks say, and a standby cut off from
  Kafka, stalled itself, or kept out by a partition nobody could write to (its leader
  lost), never mistakes that for the holder's death.
- Taking the lease raises its generation: one more than any this instance has seen, and
  announced (and read back) before the new holder fences the changelog's writer. A holder
  that sees a later generation announced has been taken over: it stops writing. A holder
  of an older generation announcing again (a process paused past the takeover, then woken)
  takes nothing from anyone: only a real takeover raises the generation, whatever the
  order the announcements arrive in.
- Two claims of one generation (two instances found the lease free at once): the earlier
  in the partition stands. The later claimer has read the earlier claim by the time its own
  comes back, so it yields before it fences anyone: the holder is never fenced by a claim
  that lost, and never starts a query it must give up.
- Only the proven holder publishes: one that holds the lease, has seen no later
  generation, and read its own announcement back within the takeover timeout (so it has
  read everything announced before it, a paused process included). A proof *since* a
  moment also needs that announcement to have been sent after it: every claim made before
  that moment lies before it in the partition, so one taken over by then knows it.

Only Kafka is shared, so all of this works across machines. The lease is advisory:
correctness rests on fencing (invariant 6 in ``restorer``). Two instances that race past
each other's leases still leave exactly one writer: the later one fences the earlier.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Protocol

import msgspec
import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from service.instance.health import ACTIVE
from service.instance.periodic import call_logged
from service.instance.task_roles import RUNNING
from topics.errors import BrewError, KafkaUnavailable
from topics.kafka import KafkaConnection, unavailable, watermarks

log = logging.getLogger("brewstream")

LEASE_INTERVAL_S = 0.25
# One second of the standby's own announcements with none from the holder: four missed
# announcements. A holder's announcements stall with its process, or with its own clients'
# way to the cluster (a broker's stall stalls the standby's too, and silence is counted in
# them); a takeover a stall caused costs a role change, never a count (fencing, invariant
# 6 in ``restorer``).
TAKEOVER_TIMEOUT_S = 1.0
# How often a standby announces while another instance holds the lease: its own
# announcements are the clock the holder's silence is read on, so their spacing is the
# takeover's slack (at LEASE_INTERVAL_S, up to two intervals past the timeout).
WATCHING_INTERVAL_S = 0.05
LEASE_PARTITION = 0
_TAIL = 2000  # announcements read back at start: far more than any timeout's worth
# Our own announcements kept for ``lease_state``: twice a takeover timeout's worth at the
# fastest announcing, and at least 256 (older ones span the timeout by themselves).
_OWN_KEPT = 256
# Our delivered announcements kept for a proof since a moment: the newest few suffice.
_SENT_KEPT = 64


@dataclass(frozen=True)
class Announcement:
    """One instance, as it announces itself."""

    instance: str
    host: str
    pid: int
    state_dir: str
    changelog: str
    role: str = "starting"
    holds_lease: bool = False  # the active writer, or on its way to be
    seq: int = 0  # the last batch it committed
    interval_ms: int = int(LEASE_INTERVAL_S * 1000)
    token: str = ""  # new at every process start
    generation: int = 0  # of the lease it holds or last held; raised by every takeover
    # Each task's role here, by task number (``service.instance.task_roles``); empty from an
    # instance that does not say (an earlier version's).
    tasks: tuple[str, ...] = ()
    api: str = ""  # HOST:PORT where its HTTP API answers (``ops.forward``); empty: none

    @classmethod
    def here(cls, state_dir: Path, changelog: str, instance: str | None, interval_s: float) -> Announcement:
        host = socket.gethostname()
        return cls(instance or f"{host}:{Path(state_dir).name}", host, os.getpid(), str(Path(state_dir).resolve()),
                   changelog, "starting", False, 0, int(interval_s * 1000), secrets.token_hex(8))

    @property
    def key(self) -> bytes:
        """One compacted key per instance home, so the topic keeps each home's last word."""
        return f"{self.changelog}|{self.host}|{self.state_dir}".encode()

    def runs(self, task: int) -> bool:
        """Whether this instance says it commits ``task``: it runs it, and has not stopped or
        been fenced since. One that does not name its tasks runs every task while it holds
        the lease and is active."""
        if self.role in _GONE:
            return False
        if self.tasks:
            return task < len(self.tasks) and self.tasks[task] == RUNNING
        return self.holds_lease and self.role == ACTIVE

    def same_home(self, other: Announcement) -> bool:
        """Same host and state dir: the same instance, restarted."""
        return (self.host, self.state_dir) == (other.host, other.state_dir)

    def describe(self) -> str:
        return f"{self.instance} (host {self.host}, pid {self.pid}, state dir {self.state_dir})"

    def encode(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def decode(cls, raw: bytes | None) -> Announcement | None:
        """None for anything but an announcement whose every field has its type: the topic
        is anyone's to write, and a generation of another type would stop the comparisons
        every decision makes."""
        try:
            return msgspec.json.decode(raw or b"", type=cls)
        except (msgspec.DecodeError, RecursionError):  # a field nested past the decoder's depth
            return None


@dataclass(frozen=True)
class Seen:
    """An announcement as a watcher received it."""

    what: Announcement
    offset: int
    broker_ms: int  # the broker's time stamp (the instances topic uses LogAppendTime)
    # Of a lease holder: the offset of its first announcement of this generation held (its
    # claim), which decides between two claims of one generation; None: this one.
    claimed_at: int | None = None

    @property
    def claim(self) -> int:
        return self.offset if self.claimed_at is None else self.claimed_at


FREE, RELEASED, LAPSED, HELD = "free", "released", "lapsed", "held"
_GONE = ("stopped", "fenced")


def lease_state(holder: Seen | None, own: Sequence[Seen], timeout_s: float) -> str:
    """Pure: whether another process's lease stands, seen from an instance whose own
    announcements, read back, are ``own`` (in offset order). FREE: nobody held it; RELEASED:
    its holder said it stopped or was fenced; LAPSED: this instance's own announcements
    went through for ``timeout_s`` of broker time after the holder's last one, and none of
    the holder's did; HELD otherwise.

    The silence counts from this instance's first announcement after the holder's last,
    not from the holder's last itself: while the instances partition cannot be written (its
    leader died, the cluster lost its quorum), nobody's announcements go through, and the
    first one through afterwards is no sign that anyone else went silent meanwhile. Counted
    from the holder's last announcement, a standby whose producer found the new leader a
    moment before the active's took over from an active that was alive."""
    if holder is None:
        return FREE
    if holder.what.role in _GONE:
        return RELEASED
    after = [o for o in own if o.offset > holder.offset]
    if after and after[-1].broker_ms - after[0].broker_ms >= timeout_s * 1000:
        return LAPSED
    return HELD


def overtaken(holding: bool, generation: int, claim: int | None, holder: Seen | None) -> bool:
    """Pure: while this instance holds the lease at ``generation``, claimed at offset
    ``claim`` (None: its claim not read back yet), another live holder announced a later
    generation (a real takeover), or claimed the same one earlier in the partition. A holder
    of an older generation (a paused process woken up) overtakes nobody, whenever it
    announces."""
    if not holding or holder is None or holder.what.role in _GONE:
        return False
    theirs = holder.what.generation
    return theirs > generation or (theirs == generation and (claim is None or holder.claim < claim))


def announcement_interval(interval_s: float, holding: bool, holder: Seen | None) -> float:
    """Pure: how long until the next announcement. A standby watching a live holder
    announces every WATCHING_INTERVAL_S (or its interval, if shorter); everyone else every
    interval."""
    watching = not holding and holder is not None and holder.what.role not in _GONE
    return min(interval_s, WATCHING_INTERVAL_S) if watching else interval_s


def next_generation(seen: Iterable[Seen]) -> int:
    """Pure: the generation a takeover announces: one more than any seen."""
    return 1 + max((s.what.generation for s in seen), default=0)


def current_holder(seen: Iterable[Seen]) -> Seen | None:
    """Pure: of the latest announcements of lease holders (one per process), the one of the
    latest generation, of its claims the earliest: a woken older holder's later announcement
    does not displace it, nor does a claim that lost the race to it."""
    return max(seen, key=lambda s: (s.what.generation, -s.claim, s.offset), default=None)


def proven_since(sent: Iterable[tuple[int, float]], read_through: int | None, since: float) -> bool:
    """Pure: whether one of our announcements, delivered at an offset of the partition and
    sent at a monotonic time (``sent``), was sent after ``since`` and has been read back: our
    watcher has read the partition through ``read_through`` (None: nothing of ours yet)."""
    return read_through is not None and any(t > since and offset <= read_through for offset, t in sent)


class ActiveProof(Protocol):
    """``Lease.proven_active``, as the pipelines' reporters are given it."""

    def __call__(self, since: float | None = None) -> bool: ...


def always_proven(since: float | None = None) -> bool:
    """An ``ActiveProof`` for a process without a lease (tests, tools)."""
    return True


class LeaseRefused(BrewError):
    """Another live instance is the active writer of this changelog."""


class LeaseLost(BrewError):
    """Another instance claimed the lease first, when both found it free."""


class Lease:
    """This instance's announcements and its view of everyone else's, for one changelog."""

    def __init__(self, conn: KafkaConnection, topic: str, me: Announcement, interval_s: float = LEASE_INTERVAL_S,
                 timeout_s: float = TAKEOVER_TIMEOUT_S) -> None:
        self.conn, self.topic, self.me = conn, topic, me
        self.interval_s, self.timeout_s = interval_s, timeout_s
        # Our announcements land in the order we say them (one announcing at a time, one
        # request in flight however the sends are retried): a claim is our first holding
        # announcement of its generation, and a word said before it must not land after it.
        self._producer = conn.producer({"linger.ms": 0, "acks": "all", "max.in.flight.requests.per.connection": 1})
        self._announcing = threading.Lock()
        self._lock = threading.Lock()
        self._latest: dict[str, Seen] = {}  # token -> latest announcement of that process
        self._own_latest: Seen | None = None
        kept = max(_OWN_KEPT, 2 * math.ceil(timeout_s / min(interval_s, WATCHING_INTERVAL_S)))
        self._own_seen: deque[Seen] = deque(maxlen=kept)  # our own announcements read back, in order
        self._changed = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._seq: Callable[[], int] = lambda: 0
        self._last_seq = 0  # the last value ``_seq`` gave (``_seq_now``)
        self._role = "starting"
        self._holds = False
        self._tasks: tuple[str, ...] = ()
        self._generation = 0
        self._claim: int | None = None  # offset of our claim of ``_generation``, once read back
        self._own_read_at: float | None = None  # monotonic: when our own announcement last came back
        # Our latest delivered announcements: (offset, monotonic time it was sent), for ``proven_active(since)``.
        self._sent: deque[tuple[int, float]] = deque(maxlen=_SENT_KEPT)
        self._threads: list[threading.Thread] = []

    # ---------------------------------------------------------------- lifecycle

    def start(self, seq: Callable[[], int]) -> None:
        """Read the recent past, then announce and watch on threads of their own."""
        self._seq = seq
        consumer = self.conn.consumer({"fetch.wait.max.ms": 50})
        try:
            low, high = watermarks(consumer, self.topic, LEASE_PARTITION)
        except KafkaException as exc:
            consumer.close()
            what = f"cannot read the instances topic {self.topic}"
            raise unavailable(what, exc) or BrewError(f"{what}: {exc.args[0].str()}") from None
        consumer.assign([TopicPartition(self.topic, LEASE_PARTITION, max(low, high - _TAIL))])
        self._catch_up(consumer, high)
        self.announce()
        for name, target in (("lease-announce", self._announce_loop), ("lease-watch", self._watch_loop)):
            thread = threading.Thread(target=target, args=(consumer,) if name == "lease-watch" else (),
                                      name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Stop announcing and watching; say the last word (this instance's role now)."""
        self._stop.set()
        for thread in self._threads:
            thread.join(5)
        self.announce()
        self._producer.flush(5)

    def set_role(self, role: str, holds_lease: bool | None = None, tasks: tuple[str, ...] | None = None) -> None:
        """What the next announcements say (the runner calls it on every phase change)."""
        with self._lock:
            self._role = role
            if holds_lease is not None:
                self._holds = holds_lease
            if tasks is not None:
                self._tasks = tasks
        self.announce()

    def claim(self, timeout_s: float = 30.0) -> int:
        """Take the lease: announce it held at a generation above any seen, and wait until
        that announcement is read back (so every later reader of the topic sees it before
        this instance fences the changelog's writer). ``KafkaUnavailable`` when it is not
        read back within ``timeout_s``. Returns the generation. ``LeaseLost`` when another
        instance claimed it first (the same generation, earlier in the partition: read by
        the time ours came back); this one then holds nothing and has fenced nobody."""
        with self._lock:
            self._generation = next_generation([*self._latest.values(), *filter(None, [self._own_latest])])
            self._holds = True
            self._claim = None
            generation = self._generation
        self.announce()
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._claim is None:
                if time.monotonic() > deadline:
                    raise KafkaUnavailable(f"announcing the lease on {self.topic} did not come back within "
                                           f"{timeout_s:g}s")
                self._changed.wait(0.05)
            first = self._overtaker()
            if first is not None:
                self._holds = False
        if first is not None:
            self.announce()
            raise LeaseLost(f"{first.describe()} claimed the lease of changelog {self.me.changelog} first")
        return generation

    @property
    def holds_lease(self) -> bool:
        with self._lock:
            return self._holds

    @property
    def generation(self) -> int:
        """The generation of the lease this instance holds or last held (0: never held one)."""
        with self._lock:
            return self._generation

    def proven_active(self, since: float | None = None) -> bool:
        """Whether this instance may publish: it holds the lease, no later generation has
        been seen, and its own announcement came back within the takeover timeout (after a
        pause, not before it has read whatever was announced meanwhile). With ``since`` (a
        monotonic time), an announcement sent after it must have come back too: so a claim
        made before ``since`` (the takeover behind a fencing seen then) has been read."""
        with self._lock:
            fresh = self._own_read_at is not None and time.monotonic() - self._own_read_at <= self.timeout_s
            read_through = None if self._own_latest is None else self._own_latest.offset
            after = since is None or proven_since(self._sent, read_through, since)
            return (self._holds and fresh and after
                    and not overtaken(True, self._generation, self._claim, self._holder()))

    def announce(self) -> None:
        with self._announcing:
            with self._lock:
                what = replace(self.me, role=self._role, holds_lease=self._holds, seq=self._seq_now(),
                               generation=self._generation, tasks=self._tasks)
            sent = time.monotonic()

            def delivered(err: KafkaError | None, msg: Message) -> None:
                offset = msg.offset()
                if err is None and offset is not None and offset >= 0:
                    with self._lock:
                        self._sent.append((offset, sent))

            try:
                self._producer.produce(self.topic, key=what.key, value=what.encode(), partition=LEASE_PARTITION,
                                       on_delivery=delivered)
                self._producer.poll(0)
            except (BufferError, KafkaException) as exc:
                log.warning("announcing this instance failed: %s", exc)

    def _seq_now(self) -> int:
        """The last batch the store committed, or the last one read when the store cannot be
        read now: the daemon closes its store and opens another when the folder was deleted
        under it, and an announcement made in that moment must still go out (it keeps the
        lease)."""
        try:
            self._last_seq = self._seq()
        except Exception as exc:
            log.debug("announcing the last batch read before (%s: %s)", type(exc).__name__, exc)
        return self._last_seq

    # ---------------------------------------------------------------- decisions

    def holder(self) -> Seen | None:
        """The last announcement of another process that holds (or last held) the lease."""
        with self._lock:
            return self._holder()

    def _holder(self) -> Seen | None:
        return current_holder(s for t, s in self._latest.items() if t != self.me.token and s.what.holds_lease)

    def superseded_by(self, wait_s: float = 0.0) -> Announcement | None:
        """Another live process that holds the lease at a later generation than this
        instance's last (it took this one over), or None when none is seen within ``wait_s``
        (the takeover is announced before its fencing, but our watcher may read it later)."""
        end = time.monotonic() + wait_s
        with self._lock:
            while (taker := self._overtaker()) is None and time.monotonic() < end:
                self._changed.wait(0.05)
            return taker

    def check_first_start(self) -> Announcement | None:
        """Before starting as active: refuse while another home holds a live lease.
        Returns the holder taken over from, if its lease lapsed (or it stopped uncleanly)."""
        seen = self.holder()
        if seen is None or seen.what.role in _GONE:
            return None
        holder = seen.what
        if holder.same_home(self.me):
            # We hold this state dir's lock, so the process that announced it is gone.
            log.info("the last run on this state dir (pid %d) did not stop cleanly; taking over", holder.pid)
            return holder
        self.wait_for_lapse(deadline_s=self.timeout_s * 2)
        latest = self.holder() or seen
        with self._lock:
            standing = lease_state(latest, self._own_seen, self.timeout_s) == HELD
        if standing:
            raise LeaseRefused(
                f"another instance is active on changelog {self.me.changelog}: {latest.what.describe()}; stop it "
                f"first (a dead instance's lease lapses after {self.timeout_s:g}s), run this one with --standby, "
                "or use another --topic-prefix")
        return latest.what

    def wait_for_lapse(self, deadline_s: float | None = None, stop: threading.Event | None = None,
                       on_tick: Callable[[], None] | None = None) -> Seen | None:
        """Wait until no other process holds a live lease; return the last holder's last
        announcement (None when there was none), or None when ``deadline_s`` passes or
        ``stop`` is set first."""
        end = None if deadline_s is None else time.monotonic() + deadline_s
        while True:
            with self._lock:
                seen = self._holder()
                if lease_state(seen, self._own_seen, self.timeout_s) != HELD:
                    return seen
                self._changed.wait(0.05)
            if on_tick is not None:
                on_tick()
            if stop is not None and stop.is_set():
                return None
            if end is not None and time.monotonic() > end:
                return None

    def silence(self, seen: Seen) -> float:
        with self._lock:
            return self._silence_locked(seen)

    def _silence_locked(self, seen: Seen) -> float:
        """How long ``seen``'s process has been silent: broker time from its announcement
        to this instance's own latest one after it (0 while none went through)."""
        own = self._own_latest
        if own is None or own.offset < seen.offset:
            return 0.0
        return max(0.0, (own.broker_ms - seen.broker_ms) / 1000)

    def taken_over(self) -> Announcement | None:
        """While holding the lease: another process that took it over (a later generation),
        or None."""
        with self._lock:
            return self._overtaker() if self._holds else None

    def _overtaker(self) -> Announcement | None:
        """Another live process holding the lease at a later generation than this
        instance's last, or at the same one claimed earlier (``overtaken``), or None."""
        seen = self._holder()
        return seen.what if seen is not None and overtaken(True, self._generation, self._claim, seen) else None

    # ---------------------------------------------------------------- threads

    def _announce_loop(self) -> None:
        # This thread keeps the lease: a failed announcement is logged and the next one comes.
        while not self._stop.wait(next_in := self._next_announcement_in()):
            call_logged(self.announce, "announcing this instance", next_in)

    def _next_announcement_in(self) -> float:
        with self._lock:
            return announcement_interval(self.interval_s, self._holds, self._holder())

    def _watch_loop(self, consumer: Consumer) -> None:
        try:
            while not self._stop.is_set():
                msg = consumer.poll(0.1)
                if msg is not None:
                    self._take(msg)
        finally:
            consumer.close()

    def _catch_up(self, consumer: Consumer, high: int) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                position = consumer.position([TopicPartition(self.topic, LEASE_PARTITION)])[0].offset
                if position < 0 or position >= high:
                    return
                continue
            self._take(msg)
            if (msg.offset() or 0) >= high - 1:
                return

    def _take(self, msg: Message) -> None:
        err = msg.error()
        if err is not None:
            if err.code() != KafkaError._PARTITION_EOF:
                log.debug("instances topic: %s", err.str())
            return
        what = Announcement.decode(msg.value())
        if what is None or what.changelog != self.me.changelog:
            return
        offset = msg.offset() or 0
        with self._lock:
            if what.token == self.me.token:
                self._own_latest = seen = Seen(what, offset, msg.timestamp()[1])
                self._own_seen.append(seen)
                self._own_read_at = time.monotonic()
                if what.holds_lease and what.generation == self._generation and self._claim is None:
                    self._claim = offset
            else:
                before = self._latest.get(what.token)
                claim = (before.claim if before is not None and what.holds_lease and before.what.holds_lease
                         and before.what.generation == what.generation else None)
                self._latest[what.token] = Seen(what, offset, msg.timestamp()[1], claim)
            self._changed.notify_all()
