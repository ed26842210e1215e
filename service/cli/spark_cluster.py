"""``brewstream spark-cluster up|down|status``: a local standalone Spark cluster to try
``--master spark://…`` on (``sandbox.spark_cluster``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from sandbox.spark_cluster import SparkCluster, down, status, up
from service.cli.common import CONTEXT, F


@click.group("spark-cluster", context_settings=CONTEXT)
def spark_cluster() -> None:
    """A local standalone Spark cluster on 127.0.0.1 (a master and N workers from the installed pyspark)."""


def cluster_options(fn: F) -> F:
    for opt in reversed([
        click.option("--port", type=click.IntRange(1, 65535), default=7077, show_default=True,
                     help="The master's port: the cluster's URL is spark://127.0.0.1:PORT."),
        click.option("--ui-port", type=click.IntRange(1, 65535), default=7080, show_default=True,
                     help="The master's web UI and JSON status page (http://127.0.0.1:PORT/json/)."),
        click.option("--workers", type=click.IntRange(1, 64), default=2, show_default=True, help="Workers to run."),
        click.option("--cores", type=click.IntRange(1, 256), default=1, show_default=True,
                     help="Cores each worker offers."),
        click.option("--memory", default="1g", show_default=True,
                     help="Memory each worker offers its executors (like 512m or 2g)."),
        click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=Path(".sandbox/spark"),
                     show_default=True, help="Where the daemons keep their pids, logs and work dirs."),
    ]):
        fn = opt(fn)
    return fn


def _cluster(port: int, ui_port: int, workers: int, cores: int, memory: str, data_dir: Path) -> SparkCluster:
    if port == ui_port:
        raise click.BadParameter("--port and --ui-port must differ")
    return SparkCluster(data_dir, port, ui_port, workers, cores, memory)


@spark_cluster.command("up", context_settings=CONTEXT)
@cluster_options
def cluster_up(**kw: Any) -> None:
    """Start the master and the workers in the background and wait until every worker is ALIVE
    (idempotent: starts only what is not running, stops workers beyond --workers); prints the
    master URL."""
    click.echo(up(_cluster(**kw)))


@spark_cluster.command("down", context_settings=CONTEXT)
@cluster_options
def cluster_down(**kw: Any) -> None:
    """Stop the workers (with their executors) and the master."""
    click.echo(down(_cluster(**kw)))


@spark_cluster.command("status", context_settings=CONTEXT)
@cluster_options
def cluster_status(**kw: Any) -> int:
    """Say whether the master serves and how many workers are ALIVE; exit 1 unless all are."""
    serving, text = status(_cluster(**kw))
    click.echo(text)
    return 0 if serving else 1
