"""``brewstream dlq show``: the DLQ grouped by reason, with counts and a few samples (pure).

Reasons are grouped without their numbers (``item 0: drink is 300 bytes, over the
256-byte limit`` and ``item 2: drink is 280 bytes, …`` are one group), the same grouping
as the ``brewstream_bad_records_total`` metric's ``reason`` label; the samples keep the
exact reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from service.dlq.read import DlqRecord, NotDlq, preview
from service.ops.metrics import reason_label
from service.records.limits import printable
from topics.clock import utc_iso

NOT_OURS = "(not written by brewstream)"


@dataclass
class Group:
    reason: str
    count: int = 0
    replayed: int = 0
    first_ms: int | None = None
    last_ms: int | None = None
    samples: list[DlqRecord] = field(default_factory=list)


@dataclass
class Summary:
    topic: str
    groups: dict[str, Group] = field(default_factory=dict)
    foreign: list[NotDlq] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(g.count for g in self.groups.values()) + len(self.foreign)


def summarize(topic: str, records: Iterable[DlqRecord | NotDlq], replayed: set[str], samples: int = 3) -> Summary:
    """Counts per reason group, the first ``samples`` records of each, and how many of each
    ``dlq replay`` has already sent back (``replayed`` holds their sources)."""
    summary = Summary(topic)
    for record in records:
        if isinstance(record, NotDlq):
            summary.foreign.append(record)
            continue
        label = reason_label(record.reason)
        group = summary.groups.setdefault(label, Group(label))
        group.count += 1
        group.replayed += record.source in replayed
        group.first_ms = record.timestamp_ms if group.first_ms is None else min(group.first_ms, record.timestamp_ms)
        group.last_ms = record.timestamp_ms if group.last_ms is None else max(group.last_ms, record.timestamp_ms)
        if len(group.samples) < samples:
            group.samples.append(record)
    return summary


def _ordered(summary: Summary) -> list[Group]:
    return sorted(summary.groups.values(), key=lambda g: (-g.count, g.reason))


def sample_json(r: DlqRecord) -> dict[str, object]:
    return {"source": r.source, "dlq": f"{r.dlq_partition}:{r.dlq_offset}", "timestamp": utc_iso(r.timestamp_ms / 1000),
            "reason": r.reason, "key": None if r.key is None else preview(r.key),
            "value": None if r.value is None else preview(r.value, 200),
            "whole": r.whole, **({"original_size": r.original_size} if r.original_size is not None else {})}


def summary_json(summary: Summary) -> dict[str, object]:
    return {"topic": summary.topic, "total": summary.total,
            "reasons": [{"reason": g.reason, "count": g.count, "replayed": g.replayed,
                         "first": utc_iso(g.first_ms / 1000) if g.first_ms is not None else None,
                         "last": utc_iso(g.last_ms / 1000) if g.last_ms is not None else None,
                         "samples": [sample_json(r) for r in g.samples]} for g in _ordered(summary)],
            "not_brewstream": [{"dlq": f"{n.dlq_partition}:{n.dlq_offset}", "problem": n.problem}
                               for n in summary.foreign]}


def summary_text(summary: Summary) -> str:
    groups = _ordered(summary)
    lines = [f"{summary.topic}: {summary.total} records, {len(groups)} reasons"]
    if summary.total == 0:
        lines[0] = f"{summary.topic}: no records"
    for g in groups:
        span = f"{utc_iso(g.first_ms / 1000)} .. {utc_iso(g.last_ms / 1000)}" if g.first_ms and g.last_ms else ""
        replayed = f", {g.replayed} replayed" if g.replayed else ""
        lines.append(f"{g.count:>7}  {printable(g.reason)}  ({span}{replayed})")
        for r in g.samples:
            size = "" if r.whole else (" [unavailable]" if r.unavailable else
                                       f" [cut; {r.original_size or '?'} bytes in {r.source_topic}]")
            lines.append(f"           {r.source}  {printable(r.reason)}")
            lines.append(f"             key={preview(r.key, 40)} value={preview(r.value)}{size}")
    if summary.foreign:
        lines.append(f"{len(summary.foreign):>7}  {NOT_OURS}: {summary.foreign[0].problem} "
                     f"(first at {summary.foreign[0].dlq_partition}:{summary.foreign[0].dlq_offset})")
    return "\n".join(lines)
