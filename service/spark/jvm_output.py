"""What Spark's driver JVM writes, as a user sees it: its stderr forwarded through this
process (without noise, no --kafka-config value in it), and the log file it is named.

Imported by the command line's first step (``service.spark.head_start``): only the
standard library and ``topics.kafka_config``.
"""

from __future__ import annotations

import os
import threading

from topics.kafka_config import redact

# Where the log configuration (service/spark/conf/log4j2.properties) writes Spark's warnings
# and errors: the system property when it is set (a JVM started ahead learns its state dir
# only once its gateway is up), else the environment variable a JVM is started with.
SPARK_LOG_ENV = "BREWSTREAM_SPARK_LOG"
SPARK_LOG_PROPERTY = "brewstream.sparklog"

# What the JVM prints on stderr before any of its logging starts, and says nothing a user can
# act on: Spark's launcher always adds the incubating vector module, and Java announces it.
NOISE = (b"WARNING: Using incubator modules:",)


def forwarded_stderr() -> int:
    """The write end of a pipe for a JVM's stderr. What is written to it reaches this
    process's stderr (fd 2 as it is now) without ``NOISE`` and redacted
    (``topics.kafka_config.redact``), from a thread that ends when every writer has closed
    it: the caller closes its own copy once the JVM has one."""
    read_end, write_end = os.pipe()
    out = os.dup(2)
    threading.Thread(target=_forward, args=(read_end, out), name="jvm-stderr", daemon=True).start()
    return write_end


def _forward(read_end: int, out: int) -> None:
    with os.fdopen(read_end, "rb") as lines:
        for line in lines:
            if line.startswith(NOISE):
                continue
            data = redact(line.decode("utf-8", "replace")).encode()
            try:
                os.write(out, data)
            except OSError:
                return


def log_to(jvm: object, path: str) -> None:
    """Point a running JVM's Spark log at ``path`` (its log configuration reloaded)."""
    jvm.java.lang.System.setProperty(SPARK_LOG_PROPERTY, path)  # type: ignore[attr-defined]
    jvm.org.apache.logging.log4j.LogManager.getContext(False).reconfigure()  # type: ignore[attr-defined]
