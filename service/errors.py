"""The one error type the CLI turns into a one-line message and a non-zero exit."""


class BrewError(Exception):
    """A failure the user can act on; its message says what to do next."""


class SinkClosed(RuntimeError):
    """Raised for a batch that arrives while the daemon shuts down: Spark must not commit it."""
