"""What the HTTP API answers from the committed store (pure): query parameters in, JSON
documents out. Each pipeline's wing brings its own paths as ``Route``s; the parts every
answer shares are here.

Every answer is built from one decoded snapshot of the store (``Store.read_all`` or one
scan, each under the store's lock, and every batch is one WriteBatch under the same
lock), and names the batch it reflects: ``seq`` (the batch sequence, as in the log's
``batch N (seq M)``), ``offsets`` (the next input offset per partition, as in
``brewstream counts --json``) and ``last_batch``. A client can tell how fresh an answer
is, and never sees half a batch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import parse_qsl, unquote

from restorer.codec import LAST_BATCH_MS, StoreState
from restorer.store import Store
from topics.clock import utc_iso

MAX_TOP = 10_000
DEFAULT_TOP = 10
MAX_PARAMS = 8
_NS = 10**9
# Unix seconds as a plain decimal number; anything else is read as an ISO 8601 time.
_SECONDS = re.compile(r"-?\d{1,12}(\.\d{1,9})?")
# What signed 64-bit nanoseconds hold (the windows store's times): about 1677..2262.
_MIN_NS, _MAX_NS = -(2**63), 2**63 - 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class BadQuery(ValueError):
    """A query the API cannot answer; the message is the one-line reason for the 400."""


Answer = Callable[[Store], dict[str, object]]


@dataclass(frozen=True)
class Route:
    """One API path: the parameters it takes, and how it answers from the store."""

    params: tuple[str, ...]
    # Checks the parameters (BadQuery) before the store is looked at, and returns what
    # reads the store.
    prepare: Callable[[Mapping[str, str]], Answer]
    # Answers in every phase (it names the role): status shows a restore's progress.
    any_phase: bool = False
    # A path ending in "/" answers every path under it; the rest of the path (decoded) is
    # the parameter of this name (``/api/menu/<drink>``).
    tail: str | None = None

    def params_of(self, query: str, rest: str) -> dict[str, str]:
        params = parse_params(query, self.params)
        if self.tail is not None:
            params[self.tail] = rest
        return params


def find_route(routes: Mapping[str, Route], path: str) -> tuple[Route | None, str]:
    """The route of ``path``, and what a tail route takes from it (percent-decoded)."""
    route = routes.get(path)
    if route is not None:
        return route, ""
    for prefix, r in routes.items():
        if r.tail is not None and path.startswith(prefix) and len(path) > len(prefix):
            # Bytes that are not UTF-8 become U+FFFD: a name no store holds, answered as unknown.
            return r, unquote(path[len(prefix):], errors="replace")
    return None, ""


def parse_params(query: str, allowed: tuple[str, ...]) -> dict[str, str]:
    """The query string as name -> value: an unknown, repeated or malformed parameter is
    refused rather than ignored, so a typo never silently widens an answer."""
    if not query:
        return {}
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True, max_num_fields=MAX_PARAMS,
                          errors="strict")
    except ValueError as exc:
        raise BadQuery(f"malformed query string ({_short(str(exc))})") from None
    params: dict[str, str] = {}
    for name, value in pairs:
        if name not in allowed:
            expected = ", ".join(allowed) if allowed else "none"
            raise BadQuery(f"unknown parameter {_short(name)!r}; this path takes: {expected}")
        if name in params:
            raise BadQuery(f"parameter {name!r} is given more than once")
        params[name] = value
    return params


def top_param(params: Mapping[str, str]) -> int:
    raw = params.get("n")
    if raw is None or raw == "":
        return DEFAULT_TOP
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 6 and 1 <= int(raw) <= MAX_TOP):
        raise BadQuery(f"n must be a whole number from 1 to {MAX_TOP}, not {_short(raw)!r}")
    return int(raw)


def time_param(params: Mapping[str, str], name: str) -> int | None:
    """Unix nanoseconds from unix seconds (``1763892000``, ``1763892000.5``) or an ISO 8601
    time with its zone (``2026-11-23T10:00:00Z``); None when absent or empty."""
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    if _SECONDS.fullmatch(raw):
        whole, _, frac = raw.lstrip("-").partition(".")
        ns = int(whole) * _NS + int(frac.ljust(9, "0") or 0)
        ns = -ns if raw.startswith("-") else ns
    else:
        try:
            moment = datetime.fromisoformat(raw)
        except ValueError:
            raise BadQuery(f"{name} must be unix seconds or an ISO 8601 time such as 2026-11-23T10:00:00Z, "
                           f"not {_short(raw)!r}") from None
        if moment.tzinfo is None:
            raise BadQuery(f"{name} needs a time zone, e.g. {_short(raw)}Z for UTC")
        try:
            delta = moment - _EPOCH
        except OverflowError:
            raise BadQuery(f"{name} is out of range (years 1678 to 2262)") from None
        ns = (delta.days * 86_400 + delta.seconds) * _NS + delta.microseconds * 1000
    if not _MIN_NS <= ns <= _MAX_NS:
        raise BadQuery(f"{name} is out of range (years 1678 to 2262)")
    return ns


def batch_fields(state: StoreState) -> dict[str, object]:
    """What every answer carries: the batch it reflects."""
    last = state.meta.get(LAST_BATCH_MS)
    return {"seq": state.last_seq, "offsets": state.offsets_json(),
            "last_batch": None if last is None else utc_iso(last / 1000, millis=True)}


def status_answer(state: StoreState, input_topic: str, lag: Mapping[str, float],
                  restore_remaining: Mapping[str, float], now: float) -> dict[str, object]:
    """``/api/status``: the store's batch, its age, and the input lag and restore progress
    as the metrics last saw them (the API never asks Kafka on a request's behalf)."""
    last = state.meta.get(LAST_BATCH_MS)
    fields = batch_fields(state)
    return {**fields, "input_topic": input_topic,
            "last_batch_age_s": None if last is None else round(max(0.0, now - last / 1000), 3),
            "input_lag": {p: int(v) for p, v in sorted(lag.items()) if math.isfinite(v)},
            "lag": int(sum(v for v in lag.values() if math.isfinite(v))) if lag else None,
            "restore_remaining": {p: int(v) for p, v in sorted(restore_remaining.items()) if v > 0}}


@dataclass(frozen=True)
class Owner:
    """Who answers: the instance's name, its lease's generation, and its tasks' roles by
    task number (``service.instance.task_roles``)."""

    instance: str
    generation: int
    tasks: tuple[str, ...] = ()

    def task_role(self, task: str) -> str | None:
        """The role of ``task`` (a JSON key: its number) here; None for one it does not know."""
        n = int(task) if task.isascii() and task.isdigit() else -1
        return self.tasks[n] if 0 <= n < len(self.tasks) else None


def labelled(body: Mapping[str, object], standby: bool, owner: Owner | None,
             lag: Mapping[str, float]) -> dict[str, object]:
    """An answer labelled with who gave it, and each of its tasks (``restorer.tasks``) with
    the instance that owns it and its role here (``state``). An active instance owns every
    task of its store. A standby's answer is a copy that may be behind: it says so (``stale``) with how far
    behind its changelog it was when it last followed it (``lag``: the offsets per task,
    as the metrics last saw them), and names no owner; never an unlabelled stale answer."""
    out: dict[str, object] = dict(body)
    if owner is not None:
        out = {"instance": owner.instance, "generation": owner.generation, **out}
    tasks = out.get("tasks")
    if isinstance(tasks, dict):
        out["tasks"] = {t: {**task, **_task_labels(t, standby, owner, lag)} for t, task in tasks.items()}
    if standby:
        out["stale"] = True
        out["standby_lag"] = int(sum(v for v in lag.values() if math.isfinite(v)))
    return out


def _task_labels(task: str, standby: bool, owner: Owner | None, lag: Mapping[str, float]) -> dict[str, object]:
    role = {} if owner is None else {"state": owner.task_role(task)}
    if standby:
        behind = lag.get(task)
        return {"owner": None, "stale": True,
                "lag": int(behind) if behind is not None and math.isfinite(behind) else None, **role}
    return {} if owner is None else {"owner": owner.instance, "generation": owner.generation, **role}


def _short(text: str, limit: int = 60) -> str:
    """A piece of a request quoted back: short, on one line."""
    text = text.replace("\n", " ").replace("\r", " ")
    return text if len(text) <= limit else text[:limit] + "…"
