"""The repeated call behind the board, the windows table and the metrics refresher."""

from __future__ import annotations

import logging

import pytest

from service.instance.periodic import Every
from topics.clock import wait_until


def test_first_runs_once_before_the_repeated_call() -> None:
    calls: list[str] = []
    every = Every(0.01, lambda: calls.append("fn"), "test", first=lambda: calls.append("first"))
    every.start()
    try:
        wait_until(lambda: calls.count("fn") >= 3, 10, "three repeated calls")
    finally:
        every.stop()
    assert calls[0] == "first" and calls.count("first") == 1


def test_a_failing_first_call_is_logged_and_the_repeated_one_still_comes(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []

    def broken() -> None:
        raise RuntimeError("no cluster")

    every = Every(0.01, lambda: calls.append("fn"), "test", first=broken)
    with caplog.at_level(logging.WARNING):
        every.start()
        try:
            wait_until(lambda: calls, 10, "a repeated call")
        finally:
            every.stop()
    assert any("test failed (RuntimeError: no cluster)" in r.getMessage() for r in caplog.records)
