"""stop_session: the session stops without waiting on pyspark's accumulator server.

pyspark's own stop shuts that server down and waits, up to a second, for the thread that
serves it (see ``service.spark.session._take_accumulator_server``). A fake session stands
in for pyspark here: what is checked is the order of calls, not a time."""

from __future__ import annotations

import io
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from service.spark.session import stop_session
from topics.clock import wait_until


class _Server:
    """An accumulator server whose shutdown blocks until the test lets it go."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.shut = threading.Event()

    def shutdown(self) -> None:
        # A bounded wait, so that a stop that does wait on it fails the test instead of hanging.
        if self.release.wait(5.0):
            self.shut.set()


class _Context:
    def __init__(self, server: _Server | None, gateway: Any = None) -> None:
        self._accumulatorServer = server
        if gateway is not None:
            self._gateway = gateway


class _Session:
    def __init__(self, server: _Server | None, gateway: Any = None) -> None:
        self._sc = _Context(server, gateway)
        self.server_at_stop: Any = "not stopped"

    def stop(self) -> None:
        # pyspark's stop waits on whatever server the context still holds.
        self.server_at_stop = self._sc._accumulatorServer
        if self.server_at_stop is not None:
            self.server_at_stop.shutdown()


def _call(stop: Any) -> None:
    stop()


def test_stop_returns_while_the_accumulator_server_is_still_shutting_down() -> None:
    server = _Server()
    session = _Session(server)
    stop_session(session, _call)  # type: ignore[arg-type]
    assert session.server_at_stop is None  # pyspark's stop had nothing to wait for
    assert not server.shut.is_set()
    server.release.set()
    wait_until(server.shut.is_set, 4.0, "the accumulator server to be shut down")


def test_a_session_without_an_accumulator_server_stops() -> None:
    session = _Session(None)
    stop_session(session, _call)  # type: ignore[arg-type]
    assert session.server_at_stop is None


class _Jvm:
    """A launched JVM: it exits once its stdin is closed."""

    def __init__(self) -> None:
        self.stdin = io.BytesIO()
        self.waited = False

    def poll(self) -> int | None:
        return 0 if self.stdin.closed else None

    def wait(self, timeout: float) -> int:
        self.waited = True
        assert self.stdin.closed, "waited on a JVM that was never told to exit"
        return 0


def test_the_stopped_sessions_own_jvm_is_ended_and_waited_for() -> None:
    jvm = _Jvm()
    stop_session(_Session(None, SimpleNamespace(proc=jvm)), _call)  # type: ignore[arg-type]
    assert jvm.stdin.closed and jvm.waited


def test_no_other_jvm_is_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    """A session of another JVM (or none) leaves this process's gateway alone, whatever it is."""
    from pyspark import SparkContext

    other = _Jvm()
    monkeypatch.setattr(SparkContext, "_gateway", SimpleNamespace(proc=other), raising=False)
    stop_session(_Session(None), _call)  # type: ignore[arg-type]
    assert not other.stdin.closed and not other.waited


class _Gateway:
    """pyspark's gateway to a launched JVM: py4j's server in it is shut down, or fails to be."""

    def __init__(self, jvm: _Jvm, fails: bool = False) -> None:
        self.proc, self.fails = jvm, fails
        self.jvm_running_at_shutdown: bool | None = None

    def shutdown(self) -> None:
        self.jvm_running_at_shutdown = not self.proc.stdin.closed
        if self.fails:
            raise ConnectionResetError("the JVM closed the connection")


def test_py4j_s_server_is_shut_before_the_jvm_is_told_to_exit() -> None:
    """Java's exit waits up to 300 ms for threads inside a native call, and py4j's are
    (``service.spark.session._shut_gateway``): they go first."""
    jvm = _Jvm()
    gateway = _Gateway(jvm)
    stop_session(_Session(None, gateway), _call)  # type: ignore[arg-type]
    assert gateway.jvm_running_at_shutdown is True
    assert jvm.stdin.closed and jvm.waited


def test_a_gateway_that_fails_to_shut_still_ends_its_jvm() -> None:
    jvm = _Jvm()
    gateway = _Gateway(jvm, fails=True)
    stop_session(_Session(None, gateway), _call)  # type: ignore[arg-type]
    assert gateway.jvm_running_at_shutdown is True
    assert jvm.stdin.closed and jvm.waited
