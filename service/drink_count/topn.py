"""The top-N board: ranking, the printed table and the JSON snapshot (pure)."""

from __future__ import annotations

import heapq
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import orjson

from service.drink_count.counts import DrinkCounts
from service.records.limits import fitted, printable
from topics.clock import utc_iso

SNAPSHOT_KEY = b"top-n"
MIN_NAME_COLUMNS = 12  # however narrow the terminal, a name keeps this much


@dataclass(frozen=True)
class Ranked:
    rank: int
    drink: str
    count: int


def top_n(counts: Mapping[str, int], n: int) -> list[Ranked]:
    """Highest counts first, ties broken by drink name ascending."""
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:max(n, 0)]
    return [Ranked(i, drink, count) for i, (drink, count) in enumerate(ordered, start=1)]


def _rank_key(r: Ranked) -> tuple[int, str]:
    return -r.count, r.drink


def merged_top(rankings: Iterable[Sequence[Ranked]], n: int) -> list[Ranked]:
    """The top ``n`` of several tasks' own top-``n`` rankings, ranked again: exact, because
    a drink lives in one task only (``restorer.tasks``), so no drink of the whole top ``n``
    can be missing from its task's."""
    merged = heapq.merge(*rankings, key=_rank_key)
    return [Ranked(i, r.drink, r.count) for i, r in enumerate(list(merged)[:max(n, 0)], start=1)]


def board_text(now: datetime, processed: int, n: int, ranked: list[Ranked], columns: int | None = None) -> str:
    """The seed's table: ``[HH:MM:SS] processed=N top-10:`` then one ranked row each, every
    row within ``columns`` (the terminal's width by default): a longer name is cut with an
    ellipsis, so one 256-byte name cannot widen the whole table."""
    from rich.cells import cell_len

    lines = [f"[{now.astimezone():%H:%M:%S}] processed={processed} top-{n}:"]
    columns = columns or shutil.get_terminal_size((80, 24)).columns
    counts = max((len(str(r.count)) for r in ranked), default=1)
    room = max(MIN_NAME_COLUMNS, columns - len("  10. ") - 2 - counts)
    shown = [fitted(r.drink, room) for r in ranked]
    width = max(map(cell_len, shown), default=0)
    lines += [f"  {r.rank:>2}. {name}{' ' * (width - cell_len(name))}  {r.count}"
              for r, name in zip(ranked, shown, strict=True)]
    if not ranked:
        lines.append("  (no drinks counted yet)")
    return "\n".join(lines)


def _shown(ranked: list[Ranked], empty_width: int) -> tuple[list[str], int]:
    """The drink names as a terminal shows them (see ``printable``) and the widest one's width."""
    shown = [printable(r.drink) for r in ranked]
    return shown, max(map(len, shown), default=empty_width)


def snapshot_record(seq: int, now: datetime, processed: int, ranked: list[Ranked],
                    max_bytes: int | None = None, batch: int | None = None) -> bytes:
    """The JSON snapshot; with ``max_bytes``, the ranking is cut from the bottom until it fits.
    ``seq`` orders snapshots (``next_seq``); ``batch`` is the store's batch sequence it shows."""
    def encode(rows: list[Ranked]) -> bytes:
        doc: dict[str, object] = {
            "seq": seq,
            "ts": utc_iso(now),
            "processed_orders": processed,
            "top": [{"rank": r.rank, "drink": r.drink, "count": r.count} for r in rows],
        }
        if batch is not None:
            doc["batch"] = batch
        return orjson.dumps(doc)

    record = encode(ranked)
    if max_bytes is None or len(record) <= max_bytes:
        return record
    lo, hi = 0, len(ranked)  # the longest prefix that fits lies in [lo, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if len(encode(ranked[:mid])) <= max_bytes:
            lo = mid
        else:
            hi = mid
    return encode(ranked[:lo])


def next_seq(previous: int, batch: int) -> int:
    """Pure: the ``seq`` of the next snapshot, after ``previous`` (the highest one this sender
    produced, or found committed on the topic when it registered) of a store at batch ``batch``.

    The order consumers keep (docs/reference/topics.md, "A top-N snapshot"): it rises with
    every snapshot, whichever instance sends it, because each sender continues from what
    the topic holds once its registration has fenced every earlier one; and it is never
    below the batch it shows, a number the changelog keeps (``restorer.codec`` commit
    markers), so it goes on rising even from a topic that lost every snapshot."""
    return max(previous + 1, batch)


def snapshot_seq(value: bytes | None) -> int | None:
    """Pure: a snapshot record's ``seq``, or None when the record is not a snapshot with one
    (malformed bytes, another document, a ``seq`` that is no non-negative integer)."""
    try:
        doc = orjson.loads(value or b"")
    except orjson.JSONDecodeError:
        return None
    seq = doc.get("seq") if isinstance(doc, dict) else None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0 else None


def counts_text(store: DrinkCounts, n: int | None = None) -> str:
    """``brewstream counts``: the drinks ranked (all, or the top ``n``), then the counters and
    the next input offsets."""
    ranked = top_n(store.counts, n or len(store.counts))
    shown, width = _shown(ranked, 5)
    lines = [f"{name:<{width}}  {r.count}" for r, name in zip(ranked, shown, strict=True)]
    offsets = " ".join(f"{t}[{p}]={o}" for t, ps in sorted(store.state.offsets.items()) for p, o in sorted(ps.items()))
    lines.append(f"processed_orders={store.processed_orders} bad_orders={store.bad_orders} "
                 f"next offsets: {offsets or '(none)'}")
    return "\n".join(lines)
