"""The seed's windows table, and the thread that prints it every --print interval."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import datetime
from typing import TextIO

from restorer.store import Store
from service.instance.periodic import Every
from service.windows.state import LATE, NO_HEADER, TOTAL, WindowsState, decode_windows_state


def table_text(now: datetime, state: WindowsState, rows: int, window_ns: int, state_keys: int) -> str:
    """``[HH:MM:SS] total=N late=M no-header=K watermark=HH:MM:SS`` and the last windows."""
    wm = state.watermark_ns
    wm_text = f"{datetime.fromtimestamp(wm / 1e9):%H:%M:%S}" if wm is not None else "--:--:--"
    lines = [f"[{now:%H:%M:%S}] total={state.counter(TOTAL)} late={state.counter(LATE)} "
             f"no-header={state.counter(NO_HEADER)} watermark={wm_text} state={state_keys} keys",
             f"{'WINDOW':<9}{'BY EVENT-TIME':>14}{'BY PROCESSING-TIME':>20}{'DIFF':>8}"]
    label = "%H:%M" if window_ns % (60 * 10**9) == 0 else "%H:%M:%S"
    for start in sorted(set(state.by_event) | set(state.by_processing))[-rows:]:
        by_event, by_proc = state.by_event.get(start, 0), state.by_processing.get(start, 0)
        lines.append(f"{datetime.fromtimestamp(start / 1e9).strftime(label):<9}{by_event:>14}{by_proc:>20}"
                     f"{by_event - by_proc:>+8}")
    lines.append("---")
    return "\n".join(lines)


class WindowsReporter:
    """Every interval: let the sink close windows of a quiet stream, then print the table."""

    def __init__(self, store: Store, tick: Callable[[], None], interval_s: float, rows: int, window_ns: int,
                 out: TextIO = sys.stdout) -> None:
        self.store, self.tick, self.interval_s = store, tick, interval_s
        self.rows, self.window_ns, self.out = rows, window_ns, out
        self._every = Every(interval_s, self._tick_and_print, "windows table")

    def start(self) -> None:
        self._every.start()

    def stop(self, final_flush: bool = True) -> None:
        self._every.stop()
        if final_flush:
            self.print_table()

    def _tick_and_print(self) -> None:
        self.tick()
        self.print_table()

    def print_table(self) -> None:
        entries = list(self.store.items())
        state = decode_windows_state(entries)
        print(table_text(datetime.now(), state, self.rows, self.window_ns, len(entries)), file=self.out, flush=True)
