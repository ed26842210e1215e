"""A standby's warm-up tried again until one reads records (pure thread logic; the warm-up
itself runs against a real broker and Spark in tests/integration/test_warm_up.py)."""

from __future__ import annotations

from service.engine.query import Rewarm
from topics.clock import wait_until


def test_attempts_go_on_until_one_reads_records_then_end() -> None:
    results = iter([0, 0, 120])
    calls: list[int] = []

    def attempt() -> int:
        calls.append(1)
        return next(results)

    rewarm = Rewarm(attempt, every_s=0.01)
    rewarm.start()
    wait_until(lambda: not rewarm.running, 10, "the attempts to end")
    assert len(calls) == 3


def test_a_failing_attempt_is_followed_by_another() -> None:
    calls: list[int] = []

    def attempt() -> int:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("Kafka away")
        return 5

    rewarm = Rewarm(attempt, every_s=0.01)
    rewarm.start()
    wait_until(lambda: not rewarm.running, 10, "the attempts to end")
    assert len(calls) == 2


def test_stop_ends_the_attempts() -> None:
    calls: list[int] = []

    def attempt() -> int:
        calls.append(1)
        return 0

    rewarm = Rewarm(attempt, every_s=0.01)
    rewarm.start()
    wait_until(lambda: len(calls) >= 2, 10, "two attempts")
    rewarm.stop()
    wait_until(lambda: not rewarm.running, 10, "the attempts to end")
    settled = len(calls)
    assert not rewarm.running and len(calls) == settled
