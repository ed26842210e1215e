"""A call repeated on a daemon thread: the board, the windows table, the metrics refresher,
the benchmark's samplers."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Every:
    """Runs ``fn`` every ``interval_s`` until stopped, and ``first`` once as the thread starts.
    A failing call is logged and the next one still comes: what runs here must never take
    the daemon down."""

    def __init__(self, interval_s: float, fn: Callable[[], object], name: str,
                 first: Callable[[], object] | None = None) -> None:
        self.interval_s, self.fn, self.name, self.first = interval_s, fn, name, first
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        if self.first is not None:
            self._call(self.first)
        while not self._stop.wait(self.interval_s):
            self._call(self.fn)

    def _call(self, fn: Callable[[], object]) -> None:
        call_logged(fn, self.name, self.interval_s)


def call_logged(fn: Callable[[], object], name: str, next_in_s: float) -> None:
    """Call ``fn`` on a thread that must outlive its failures: a failure is one warning
    line (its traceback at debug), and the caller goes on to its next round."""
    try:
        fn()
    except Exception as exc:
        log.warning("%s failed (%s: %s); next attempt in %.1fs", name, type(exc).__name__,
                    str(exc).splitlines()[0][:200] if str(exc) else "", next_in_s)
        log.debug("%s failure", name, exc_info=True)
