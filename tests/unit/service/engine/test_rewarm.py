"""A standby's warm-up tried again until one reads records, each try only once the store's
input offsets moved (pure thread logic; the warm-up itself runs against a real broker and
Spark in tests/integration/test_warm_up.py)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from service.engine.query import Rewarm
from topics.clock import wait_until


def moving() -> Callable[[], object]:
    """Input offsets that move between any two looks."""
    counter = itertools.count()
    return lambda: {0: next(counter)}


def test_attempts_go_on_until_one_reads_records_then_end() -> None:
    results = iter([0, 0, 120])
    calls: list[int] = []

    def attempt() -> int:
        calls.append(1)
        return next(results)

    rewarm = Rewarm(attempt, moving(), every_s=0.01)
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

    rewarm = Rewarm(attempt, moving(), every_s=0.01)
    rewarm.start()
    wait_until(lambda: not rewarm.running, 10, "the attempts to end")
    assert len(calls) == 2


def test_stop_ends_the_attempts() -> None:
    calls: list[int] = []

    def attempt() -> int:
        calls.append(1)
        return 0

    rewarm = Rewarm(attempt, moving(), every_s=0.01)
    rewarm.start()
    wait_until(lambda: len(calls) >= 2, 10, "two attempts")
    rewarm.stop()
    wait_until(lambda: not rewarm.running, 10, "the attempts to end")
    settled = len(calls)
    assert not rewarm.running and len(calls) == settled


def test_no_attempt_while_the_offsets_stand_still_and_one_per_move() -> None:
    offsets = {0: 0}
    looks: list[int] = []
    calls: list[dict[int, int]] = []

    def progress() -> dict[int, int]:
        looks.append(1)
        return dict(offsets)

    def attempt() -> int:
        calls.append(dict(offsets))
        return 0 if offsets[0] < 20 else 7  # the first move's records were gone (retention)

    rewarm = Rewarm(attempt, progress, every_s=0.01)
    rewarm.start()
    try:
        wait_until(lambda: len(looks) >= 10, 10, "ten looks")
        assert calls == []  # an input that stays empty: no attempt, no connection
        offsets[0] = 10
        wait_until(lambda: len(calls) == 1, 10, "an attempt after the move")
        wait_until(lambda: len(looks) >= 25, 10, "more looks")
        assert calls == [{0: 10}]  # it read nothing, and the offsets have not moved again
        offsets[0] = 20
        wait_until(lambda: not rewarm.running, 10, "the attempts to end once one read records")
        assert calls == [{0: 10}, {0: 20}]
    finally:
        rewarm.stop()


def test_a_failing_look_is_taken_for_no_move() -> None:
    calls: list[int] = []
    failed: list[int] = []
    state = {"fail": True}

    def progress() -> dict[int, int]:
        if state["fail"]:
            failed.append(1)
            raise OSError("the store reopened")
        return {0: 5}

    def attempt() -> int:
        calls.append(1)
        return 3

    rewarm = Rewarm(attempt, progress, every_s=0.01)
    rewarm.start()
    wait_until(lambda: len(failed) >= 5, 10, "looks that fail")
    assert calls == []  # nothing is attempted on a failing look
    state["fail"] = False
    wait_until(lambda: not rewarm.running, 10, "the attempt once the store answers")
    assert calls == [1]
