"""Spark's driver JVM started without spark-submit's scripts, from a command kept from the last
start with the same inputs.

pyspark starts its JVM as ``bin/spark-submit --conf … pyspark-shell``: a bash script that
exports ``PYTHONHASHSEED=0`` and runs ``bin/spark-class``, which sources
``load-spark-env.sh`` (the conf folder's ``spark-env.sh``, the Scala version), then starts a
*launcher* JVM (``org.apache.spark.launcher.Main``) only to print the real command (class
path, memory, Java options, the module flags Java 17 needs) and ``exec``\\ s it. The scripts
and the launcher are about 0.35 s of CPU and wall before the driver's JVM even starts, on
every start, for a command that depends only on what goes in.

So this module does what those scripts do, in this process: the same environment, the
launcher run once for a given set of inputs, its command kept in the JVM cache folder
(``cache_files.cache_dir``) under a digest of everything the launcher reads (the arguments,
every ``SPARK_*``, ``PYSPARK_*``, ``JAVA_*``, ``HADOOP_*`` and ``YARN_*`` variable,
spark-defaults.conf, the java binary, Spark's jars), and the driver started from it
directly. Whenever the scripts would do something this module does not (a
``spark-env.sh`` to source, no java to find, a launcher that refuses the arguments), the
scripts run as before, and say what is wrong in their own words.

One thing it does differently: the driver's class path names Spark's jars one by one
(``service.spark.driver_jars``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shlex
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from service.spark import driver_jars, head_start, jvm_archive
from service.spark.cache_files import cache_dir, keep_text
from service.spark.jvm_output import SPARK_LOG_ENV, log_to

log = logging.getLogger("brewstream")

LAUNCHER_CLASS = "org.apache.spark.launcher.Main"
SUBMIT_CLASS = "org.apache.spark.deploy.SparkSubmit"
# The prefixes of every variable Spark's launcher (or a spark-env.sh it would source) reads.
_READ_BY_LAUNCHER = ("SPARK_", "PYSPARK_", "JAVA_", "HADOOP_", "YARN_", "_SPARK")
# pyspark's own, new at every start, and read only by the driver once it runs.
_PER_START = (head_start.CONN_INFO_ENV,)
_KEPT = 64  # commands kept; the oldest beyond that are removed
_SCALA = re.compile(r"^\s*export SPARK_SCALA_VERSION=([\w.]+)\s*$", re.M)


@contextmanager
def started_directly() -> Iterator[None]:
    """While pyspark launches its gateway inside this block, its ``spark-submit`` is started
    as the driver's JVM command itself (see the module's doc), or the JVM started ahead with
    that command is taken (``service.spark.head_start``)."""
    import pyspark.core.context as context
    import pyspark.java_gateway as gateway

    popen, launch = gateway.Popen, context.launch_gateway
    ahead = False  # the JVM is the one started ahead

    def direct(command: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        nonlocal ahead
        env = kwargs.get("env")
        java = driver_command(list(command), env) if env is not None else None
        proc = head_start.adopt(java, env) if java is not None and env is not None else None
        ahead = proc is not None
        if proc is None:
            head_start.discard()
            proc = popen(command if java is None else java, **kwargs)
            if java is not None and env is not None:
                head_start.remember(java, env)
        if env is not None and head_start.CONN_INFO_ENV in env:
            # Goes on as soon as the JVM serves; pyspark itself then says if it exited.
            head_start.gateway_served(proc, env[head_start.CONN_INFO_ENV])
        return proc

    def launched(*args: Any, **kwargs: Any) -> Any:
        started = launch(*args, **kwargs)
        log_file = os.environ.get(SPARK_LOG_ENV)
        if ahead and log_file:
            # Started before this start knew its state dir: told now, before Spark's
            # context (and its first warnings) starts.
            log_to(started.jvm, log_file)
        return started

    setattr(gateway, "Popen", direct)  # noqa: B010 - pyspark's module-level name, for this block only
    setattr(context, "launch_gateway", launched)  # noqa: B010
    try:
        yield
    finally:
        setattr(gateway, "Popen", popen)  # noqa: B010
        setattr(context, "launch_gateway", launch)  # noqa: B010


def driver_command(command: list[str], env: dict[str, str]) -> list[str] | None:
    """The driver JVM's command for pyspark's ``spark-submit`` ``command``, with ``env``
    (pyspark's, changed in place) set as the scripts would set it; None when the scripts
    must run themselves. Never raises: any surprise falls back to the scripts."""
    try:
        submit = Path(command[0])
        if submit.name != "spark-submit":
            return None
        home = Path(env.get("SPARK_HOME") or submit.parent.parent)
        folder = Path(env.get("SPARK_CONF_DIR") or home / "conf")  # load-spark-env.sh's choice
        scala = _SCALA.search((home / "bin" / "load-spark-env.sh").read_text())
        java = jvm_archive.java_binary(env)
        if scala is None or java is None or (folder / "spark-env.sh").exists():
            return None
        # What spark-submit, find-spark-home and load-spark-env.sh export, set only when the
        # driver is started here (otherwise the scripts set them themselves).
        exported = {"SPARK_HOME": str(home), "PYTHONHASHSEED": "0", "SPARK_ENV_LOADED": "1",
                    "SPARK_CONF_DIR": str(folder), "SPARK_SCALA_VERSION": scala.group(1)}
        full, args = {**env, **exported}, command[1:]
        cache = cache_dir()
        kept = None if cache is None else cache / "launch" / f"{_digest(args, full, java, home, folder)}.json"
        copies = None if cache is None else cache / "jars"
        built = _kept(kept, copies) if kept is not None else None
        if built is None:
            built = _run_launcher(java, home, args, full)
            if built is not None:
                jars = home / "jars"
                built = driver_jars.named(built, jars, driver_jars.listed(jars), driver_jars.unsigned_copy(copies))
            if built is not None and kept is not None:
                _keep(kept, built)
        if built is not None:
            env.update(exported)
        return built
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        log.debug("starting Spark's JVM through spark-submit", exc_info=True)
        return None


def _kept(path: Path, copies: Path | None) -> list[str] | None:
    """The command kept at ``path``; None when there is none, not a whole one, or one whose
    class path names a jar copy no longer in ``copies``."""
    try:
        command = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    if not (isinstance(command, list) and all(isinstance(a, str) for a in command) and SUBMIT_CLASS in command):
        return None
    if copies is not None and not driver_jars.copies_present(command, copies):
        return None
    os.utime(path)  # the most recently used are the ones kept
    return command


def _digest(args: list[str], env: Mapping[str, str], java: str, home: Path, folder: Path) -> str:
    """Everything the kept command depends on."""
    defaults = folder / "spark-defaults.conf"
    binary = Path(java).resolve()
    stat = binary.stat()
    jars = home / "jars"
    inputs = {
        "args": args,
        "env": sorted((k, v) for k, v in env.items() if k.startswith(_READ_BY_LAUNCHER) and k not in _PER_START),
        "defaults": defaults.read_text(errors="replace") if defaults.is_file() else None,
        "java": [str(binary), stat.st_size, stat.st_mtime_ns],
        "jars": sorted(p.name for p in jars.iterdir()) if jars.is_dir() else None,
        # How brewstream rewrites the launcher's class path: a command kept by a version
        # that rewrote it otherwise (or not at all) is built again.
        "class path": driver_jars.FORM,
    }
    return hashlib.sha256(json.dumps(inputs).encode()).hexdigest()[:32]


def _run_launcher(java: str, home: Path, args: list[str], env: Mapping[str, str]) -> list[str] | None:
    """What ``bin/spark-class`` runs to build the command, parsed the way it parses it (lines,
    then a NUL line, then NUL-separated arguments); None when it refuses."""
    launcher = [java, "-Xmx128m", *shlex.split(env.get("SPARK_LAUNCHER_OPTS", "")),
                "-cp", str(home / "jars" / "*"), LAUNCHER_CLASS, SUBMIT_CLASS, *args]
    done = subprocess.run(launcher, env=dict(env), capture_output=True, timeout=120, check=False)
    return parse_launcher_output(done.stdout) if done.returncode == 0 else None


def parse_launcher_output(out: bytes) -> list[str] | None:
    """Pure: the command in the launcher's output, as ``bin/spark-class`` reads it: lines to
    print (any at all mean a complaint: None, and the scripts print it), a NUL line, then
    each argument ended by a NUL. None for anything else, or a command that is not
    SparkSubmit's."""
    marker = out.find(b"\0\n")
    if marker < 0 or out[:marker].strip() or not out.endswith(b"\0"):
        return None
    try:
        built = [a.decode() for a in out[marker + 2:-1].split(b"\0")]
    except UnicodeDecodeError:
        return None
    return built if SUBMIT_CLASS in built else None


def _keep(path: Path, command: list[str]) -> None:
    """Written whole (a temporary file renamed), the oldest beyond ``_KEPT`` removed."""
    try:
        keep_text(path, json.dumps(command), _KEPT)
    except OSError:
        log.debug("keeping Spark's JVM command failed", exc_info=True)
