"""What the probes and the data paths answer in each phase (pure)."""

from __future__ import annotations

import time

from hypothesis import given
from hypothesis import strategies as st

from service.instance.health import ACTIVE, PHASES, RESTORING, STANDBY, STARTING, Phase, data_refusal, readiness


@given(name=st.sampled_from(PHASES), running=st.none() | st.booleans(), whole=st.booleans(),
       reason=st.sampled_from(["", "catching up with the changelog", "waiting for Kafka: x"]))
def test_the_data_paths_answer_only_what_readyz_calls_ready_from_a_whole_store(
        name: str, running: bool | None, whole: bool, reason: str) -> None:
    phase = Phase(name, reason, time.time(), None if running is None else (lambda: running))
    ready, _ = readiness(phase)
    why = data_refusal(phase, whole)
    assert (why is None) == (ready and whole)
    assert name in ("active", "standby") or why is not None  # starting, restoring, fenced, stopped: never
    if why is not None:
        assert "\n" not in why and name in why


def test_the_refusals_say_why() -> None:
    assert data_refusal(Phase(STARTING, "", 0.0), False) == "starting"
    assert data_refusal(Phase(RESTORING, "catching up with the changelog", 0.0), True) == \
        "restoring (catching up with the changelog)"
    assert data_refusal(Phase(ACTIVE, "", 0.0, lambda: False), True) == \
        "active, but its streaming query is not running"
    assert data_refusal(Phase(STANDBY, "following the changelog", 0.0), False) == \
        "standby, but the store is not up to date with its changelog yet"
    assert data_refusal(Phase(STANDBY, "following the changelog", 0.0), True) is None
