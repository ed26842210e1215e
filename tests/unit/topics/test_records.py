"""Records that must fit a topic, bad records on their way to the driver, and key placement."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from hypothesis import given, settings
from hypothesis import strategies as st

from service.records.badrecords import CarryBudget, carry
from topics import records
from topics.partitioner import murmur2, murmur2_partition
from topics.records import KEY_KEEP, RECORD_OVERHEAD, call_until, fit_record, is_fatal

HEADERS = [("error", b"not JSON"), ("source-topic", b"brew.orders.v1"), ("source-partition", b"1"),
           ("source-offset", b"7")]


def test_murmur2_matches_the_java_client() -> None:
    # Vectors from Kafka's own UtilsTest.
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107
    assert all(0 <= murmur2_partition(k, 3) < 3 for k in (b"", b"latte", bytes([255] * 9)))


def test_a_record_that_fits_is_untouched() -> None:
    assert fit_record(b"k", b"v" * 100, HEADERS, 10_000) == (b"k", b"v" * 100, HEADERS)


def test_a_big_value_is_cut_and_says_so() -> None:
    key, value, headers = fit_record(b"k", b"v" * 50_000, HEADERS, 10_000)
    assert key == b"k" and value is not None
    assert len(value) < 10_000 and value == b"v" * len(value)
    extra = dict(headers[len(HEADERS):])
    assert extra == {"truncated": b"value", "original-size": b"50000"}


def test_a_big_key_is_cut_too() -> None:
    key, _value, headers = fit_record(b"k" * 20_000, b"v" * 50_000, HEADERS, 10_000)
    assert key == b"k" * KEY_KEEP
    assert dict(headers)["truncated"] == b"key,value" and dict(headers)["original-key-size"] == b"20000"


@settings(max_examples=300, deadline=None)
@given(key=st.one_of(st.none(), st.binary(max_size=5000)), value=st.one_of(st.none(), st.binary(max_size=30_000)),
       limit=st.integers(RECORD_OVERHEAD + 2 * KEY_KEEP, 40_000))
def test_fitted_records_fit_and_keep_a_prefix(key: bytes | None, value: bytes | None, limit: int) -> None:
    """After the executor's cut and the driver's fit, the record fits and holds a prefix of
    the original bytes, with the original sizes in its headers whenever anything was cut."""
    ck, cv = carry(key, value, limit)
    fk, fv, headers = fit_record(ck, cv, HEADERS, limit, len(key or b""), len(value or b""))
    size = len(fk or b"") + len(fv or b"") + sum(len(k) + len(v) for k, v in headers)
    assert size <= limit - RECORD_OVERHEAD + 200  # the headers fit_record adds are small
    assert (fk is None) == (key is None) and (fv is None) == (value is None)
    assert (key or b"").startswith(fk or b"") and (value or b"").startswith(fv or b"")
    cut = dict(headers).get("truncated")
    assert (cut is not None) == (fk != key or fv != value)
    if cut is not None:
        assert dict(headers)["original-size"] == str(len(value or b"")).encode()


def test_a_task_carries_its_budget_then_positions_only() -> None:
    budget = CarryBudget(100)
    assert budget.take(b"k", b"v" * 60) and budget.take(None, b"v" * 60)
    assert not budget.take(b"k", b"v")


def test_a_bare_fatal_error_counts_as_fatal_like_its_cause() -> None:
    assert is_fatal(KafkaError(KafkaError._FATAL))  # what ``produce`` says once the cause was served
    assert is_fatal(KafkaError(KafkaError._FENCED, fatal=True))
    assert not is_fatal(KafkaError(KafkaError._MSG_TIMED_OUT))
    assert not is_fatal(KafkaError(KafkaError.INVALID_PRODUCER_EPOCH))


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records, "RETRY_PAUSE_S", 0.0)


ANSWERS = {
    "retry": KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True),
    "abort": KafkaError(KafkaError.INVALID_PRODUCER_EPOCH, "epoch bumped", txn_requires_abort=True),
    "retry-but-abort": KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True, txn_requires_abort=True),
    "fatal": KafkaError(KafkaError._FATAL, "fatal", fatal=True, retriable=True),
    "refused": KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "not allowed"),
}


@given(st.lists(st.sampled_from(["ok", *ANSWERS]), max_size=8), st.booleans())
def test_call_until_asks_again_only_past_retriable_errors(answers: list[str], past_deadline: bool) -> None:
    """Oracle: before the deadline, every plain retriable answer is asked past; the first other
    answer ends it (returns on ok, raises that very error otherwise). Past the deadline, one
    call. Never a call after the answer that ends it."""
    asked: list[str] = []

    def call(left: float) -> None:
        assert left >= 1.0
        answer = answers[len(asked)] if len(asked) < len(answers) else "ok"
        asked.append(answer)
        if answer != "ok":
            raise KafkaException(ANSWERS[answer])

    deadline = 0.0 if past_deadline else float("inf")
    ending = next((i for i, a in enumerate(answers) if a != "retry"), len(answers))
    if past_deadline:
        ending = 0
    final = answers[ending] if ending < len(answers) else "ok"
    if final == "ok":
        call_until(call, deadline)
    else:
        with pytest.raises(KafkaException) as raised:
            call_until(call, deadline)
        assert raised.value.args[0] is ANSWERS[final]
    assert len(asked) == ending + 1
