"""Kafka's own failures, told apart from the rest (pure): what a healing cluster answers,
what Spark's source fails a query with, and one log line per episode."""

from __future__ import annotations

import logging
import threading

import pytest
from confluent_kafka import KafkaError, KafkaException
from hypothesis import given
from hypothesis import strategies as st

from service.engine import outage
from service.engine.outage import (
    BEGIN,
    END,
    FIRST_BATCH_S,
    SLOW_BATCH_FACTOR,
    STALL_S,
    Outage,
    ServingWatch,
    backlog_text,
    batch_allowance,
    query_failed_on_kafka,
    refusal_causes,
    stalled_for,
    through_outages,
    trouble,
    watch_decision,
)
from topics.errors import BrewError, KafkaUnavailable
from topics.kafka import TRANSIENT, is_transient

SPARK_FAILURES = [
    "org.apache.kafka.common.errors.TimeoutException: Timeout of 60000ms expired before the position for "
    "partition t.brew.orders.v1-2 could be determined",
    "Caused by: org.apache.kafka.common.errors.NotLeaderOrFollowerException: For requests intended only for the "
    "leader, this error indicates that the broker is not the current leader.",
    "java.util.concurrent.TimeoutException: Cannot fetch record for offset 1234 in 120000 milliseconds",
    "org.apache.kafka.common.errors.DisconnectException: null",
]
OTHER_FAILURES = [
    "PythonException: ValueError: boom",
    "java.lang.IllegalStateException: Cannot call methods on a stopped SparkContext",
    "org.apache.kafka.common.errors.TopicAuthorizationException: Not authorized to access topics",
    "Partition t-0's offset was changed from 10 to 5, some data may have been lost",
]


@pytest.mark.parametrize("code", sorted(TRANSIENT))
def test_every_transient_code_is_transient_and_becomes_kafka_unavailable(code: int) -> None:
    err = KafkaError(code)
    assert is_transient(err)
    found = trouble(KafkaException(err))
    assert isinstance(found, KafkaUnavailable)


@pytest.mark.parametrize("code", [KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.UNKNOWN_TOPIC_OR_PART,
                                  KafkaError._FENCED, KafkaError.INVALID_CONFIG, KafkaError.MSG_SIZE_TOO_LARGE])
def test_errors_that_do_not_heal_are_not_kafka_trouble(code: int) -> None:
    assert not is_transient(KafkaError(code))
    assert trouble(KafkaException(KafkaError(code))) is None


def test_a_fatal_error_is_never_transient_even_when_its_code_is() -> None:
    assert not is_transient(KafkaError(KafkaError._TRANSPORT, fatal=True))


def test_our_own_refusals_and_other_errors_are_not_kafka_trouble() -> None:
    assert trouble(BrewError("the disk is full")) is None
    assert trouble(ValueError("x")) is None
    unavailable = KafkaUnavailable("no leader")
    assert trouble(unavailable) is unavailable


@pytest.mark.parametrize("text", SPARK_FAILURES)
def test_spark_sources_kafka_timeouts_are_kafka_trouble(text: str) -> None:
    assert query_failed_on_kafka("Traceback ...\n" + text + "\n\tat org.apache.spark...")


@pytest.mark.parametrize("text", OTHER_FAILURES)
def test_other_query_failures_are_not(text: str) -> None:
    assert not query_failed_on_kafka(text)


@given(st.text(max_size=300))
def test_the_classifier_is_total(text: str) -> None:
    assert query_failed_on_kafka(text) in (True, False)


def test_an_outage_is_one_line_when_it_starts_and_one_when_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    changes: list[str | None] = []
    outage = Outage(changes.append)
    with caplog.at_level(logging.INFO, logger="brewstream"):
        for _ in range(5):
            outage.begin("partition 2 has no leader")
        outage.end()
        outage.end()
        outage.begin("no broker answers")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert "waiting for the cluster" in lines[0] and "partition 2 has no leader" in lines[0]
    assert lines[1].startswith("Kafka serves again after")
    assert outage.episodes == 2
    assert changes == ["partition 2 has no leader", None, "no broker answers"]


def test_a_step_that_returns_nothing_has_gone_through() -> None:
    """Most steps (starting the lease, warming the query) return None: that is not a stop."""
    stop = threading.Event()
    went, result = through_outages(lambda: None, stop, lambda _reason: True)
    assert (went, result) == (True, None)


def test_kafka_trouble_is_waited_out_and_the_step_done_again() -> None:
    stop = threading.Event()
    calls: list[int] = []
    waits: list[str] = []

    def step() -> int:
        calls.append(1)
        if len(calls) < 3:
            raise KafkaUnavailable("partition 0 has no leader")
        return 7

    assert through_outages(step, stop, lambda reason: waits.append(reason) is None) == (True, 7)
    assert waits == ["partition 0 has no leader"] * 2


def test_a_stop_while_waiting_is_not_a_result() -> None:
    stop = threading.Event()

    def step() -> int:
        raise KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN))

    def wait_out(_reason: str) -> bool:
        stop.set()
        return False

    assert through_outages(step, stop, wait_out) == (False, None)
    stop.clear()
    stop.set()
    assert through_outages(lambda: 1, stop, lambda _r: True) == (False, None)


def test_other_failures_are_raised_at_once() -> None:
    def step() -> None:
        raise BrewError("the disk is full")

    with pytest.raises(BrewError, match="disk is full"):
        through_outages(step, threading.Event(), lambda _r: True)


@pytest.mark.parametrize(("in_episode", "stalled_s", "expected"), [
    (False, 0.0, None),  # counting, or idle: nothing to say
    (False, STALL_S - 0.1, None),  # a batch in flight, not long yet
    (False, STALL_S, BEGIN),
    (True, STALL_S + 30, None),  # said once per episode
    (True, 0.0, END),  # a batch committed, or nothing waits any more
])
def test_what_an_active_instance_says_about_its_progress(in_episode: bool, stalled_s: float,
                                                        expected: str | None) -> None:
    assert watch_decision(in_episode, stalled_s) == expected


@given(st.floats(0, 1e6), st.floats(0, 1e6), st.floats(0, 1e6), st.booleans())
def test_the_stall_counts_from_the_last_commit_or_the_last_time_nothing_waited(
        now: float, committed_at: float, idle_at: float, waiting: bool) -> None:
    stalled = stalled_for(now, committed_at, idle_at, waiting)
    assert stalled >= 0
    if not waiting:
        assert stalled == 0
    elif now >= max(committed_at, idle_at):
        assert stalled == now - max(committed_at, idle_at)


@given(st.dictionaries(st.integers(0, 5), st.integers(0, 10**9)), st.dictionaries(st.integers(0, 5),
                                                                                  st.integers(0, 10**9)))
def test_what_waits_is_every_record_past_the_store_s_offsets(stored: dict[int, int], ends: dict[int, int]) -> None:
    text = backlog_text("orders", stored, ends)
    behind = sum(max(0, e - stored.get(p, 0)) for p, e in ends.items())
    assert (text is None) == (behind == 0)
    if text is not None:
        assert text.startswith(f"{behind} records of orders wait")


class Backlog:
    """What waits for the query, as the test sets it; counts the questions."""

    def __init__(self) -> None:
        self.waiting: str | None = None
        self.asked = 0
        self.closed = False

    def __call__(self) -> str | None:
        self.asked += 1
        return self.waiting

    def close(self) -> None:
        self.closed = True


def test_readiness_follows_progress_not_the_cluster_s_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    """A paused broker goes on being named leader and coordinator, and once its session timed
    out the query's clients may still wait on it: the episode ended after 3 s on the
    metadata's word while no batch committed for half a minute more."""
    now = [100.0]
    monkeypatch.setattr(outage.time, "monotonic", lambda: now[0])
    seq, said = [5], []
    backlog = Backlog()
    watch = ServingWatch(lambda: seq[0], backlog, lambda: None, said.append, lambda: said.append("served"))
    now[0] += 2
    watch.check()
    assert backlog.asked == 0 and said == []  # a commit lately: Kafka is not asked
    now[0] += STALL_S
    watch.check()
    assert backlog.asked == 1 and said == []  # idle: nothing waits, ready
    backlog.waiting = "12 records of orders wait"
    now[0] += STALL_S - 1
    watch.check()
    assert said == []  # waiting, but not that long since it was seen idle
    now[0] += 1
    watch.check()
    assert said == [f"no batch committed for {STALL_S:.0f}s while 12 records of orders wait"] and watch.waiting
    for _ in range(30):  # the cluster's metadata says nothing here: only a commit ends it
        now[0] += 1
        watch.check()
    assert len(said) == 1 and watch.waiting
    seq[0] = 6
    now[0] += 1
    watch.check()
    assert said[-1] == "served" and not watch.waiting


def test_a_stall_is_said_at_once_then_named(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(outage.time, "monotonic", lambda: now[0])
    said: list[str] = []
    backlog = Backlog()
    backlog.waiting = "the end offsets of orders cannot be read (Local: Timed out)"
    cause = "orders partition 1: its leader, node 3, cannot serve it"
    watch = ServingWatch(lambda: 5, backlog, lambda: cause, said.append, lambda: said.append("served"))
    now[0] += STALL_S
    watch.check()
    assert said == [f"no batch committed for {STALL_S:.0f}s while {backlog.waiting}",
                    f"{cause}; no batch committed for {STALL_S:.0f}s"]
    backlog.waiting = None  # the input is idle after all
    now[0] += 1
    watch.check()
    assert said[-1] == "served"
    watch.stop()
    watch.start()  # stopped before its first turn: it only closes its client
    assert watch._thread is not None
    watch._thread.join(5)
    assert backlog.closed


REFUSED = [
    "terminated with exception: org.apache.kafka.common.errors.SaslAuthenticationException: Authentication failed",
    "org.apache.kafka.common.errors.SslAuthenticationException: SSL handshake failed\ncause: org.apache.kafka."
    "common.errors.TimeoutException: Timeout of 60000ms expired before the position for partition t-0 could be "
    "determined",
    "org.apache.kafka.common.errors.TopicAuthorizationException: Not authorized to access topics: [t]",
]


@pytest.mark.parametrize("text", REFUSED)
def test_kafka_refusing_the_source_is_never_waited_out(text: str) -> None:
    """A wrong password or an untrusted certificate is no outage: no wait ends it."""
    assert not query_failed_on_kafka(text)


class _Failed(Exception):
    def __init__(self, text: str, trace: str) -> None:
        super().__init__(text)
        self._stackTrace = trace


def test_a_refused_sources_causes_are_added_and_no_other_failures() -> None:
    trace = ("org.apache.kafka.common.errors.SslAuthenticationException: SSL handshake failed\n\tat x.y(Z.java:1)\n"
             "Caused by: javax.net.ssl.SSLHandshakeException: PKIX path building failed\n\tat a.b(C.java:2)\n")
    refused = _Failed("terminated with exception: org.apache.kafka.common.errors.SslAuthenticationException: SSL "
                      "handshake failed", trace)
    assert refusal_causes(refused) == "\ncause: javax.net.ssl.SSLHandshakeException: PKIX path building failed"
    assert refusal_causes(_Failed("java.io.IOException: No space left on device", trace)) == ""
    assert refusal_causes(ValueError("SaslAuthenticationException: x")) == ""  # no trace: nothing more


def test_a_batch_still_computing_within_its_allowance_is_slow_not_stalled(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cold first batch over a backlog took 5.6 s and was called "Kafka cannot serve this
    instance now"; a batch that outlives its allowance, or no batch at all, still is."""
    now = [100.0]
    monkeypatch.setattr(outage.time, "monotonic", lambda: now[0])
    said: list[str] = []
    backlog = Backlog()
    backlog.waiting = "3000 records of orders wait"
    computing = [True]
    watch = ServingWatch(lambda: 0, backlog, lambda: None, said.append, lambda: said.append("served"),
                         lambda: computing[0])
    for _ in range(20):
        now[0] += 1
        watch.check()
    assert said == [] and not watch.waiting
    computing[0] = False  # past its allowance, or the query stopped planning batches
    now[0] += 1
    watch.check()
    assert said and said[0].startswith("no batch committed for 21s") and watch.waiting


@given(st.one_of(st.none(), st.floats(0, 1e6)))
def test_a_batch_s_allowance(last_batch_s: float | None) -> None:
    allowance = batch_allowance(last_batch_s)
    assert allowance >= STALL_S
    assert allowance == (FIRST_BATCH_S if last_batch_s is None else max(STALL_S, SLOW_BATCH_FACTOR * last_batch_s))
