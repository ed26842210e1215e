"""The windows pipeline's HTTP path: ``/api/windows?key=&from=&to=``, the open windows
(answers are pure)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from restorer.codec import StoreState
from restorer.tasks import split_by_task, tasks_json
from service.ops.queries import Answer, BadQuery, Route, batch_fields, time_param
from service.windows.output import iso
from service.windows.state import ROUTING, WindowsState, decode_windows_state


def window_range(params: Mapping[str, str]) -> tuple[str | None, int | None, int | None]:
    """``key`` (a shop's sessions; empty or absent: every key), ``from`` and ``to``."""
    key = params.get("key") or None
    start, end = time_param(params, "from"), time_param(params, "to")
    if start is not None and end is not None and start > end:
        raise BadQuery("from is after to")
    return key, start, end


def windows_answer(state: WindowsState, key: str | None, start_ns: int | None,
                   end_ns: int | None) -> dict[str, object]:
    """``/api/windows``: the open windows (final ones have left the store for
    brew.order-windows) overlapping [from, to), for one key or all, in time order; each
    task labelled with its open windows and how far its changelog partition has come."""
    chosen = [w for w in state.windows.values()
              if (key is None or w.key == key)
              and (start_ns is None or w.end_ns > start_ns)
              and (end_ns is None or w.start_ns < end_ns)]
    chosen.sort(key=lambda w: (w.start_ns, w.kind, w.key or ""))
    wm = state.watermark_ns
    return {**batch_fields(state.reserved), "watermark": None if wm is None else iso(wm),
            "windows": [{"kind": w.kind, "start": iso(w.start_ns), "end": iso(w.end_ns), "key": w.key,
                         "count": w.count, "amount": w.amount_cents / 100, "late_accepted": w.late_accepted}
                        for w in chosen],
            "tasks": tasks_json(split_by_task(_open_windows(state), ROUTING))}


def _open_windows(state: WindowsState) -> StoreState:
    """The store's bookkeeping with its open windows as its keys: what a task counts."""
    return dataclasses.replace(state.reserved, names=dict.fromkeys(state.windows, b""))


def routes() -> dict[str, Route]:
    def windows(params: Mapping[str, str]) -> Answer:
        key, start, end = window_range(params)
        return lambda store: windows_answer(decode_windows_state(store.items()), key, start, end)

    return {"/api/windows": Route(("key", "from", "to"), windows)}
