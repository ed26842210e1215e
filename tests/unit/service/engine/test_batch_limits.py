"""The Kafka source's bounds on a batch (``engine.query.batch_limits``): pure, against a
simple oracle, for any cap and either kind of run. Spark refuses a minimum above the cap."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from service.engine.contract import RunConfig
from service.engine.defaults import BATCH_MAX_DELAY_S, BATCH_MIN_RECORDS
from service.engine.query import batch_limits
from topics.kafka import KafkaConnection


def config(cap: int | None, available_now: bool) -> RunConfig:
    return RunConfig(KafkaConnection("127.0.0.1:1"), Path("s"), Path("c"), max_offsets_per_trigger=cap,
                     available_now=available_now)


@given(cap=st.none() | st.integers(1, 10**12), available_now=st.booleans(), gather=st.booleans())
def test_the_limits_agree_with_their_definition(cap: int | None, available_now: bool, gather: bool) -> None:
    limits = batch_limits(config(cap, available_now), gather)
    expected: dict[str, str] = {} if cap is None else {"maxOffsetsPerTrigger": str(cap)}
    if gather and not available_now:
        expected["minOffsetsPerTrigger"] = str(BATCH_MIN_RECORDS if cap is None else min(cap, BATCH_MIN_RECORDS))
        expected["maxTriggerDelay"] = f"{round(BATCH_MAX_DELAY_S * 1000)}ms"
    assert limits == expected
    if "minOffsetsPerTrigger" in limits and cap is not None:
        assert int(limits["minOffsetsPerTrigger"]) <= cap


def test_a_daemon_with_a_cap_under_the_minimum_waits_for_the_cap() -> None:
    assert batch_limits(config(40, False))["minOffsetsPerTrigger"] == "40"
    assert "minOffsetsPerTrigger" not in batch_limits(config(40, True))
