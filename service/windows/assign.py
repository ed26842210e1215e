"""Which windows an event belongs to (pure).

Tumbling and hopping windows are aligned to the unix epoch: ``--window 5m --hop 1m``
puts an event at 10:03:20 into the five windows starting 09:59 … 10:03. Session
windows are per shop: ``[first event, last event + gap)``; two sessions that overlap
are one. Merging is associative, so sessions built inside one batch can be merged with
the sessions kept in the store in any order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

TUMBLING, HOPPING, SESSION = "tumbling", "hopping", "session"
# Bounds that keep every window end (event time + size + lateness) inside 64 bits and an
# event's windows few enough to count one by one.
MAX_SPAN_NS = 10 * 366 * 24 * 3600 * 10**9  # ten years
MAX_WINDOWS_PER_EVENT = 1000


@dataclass(frozen=True)
class WindowSpec:
    kind: str
    size_ns: int = 0
    hop_ns: int = 0
    gap_ns: int = 0
    allowed_ns: int = 0

    def __post_init__(self) -> None:
        if max(self.size_ns, self.gap_ns, self.allowed_ns) > MAX_SPAN_NS or self.allowed_ns < 0:
            raise ValueError("window size, gap and allowed lateness must lie between 0 and ten years")
        if self.kind == HOPPING and self.hop_ns > 0 and self.size_ns // self.hop_ns > MAX_WINDOWS_PER_EVENT:
            raise ValueError(f"a hop this short puts each event into over {MAX_WINDOWS_PER_EVENT} windows; "
                             "pick a longer --hop")
        if self.kind == SESSION:
            if self.gap_ns <= 0:
                raise ValueError("a session window needs a gap above 0")
        elif self.kind in (TUMBLING, HOPPING):
            if self.size_ns <= 0 or not 0 < self.hop_ns <= self.size_ns:
                raise ValueError("window size must be above 0 and the hop between 0 and the size")
        else:
            raise ValueError(f"unknown window kind {self.kind!r}")

    @classmethod
    def tumbling(cls, size_ns: int, allowed_ns: int = 0) -> WindowSpec:
        return cls(TUMBLING, size_ns, size_ns, 0, allowed_ns)

    @classmethod
    def hopping(cls, size_ns: int, hop_ns: int, allowed_ns: int = 0) -> WindowSpec:
        return cls(HOPPING, size_ns, hop_ns, 0, allowed_ns)

    @classmethod
    def session(cls, gap_ns: int, allowed_ns: int = 0) -> WindowSpec:
        return cls(SESSION, 0, 0, gap_ns, allowed_ns)


def assign(t_ns: int, spec: WindowSpec) -> list[tuple[int, int]]:
    """(start, end) of every fixed window containing ``t_ns``, oldest first."""
    last = t_ns - t_ns % spec.hop_ns
    starts = range(last, t_ns - spec.size_ns, -spec.hop_ns)
    return sorted((s, s + spec.size_ns) for s in starts)


@dataclass
class Session:
    key: str
    start_ns: int
    end_ns: int  # last event + gap
    count: int = 0
    amount_cents: int = 0
    late_accepted: int = 0
    members: list[int] = field(default_factory=list)  # indexes of the events, for the late output

    def overlaps(self, other: Session) -> bool:
        return self.start_ns < other.end_ns and other.start_ns < self.end_ns

    def absorb(self, other: Session) -> Session:
        return replace(self, start_ns=min(self.start_ns, other.start_ns), end_ns=max(self.end_ns, other.end_ns),
                       count=self.count + other.count, amount_cents=self.amount_cents + other.amount_cents,
                       late_accepted=self.late_accepted + other.late_accepted,
                       members=self.members + other.members)


def sessionize(key: str, events: Iterable[tuple[int, int, int]], gap_ns: int) -> list[Session]:
    """Sessions of one key from (event_ns, amount_cents, index) tuples."""
    return merge_sessions([Session(key, t, t + gap_ns, 1, cents, 0, [i]) for t, cents, i in events])


def merge_sessions(sessions: Iterable[Session]) -> list[Session]:
    out: list[Session] = []
    for s in sorted(sessions, key=lambda s: s.start_ns):
        if out and out[-1].overlaps(s):
            out[-1] = out[-1].absorb(s)
        else:
            out.append(s)
    return out
