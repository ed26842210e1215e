"""A sink says a batch is computing while one runs within its allowance, and not after."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from restorer.faults import FaultPlan
from service.engine import outage
from service.engine import sink as sink_module
from service.engine.outage import FIRST_BATCH_S, SLOW_BATCH_FACTOR, STALL_S
from service.engine.sink import OrderedCommitSink


class _Store:
    def last_seq(self) -> int:
        return 0


class _Sink(OrderedCommitSink):
    def __init__(self) -> None:
        super().__init__(_Store(), None, FaultPlan(None, lambda: None))  # type: ignore[arg-type]
        self.entered, self.release = threading.Event(), threading.Event()

    def _apply(self, df: Any, batch_id: int) -> None:
        self.entered.set()
        assert self.release.wait(10)


def test_a_batch_in_flight_is_computing_until_it_outlives_its_allowance(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(sink_module.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(outage.time, "monotonic", lambda: now[0])
    sink = _Sink()
    assert not sink.computing()  # nothing in flight

    def batch() -> None:
        sink(None, 0)  # type: ignore[arg-type]

    first = threading.Thread(target=batch)
    first.start()
    assert sink.entered.wait(10)
    now[0] += FIRST_BATCH_S - 1
    assert sink.computing()  # a query's first batch: up to FIRST_BATCH_S
    now[0] += 2
    assert not sink.computing()
    sink.release.set()
    first.join(10)
    assert not sink.computing()  # done: nothing in flight

    sink.entered.clear()
    sink.release.clear()
    second = threading.Thread(target=batch)
    second.start()
    assert sink.entered.wait(10)
    allowance = max(STALL_S, SLOW_BATCH_FACTOR * (FIRST_BATCH_S + 1))  # the last batch took FIRST_BATCH_S + 1
    now[0] += allowance - 1
    assert sink.computing()
    now[0] += 2
    assert not sink.computing()
    sink.release.set()
    second.join(10)
