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


def test_a_signal_raised_inside_a_c_function_is_still_that_signal() -> None:
    from hypothesis import given
    from hypothesis import strategies as st

    from service.instance.signals import Terminated, raised_by_signal

    @given(st.integers(0, 4), st.sampled_from(["term", "int", "other", "none"]))
    def check(depth: int, root: str) -> None:
        base: BaseException | None = {"term": Terminated(), "int": KeyboardInterrupt(), "other": ValueError(),
                                      "none": None}[root]
        exc: BaseException | None = base
        for _ in range(depth + 1):  # CPython's SystemError, the handler's exception as its cause
            wrapper = SystemError("<method 'pop' of 'dict' objects> returned a result with an exception set")
            wrapper.__cause__ = exc
            exc = wrapper
        assert exc is not None
        assert raised_by_signal(exc) is (base if root in ("term", "int") else None)
        assert raised_by_signal(ValueError()) is None and raised_by_signal(Terminated()) is None

    check()


WRAPPED = """
import service.cli.main as m

def wrapped(**_kw):
    try:
        raise m.Terminated
    except m.Terminated as handler_raised:
        raise SystemError("<method 'pop' of 'dict' objects> returned a result with an exception set") \\
            from handler_raised

m.cli.main = wrapped
m.main(["status"])
"""


def test_the_cli_ends_such_a_sigterm_as_any_sigterm() -> None:
    proc = subprocess.run([sys.executable, "-c", WRAPPED], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 143 and proc.stderr.strip() == "brewstream: stopped by SIGTERM", proc.stderr
