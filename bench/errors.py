"""The one error the harness raises: a run that failed or computed a wrong answer."""


from topics.errors import BrewError


class BenchError(BrewError):
    """A scenario could not be measured, or a system produced wrong counts: the run stops."""
