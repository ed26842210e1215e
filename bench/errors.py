"""The one error the harness raises: a run that failed or computed a wrong answer."""


class BenchError(RuntimeError):
    """A scenario could not be measured, or a system produced wrong counts: the run stops."""
