"""stop_session: the session stops without waiting on pyspark's accumulator server.

pyspark's own stop shuts that server down and waits, up to a second, for the thread that
serves it (see ``service.spark.session._take_accumulator_server``). A fake session stands
in for pyspark here: what is checked is the order of calls, not a time."""

from __future__ import annotations

import threading
from typing import Any

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
    def __init__(self, server: _Server | None) -> None:
        self._accumulatorServer = server


class _Session:
    def __init__(self, server: _Server | None) -> None:
        self._sc = _Context(server)
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
