"""Clean stops: SIGINT and SIGTERM end long loops instead of killing them."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT/SIGTERM, so long loops end cleanly instead of dying; the
    previous handlers come back afterwards."""
    stop = threading.Event()

    def handler(_signum: int, _frame: object) -> None:
        # Set from another thread: Event.set takes a lock, and a second signal landing
        # while this handler holds it (`timeout` signals the process and its group, a
        # double Ctrl+C) would run the handler again on the same thread and wait for
        # that lock forever.
        threading.Thread(target=stop.set, name="stop-signal", daemon=True).start()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class Terminated(BaseException):
    """SIGTERM where no loop of ours listens for it (see ``terminate_by_exception``).
    A BaseException, like KeyboardInterrupt, so ``except Exception`` cannot swallow it."""


def raised_by_signal(exc: BaseException) -> BaseException | None:
    """The ``Terminated`` or ``KeyboardInterrupt`` a signal handler raised while a C
    function ran Python code of its own (a key's ``__eq__``, a finalizer): CPython then
    reports ``SystemError: … returned a result with an exception set``, the handler's
    exception as its cause. None for any other exception."""
    seen: set[int] = set()
    while isinstance(exc, SystemError) and id(exc) not in seen:
        seen.add(id(exc))
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, Terminated | KeyboardInterrupt):
            return cause
        if cause is None:
            return None
        exc = cause
    return None


def terminate_by_exception() -> None:
    """SIGTERM raises ``Terminated`` instead of ending the process at once, so the
    `finally` blocks (store, lock, lease, HTTP server) run: start-up, one-shot commands,
    the unwinding after a loop. ``stop_on_signals`` takes over inside long loops and puts
    this handler back when it ends."""
    def handler(_signum: int, _frame: object) -> None:
        raise Terminated

    signal.signal(signal.SIGTERM, handler)
