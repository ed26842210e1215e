"""Spark settings the Spark way: ``--conf KEY=VALUE`` over ``spark-defaults.conf`` over
brewstream's own defaults.

pyspark's launcher (spark-submit) reads ``spark-defaults.conf`` from ``SPARK_CONF_DIR``
(or ``$SPARK_HOME/conf``) when the JVM starts, but every setting the session builder
passes is handed over as a ``--conf`` and wins over the file. So brewstream reads the
file itself and leaves out each of its defaults whose key the file sets; the user's
``--conf`` settings are passed last and win over both. Pure, apart from reading the file.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

# brewstream's defaults: each applies only where neither --conf nor spark-defaults.conf
# sets its key. ``service.spark.session`` adds the Java options, and the driver's address
# for masters on this machine.
DEFAULTS: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # Batches here are small aggregates: a handful of shuffle partitions is plenty.
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.streaming.stopGracefullyOnShutdown": "false",
    "spark.python.worker.reuse": "true",
    # Adaptive execution does not apply to streaming queries; Spark warns on every start.
    "spark.sql.adaptive.enabled": "false",
    # Rows reach the Python workers as Arrow batches of 10,000 rows; ten thousand 1 MB
    # records would be a 10 GB batch. Cut a batch at 32 MiB too (whichever comes first).
    "spark.sql.execution.arrow.maxBytesPerBatch": str(32 * 1024 * 1024),
    # Every batch writes two small files to the checkpoint (its offsets, then its commit).
    # Through the FileSystem API they take a fraction of what Hadoop's FileContext API
    # takes on the local disk the checkpoint is always on, .crc files kept (docs/performance-notes.md,
    # "Where a small batch's time goes outside the batch function"). That manager needs
    # atomic renames, which a local disk has, and a single writer: the active instance.
    "spark.sql.streaming.checkpointFileManagerClass":
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    # With no trigger interval (engine.defaults) a query with nothing to do asks Kafka for the
    # latest offsets again after this pause: Spark's 10 ms kept an idle daemon busy asking
    # (docs/production/sizing.md, "CPU").
    "spark.sql.streaming.pollingDelay": "50ms",
}
# Settings whose value is a list: brewstream's entries come first and the user's are
# added, never replaced (spark.jars, or the driver's class path on a local master, carries
# the Kafka source, which every query needs).
JARS_KEY = "spark.jars"
DRIVER_CLASS_PATH_KEY = "spark.driver.extraClassPath"
LISTS: dict[str, str] = {JARS_KEY: ",", DRIVER_CLASS_PATH_KEY: os.pathsep}
# Java options: brewstream's first (the driver's carry the log set-up that every error
# points to), then the user's, which replace the file's the Spark way (see ``java_options``).
DRIVER_JAVA_KEY = "spark.driver.defaultJavaOptions"
EXECUTOR_JAVA_KEY = "spark.executor.defaultJavaOptions"
_COLLECTOR = re.compile(r"-XX:\+Use\w*GC")
# The executors' Python (see ``executor_python``).
PYTHON_KEY = "spark.pyspark.python"
# The driver's own class path entries (``driver_class_path``).
DRIVER_CLASS_PATH_KEYS = ("spark.driver.defaultExtraClassPath", DRIVER_CLASS_PATH_KEY)
MASTER_KEY = "spark.master"
LOCAL_MASTER = "local[*]"
_LOOPBACK = re.compile(r"^(127\.\d+\.\d+\.\d+|localhost|\[::1\])$")


class ConfError(ValueError):
    """A --conf that is not KEY=VALUE with a Spark key; the message says which."""


def parse_conf(pairs: Iterable[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings (spark-submit's ``--conf``) as a dict; a later key wins."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep:
            raise ConfError(f"{pair!r} is not KEY=VALUE")
        if not key:
            raise ConfError(f"{pair!r} has an empty key")
        if not key.startswith("spark."):
            raise ConfError(f"{key!r} is not a Spark setting (keys start with 'spark.')")
        out[key] = value
    return out


def conf_dir(env: Mapping[str, str] | None = None) -> Path:
    """The folder spark-submit takes its configuration from (it need not exist)."""
    env = os.environ if env is None else env
    if env.get("SPARK_CONF_DIR"):
        return Path(env["SPARK_CONF_DIR"])
    if env.get("SPARK_HOME"):
        return Path(env["SPARK_HOME"]) / "conf"
    return _pyspark_home() / "conf"


def spark_home_problem(version: str, env: Mapping[str, str] | None = None) -> str | None:
    """What is wrong with ``SPARK_HOME`` for a pyspark of ``version``, if anything. pyspark
    launches the Spark it names instead of its own, and one without spark-submit fails with
    a missing file, one of another version with errors from deep inside py4j."""
    env = os.environ if env is None else env
    if "SPARK_HOME" not in env:
        return None
    fix = f"unset SPARK_HOME to use pyspark's own Spark, or point it at a Spark {version} installation"
    if not env["SPARK_HOME"]:
        # pyspark trusts any SPARK_HOME it finds set, an empty one too (the current folder).
        return f"SPARK_HOME is set but empty: {fix}"
    home = Path(env["SPARK_HOME"])
    if not (home / "bin" / "spark-submit").is_file():
        return f"SPARK_HOME={home} holds no bin/spark-submit: {fix}"
    cores = sorted((home / "jars").glob("spark-core_*.jar"))
    found = [m.group(1) for c in cores if (m := re.fullmatch(r"spark-core_[\d.]+-(.+)\.jar", c.name))]
    if found and version not in found:
        return f"SPARK_HOME={home} is Spark {found[0]}, but brewstream runs on pyspark {version}: {fix}"
    return None


def defaults_file(env: Mapping[str, str] | None = None) -> Path | None:
    """The spark-defaults.conf spark-submit would read for this process, if there is one."""
    path = conf_dir(env) / "spark-defaults.conf"
    return path if path.is_file() else None


def driver_class_path(settings: Mapping[str, str], env: Mapping[str, str] | None = None) -> list[Path]:
    """The driver JVM's class path as Spark's launcher builds it
    (``AbstractCommandBuilder.buildClassPath``), less Spark's own jars: the driver's
    (default) extra class path, the configuration folder, ``HADOOP_CONF_DIR``, ``YARN_CONF_DIR`` and
    ``SPARK_DIST_CLASSPATH``. Entries ending in ``*`` (the jars in a folder) are left out."""
    env = os.environ if env is None else env
    entries = [e for key in DRIVER_CLASS_PATH_KEYS for e in settings.get(key, "").split(os.pathsep)]
    entries.append(str(conf_dir(env)))
    for name in ("HADOOP_CONF_DIR", "YARN_CONF_DIR", "SPARK_DIST_CLASSPATH"):
        entries += env.get(name, "").split(os.pathsep)
    return [Path(e) for e in entries if e.strip() and not e.endswith("*")]


def read_defaults(path: Path | None) -> dict[str, str]:
    """The Spark settings of a spark-defaults.conf (Java properties: ``key value``,
    ``key=value`` or ``key: value``; ``#`` and ``!`` start comments). Like Spark, only
    keys starting with ``spark.`` count."""
    if path is None:
        return {}
    out: dict[str, str] = {}
    for raw in path.read_text(errors="replace").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        m = re.match(r"^([^\s=:]+)\s*[\s=:]\s*(.*)$", line)
        key, value = (m.group(1), m.group(2).strip()) if m else (line, "")
        if key.startswith("spark."):
            out[key] = value
    return out


def merged(ours: Mapping[str, str], from_file: Mapping[str, str], user: Mapping[str, str]) -> dict[str, str]:
    """What the session builder passes: ours where nobody set the key, the user's always,
    and list settings joined (ours, then the file's, then the user's)."""
    out = {k: v for k, v in ours.items() if k not in from_file and k not in user}
    out.update(user)
    for key, sep in LISTS.items():
        parts = [v for v in (ours.get(key), from_file.get(key), user.get(key)) if v]
        if parts:
            out[key] = sep.join(parts)
    return out


def their_java_options(key: str, from_file: Mapping[str, str], user: Mapping[str, str]) -> str:
    """The Java options the user sets under ``key``: --conf's (even an empty one), else the file's."""
    return (user[key] if key in user else from_file.get(key, "")).strip()


def java_options(ours: str, theirs: str) -> str:
    """What the JVM gets: ours, then theirs; of two options that set the same thing the
    JVM takes the later, theirs. A collector of theirs must replace ours (``picks_collector``)."""
    return " ".join(o for o in (ours.strip(), theirs.strip()) if o)


def picks_collector(java_options: str) -> bool:
    """Whether the options choose a garbage collector: the JVM refuses to start with two,
    so brewstream's own choice then gives way."""
    return any(_COLLECTOR.fullmatch(option) for option in java_options.split())


def resolve_master(flag: str | None, user: Mapping[str, str], from_file: Mapping[str, str]) -> str:
    """--master, else spark.master from --conf or spark-defaults.conf, else local[*].
    ``ConfError`` for a URL spark-submit would refuse, before a JVM is started for it."""
    master = flag or user.get(MASTER_KEY) or from_file.get(MASTER_KEY) or LOCAL_MASTER
    if not (master == "yarn" or master.startswith(("local", "spark://", "k8s://"))):
        raise ConfError(f"{master!r} is not a Spark master URL: use local[N], local[*], spark://HOST:PORT, yarn "
                        "or k8s://URL")
    return master


def is_local(master: str) -> bool:
    return master.startswith("local")


def is_loopback(master: str) -> bool:
    """A spark:// master whose every host is this machine's loopback (a local sandbox cluster)."""
    if not master.startswith("spark://"):
        return False
    hosts = [h.rsplit(":", 1)[0] for h in master.removeprefix("spark://").split(",")]
    return all(_LOOPBACK.match(h) for h in hosts)


def executor_python(master: str, from_file: Mapping[str, str], user: Mapping[str, str],
                    env: Mapping[str, str] | None = None) -> str | None:
    """The Python the executors run. A local master's executors are this process's own
    threads and their Python workers import brewstream as installed here: this
    interpreter. Elsewhere the user's choice: spark.pyspark.python (--conf, then the
    file), else PYSPARK_PYTHON; None leaves Spark's default (python3 on the executor's PATH)."""
    if is_local(master):
        return sys.executable
    env = os.environ if env is None else env
    return user.get(PYTHON_KEY) or from_file.get(PYTHON_KEY) or env.get("PYSPARK_PYTHON") or None


def defaults_help() -> str:
    """brewstream's defaults, for --help."""
    return ", ".join(f"{k}={v}" for k, v in DEFAULTS.items())


def _pyspark_home() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    return Path(spec.origin).parent if spec is not None and spec.origin else Path("/nonexistent")
