"""The command-line flags that choose where and how Spark runs: --master, --conf and
--min-partitions (for ``run``, ``windows`` and the drills)."""

from __future__ import annotations

import click

from service.cli.common import F
from service.spark.conf import ConfError, defaults_file, defaults_help, parse_conf, read_defaults, resolve_master


def _conf(_ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]) -> dict[str, str]:
    try:
        return parse_conf(value)
    except ConfError as exc:
        raise click.BadParameter(str(exc)) from None


def spark_options(fn: F) -> F:
    fn = click.option(
        "--min-partitions", type=click.IntRange(min=1), default=None,
        help="At least this many Spark tasks per batch (Spark's Kafka minPartitions: a topic partition's "
             "offsets are split between tasks), to keep more executor cores busy than the topic has "
             "partitions.  [default: one task per topic partition]")(fn)
    fn = click.option(
        "--conf", "spark_conf", multiple=True, metavar="KEY=VALUE", callback=_conf,
        help="A Spark setting, as with spark-submit; repeatable (spark.executor.memory=2g, "
             "spark.pyspark.python=/opt/py/bin/python, spark.executorEnv.NAME=…). It wins over "
             "spark-defaults.conf in SPARK_CONF_DIR, which wins over brewstream's defaults: "
             f"{defaults_help()}, parallel GC in spark.driver/executor.defaultJavaOptions (a daemon's driver on a "
             "local master: serial GC, -Xmn64m), "
             "spark.driver.host=127.0.0.1 for local and 127.0.0.1 masters, and for local masters "
             "spark.hadoop.fs.file.impl=brewstream.LocalFiles (Hadoop's local files, permissions set without "
             "forking chmod). spark.jars (on a local master the driver's class path) always carries the "
             "Kafka source; yours are added, and so are your defaultJavaOptions (a collector among them replaces "
             "ours). Executors on a cluster run spark.pyspark.python, else PYSPARK_PYTHON.")(fn)
    return click.option(
        "--master", default=None,
        help="Spark master URL: local[N], spark://host:7077, yarn, k8s://….  [default: spark.master from --conf "
             "or spark-defaults.conf, else local[*]]")(fn)


def master_of(master: str | None, spark_conf: dict[str, str]) -> str:
    """The master a run uses: see --master's help."""
    try:
        return resolve_master(master, spark_conf, read_defaults(defaults_file()))
    except ConfError as exc:
        raise click.BadParameter(str(exc), param_hint="'--master' (or spark.master)") from None


def spark_run_args(master: str | None, spark_conf: dict[str, str], min_partitions: int | None) -> tuple[str, ...]:
    """The same flags again, for a `brewstream run` child process (the drills); a master
    the child would refuse is refused here, before anything starts."""
    master_of(master, spark_conf)
    args = ["--master", master] if master else []
    for key, value in spark_conf.items():
        args += ["--conf", f"{key}={value}"]
    if min_partitions:
        args += ["--min-partitions", str(min_partitions)]
    return tuple(args)
