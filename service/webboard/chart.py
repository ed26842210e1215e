"""The event-time vs processing-time chart: counts per window from the windows store,
opened read-only for every refresh (``stores.read_store``)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

from service.webboard.stores import Check, NotShown, read_store
from service.windows.state import BAD, LATE, NO_HEADER, TOTAL, WindowsState, decode_windows_state
from topics.clock import utc_iso

NS_PER_MS = 10**6
BARS = 16


def iso_ms(ms: int) -> str:
    return utc_iso(ms / 1000, millis=True)


def window_step(starts: list[int]) -> int | None:
    """The table's window size, as the gcd of the gaps between window starts."""
    step = 0
    for a, b in itertools.pairwise(starts):
        step = math.gcd(step, b - a)
    return step or None


def chart_doc(state: WindowsState, bars: int = BARS) -> dict[str, Any]:
    """The last ``bars`` windows, gaps filled with zeros, in ms (JSON numbers stay exact)."""
    starts = sorted(set(state.by_event) | set(state.by_processing))
    step = window_step(starts)
    if starts and step:
        first = max(starts[0], starts[-1] - (bars - 1) * step)
        starts = list(range(first, starts[-1] + step, step))
    else:
        starts = starts[-bars:]
    wm = state.watermark_ns
    return {
        "available": True,
        "message": None if starts else "the windows pipeline has not counted any event yet",
        "window_ms": step // NS_PER_MS if step else None,
        "watermark_ms": wm // NS_PER_MS if wm is not None else None,
        "total": state.counter(TOTAL),
        "late": state.counter(LATE),
        "no_header": state.counter(NO_HEADER),
        "bad": state.counter(BAD),
        "windows": [{"start_ms": s // NS_PER_MS, "start": iso_ms(s // NS_PER_MS),
                     "event": state.by_event.get(s, 0), "processing": state.by_processing.get(s, 0)}
                    for s in starts],
    }


def unavailable(message: str) -> dict[str, Any]:
    return {"available": False, "message": message, "windows": []}


def read_chart(state_dir: Path, bars: int = BARS, check: Check | None = None) -> dict[str, Any]:
    """The chart of the windows store in ``state_dir`` (``stores.read_store`` says when none)."""
    try:
        state = read_store(state_dir, "windows", decode_windows_state, check)
    except NotShown as exc:
        return unavailable(str(exc))
    return chart_doc(state, bars)
