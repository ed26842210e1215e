"""Spark's JVM started ahead (service.spark.head_start) with the real JVM: a restart of the
same shape runs on it, with its own Spark log and exact counts; a start that fails before it
asks for a session leaves no JVM behind."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.support.drink_count import make_orders
from tests.support.helpers import Pipeline, brew, counts_json, oracle, order_bytes, produce
from topics.clock import wait_until

pytestmark = pytest.mark.spark

STARTED_AHEAD = "Spark's JVM was started ahead"


def catch_up(pipe: Pipeline, d: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    done = brew(pipe.conn, "--log-level", "debug", "run", "--available-now", "--state-dir", str(d / "state"),
                "--checkpoint-dir", str(d / "ckpt"), env={**pipe.env, **(env or {})})
    return done.returncode, done.stderr


def with_variable(text: bytes) -> list[int]:
    """Processes whose environment holds ``text``."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if text in environ.read_bytes():
                found.append(int(environ.parent.name))
        except OSError:
            continue
    return found


def test_a_start_runs_on_the_jvm_started_ahead_from_the_last_start_of_its_shape(pipe: Pipeline,
                                                                               tmp_path: Path) -> None:
    orders = make_orders(40, seed=5)
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in orders))
    code, err = catch_up(pipe, tmp_path / "first")
    assert code == 0, err[-3000:]

    # Another state dir, the same flags: the JVM the first start ran is started before the
    # command line's imports, and taken.
    code, err = catch_up(pipe, tmp_path / "second")
    assert code == 0, err[-3000:]
    assert STARTED_AHEAD in err, err[-3000:]
    # Spark's log is told to the JVM once taken (jvm_output.log_to): its file is this state dir's.
    assert (tmp_path / "second" / "state" / "spark.log").exists()
    assert counts_json(pipe.conn, tmp_path / "second" / "state")["counts"] == oracle(orders)


def test_a_start_that_fails_before_its_session_stops_the_jvm_started_ahead(pipe: Pipeline, tmp_path: Path) -> None:
    code, err = catch_up(pipe, tmp_path / "first")
    assert code == 0, err[-3000:]
    mark = f"BREWSTREAM_TEST_MARK={uuid.uuid4().hex}"
    name, value = mark.split("=")
    # Topics that do not exist: refused before any session, after its JVM was started ahead.
    code, err = catch_up(pipe, tmp_path / "second", env={"BREWSTREAM_TOPIC_PREFIX": "no-such-prefix.", name: value})
    assert code != 0
    assert STARTED_AHEAD not in err and "stopped the JVM started ahead" in err, err[-3000:]
    wait_until(lambda: not with_variable(mark.encode()), 30, "no process left from the refused start")
