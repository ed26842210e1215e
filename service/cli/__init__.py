"""The ``brewstream`` command line. Commands are thin: parse flags, call a module, print.

``main`` holds the commands, ``common`` what every command shares (help settings,
durations, the Kafka and topic options), ``spark_options`` the Spark flags of the commands
that start a session, ``spark_cluster`` the local Spark cluster's command, ``board`` the live board's.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> None:
    """The console script: every failure is one line on stderr and a non-zero exit."""
    import sys

    # First, before the imports below: Spark's JVM starts while they run (the module's doc).
    from service.spark.head_start import start_ahead

    start_ahead(sys.argv[1:] if argv is None else argv)
    from service.cli.main import main as run

    run(argv)
