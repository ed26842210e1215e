"""A second signal while the first one is being handled must not hang the process."""

import subprocess
import sys

PROBE = """
import os, signal, time
from service.instance.signals import stop_on_signals

with stop_on_signals() as stop:
    # Hold the event's lock as a first handler does inside Event.set, and let a second
    # signal's handler run right there, on the same thread.
    with stop._cond:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)
    assert stop.wait(5), "the event was never set"
print("stopped")
"""


def test_a_signal_landing_inside_the_handler_does_not_deadlock() -> None:
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and proc.stdout.strip() == "stopped", proc.stderr
