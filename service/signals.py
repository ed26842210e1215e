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
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
