"""Build the SparkSession every brewstream query runs in."""

from __future__ import annotations

import functools
import importlib
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox.jars import spark_jars
from service.spark import jvm_archive
from service.spark.arrow_map import map_in_arrow
from service.spark.conf import (
    DEFAULTS,
    DRIVER_CLASS_PATH_KEY,
    DRIVER_JAVA_KEY,
    EXECUTOR_JAVA_KEY,
    JARS_KEY,
    LISTS,
    MASTER_KEY,
    defaults_file,
    driver_class_path,
    executor_python,
    is_local,
    is_loopback,
    java_options,
    merged,
    picks_collector,
    read_defaults,
    spark_home_problem,
    their_java_options,
)
from service.spark.jvm_output import SPARK_LOG_ENV, forwarded_stderr
from service.spark.launch import started_directly
from service.spark.shipped_code import code_zip
from topics.errors import BrewError
from topics.kafka_config import hidden_values

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

LOG_CONFIG = Path(__file__).resolve().parent / "conf" / "log4j2.properties"
METASPACE_OPTION = "-XX:MetaspaceSize=128m"  # see build_session
# The parallel collector as brewstream runs it (see build_session). Its young generation is
# sized for a throughput goal: by default 1% of the time in collections, for which it grows
# to hundreds of MiB whatever the pace. At 5% it stays small at a daemon's pace and still
# grows for a catch-up's long batch, which ran as fast (docs/operating/memory.md).
PARALLEL_GC_OPTIONS = "-XX:+UseParallelGC -XX:GCTimeRatio=19"
# A daemon's driver on a local master: the serial collector with a 64 MiB young generation.
# Little of a daemon's small batches survives a young collection, so its collections are
# short at any pace it keeps up with, and the serial collector keeps none of the tables
# the parallel one sizes for the whole heap, so the process tree peaks lower (what it saves
# and costs: docs/operating/memory.md). A catch-up keeps the parallel collector,
# whose growing young generation is what makes a long batch quick (docs/operating/memory.md).
DAEMON_GC_OPTIONS = "-XX:+UseSerialGC -Xmn64m"
# A daemon's driver on a local master compiles with C1 alone. Its batches are small and
# many, each running a little of a great deal of Spark's code, so C2 keeps compiling
# through the first minutes, on a thread that takes one of the cores the batches need,
# and the batches wait. A catch-up (``--available-now``) keeps the tiered JIT: its long
# batch is one hot loop that C2 runs faster (what each costs: docs/performance-notes.md, "Start-up
# and latency"). A user's own -XX:TieredStopAtLevel comes later on the command and wins.
QUICK_JIT_OPTION = "-XX:TieredStopAtLevel=1"
# A catch-up's driver (``--available-now``, or any tiered JIT) compiles a method once it has
# run four times as often as Java's default asks. Spark's start runs a great deal of code a
# few hundred times each, which the default thresholds compile, C2 too, for a start that
# never runs it again; the hot loop of a long batch passes any threshold within moments
# (docs/performance-notes.md, "Changes kept, before and after").
CATCH_UP_JIT_OPTION = "-XX:CompileThresholdScaling=4"
JVM_EXIT_WAIT_S = 10.0  # what a stop waits for its stopped session's JVM to exit
LOCAL_FILES_KEY, LOCAL_FILES_CLASS = "spark.hadoop.fs.file.impl", "brewstream.LocalFiles"
log = logging.getLogger(__name__)


# The class archive this process's JVM writes as it exits, if it does (one JVM a process).
_writing: jvm_archive.Plan | None = None


def build_session(master: str = "local[*]", app_name: str = "brewstream",
                  conf: dict[str, str] | None = None, log_file: Path | None = None,
                  write_archive: bool = False, quick_jit: bool = False) -> SparkSession:
    """A session with Spark's Kafka source and the order gate on the classpath, quiet logs and no UI.

    ``conf`` (the user's ``--conf``) overrides any setting, spark-defaults.conf overrides
    brewstream's defaults (``service.spark.conf``): ``spark.ui.enabled=true`` brings the UI
    back. Spark's own warnings and errors, with their stack traces, go to ``log_file``;
    stderr gets one line each. On a cluster the executors get brewstream's code from the
    driver (``service.spark.shipped_code``) and run the Python the user chose.

    The driver's JVM maps Spark's class archive when there is one (``service.spark.jvm_archive``);
    with ``write_archive`` and none yet, it writes one as it exits, and the caller ends the
    session with ``stop_session``, which waits for that. ``quick_jit`` (a daemon's session):
    on a local master the driver compiles with C1 alone (``QUICK_JIT_OPTION``).
    """
    global _writing
    # Imported here: pyspark costs a second to import and most commands never need it.
    import pyspark
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    _numpy_converters_ask_only_of_numpy_values()

    # Java options and SPARK_HOME reach only a JVM started now, not one this process has already.
    launching = SparkContext._gateway is None
    if launching and (problem := spark_home_problem(pyspark.__version__)):
        raise BrewError(problem)

    # The master was resolved already (--master, then spark.master from --conf or the file).
    user = {k: v for k, v in (conf or {}).items() if k != MASTER_KEY}
    from_file = read_defaults(defaults_file())
    local = is_local(master)
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    warnings.filterwarnings("ignore", message=".*pandas.*", category=FutureWarning)
    # py4j logs every exception a foreachBatch call raises, traceback and all; the runner
    # reports the failure itself in one line. Some of its lines go to the root logger
    # (a broken connection, when a SIGTERM to the process group ends the JVM first), so
    # those are dropped there.
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    logging.getLogger().addFilter(_not_from_py4j)

    # The parallel collector: batches here are throughput work with small heaps, and it
    # ran a 1M-order batch faster than the default G1 (docs/performance-notes.md); a daemon's
    # driver on this machine the serial one (DAEMON_GC_OPTIONS). As the *default*
    # Java options, so that a user's extraJavaOptions add to them; the user's (or the
    # file's) defaultJavaOptions are added after them, and a collector chosen there
    # replaces this one.
    # The metaspace's first threshold: the JVM's default (21 MB) is first crossed by the
    # classes a query's first batch generates, the rest being mapped from the class
    # archive, and that crossing is a full collection (0.2 s of a takeover's first batch,
    # on two cores) that frees nothing. Later options of the user's set it otherwise.
    theirs = {key: their_java_options(key, from_file, user) for key in (DRIVER_JAVA_KEY, EXECUTOR_JAVA_KEY)}
    collector = {DRIVER_JAVA_KEY: DAEMON_GC_OPTIONS if quick_jit and local else PARALLEL_GC_OPTIONS,
                 EXECUTOR_JAVA_KEY: PARALLEL_GC_OPTIONS}
    tuning = {key: ("" if picks_collector(opts) else collector[key] + " ") + METASPACE_OPTION
              for key, opts in theirs.items()}
    jars = spark_jars()
    # On this machine the driver is every executor: the jars go on its JVM's class path,
    # where the class archive covers their classes too, Hadoop finds LocalFiles and no
    # task fetches a copy of each (five forked chmods). Elsewhere spark.jars ships them.
    jars_key = DRIVER_CLASS_PATH_KEY if local else JARS_KEY
    # Class sharing options of the user's own leave the archive to them.
    archive = (jvm_archive.plan(jars, write_archive, driver_class_path({**from_file, **user}), on_class_path=local)
               if launching and not jvm_archive.shares_classes(theirs[DRIVER_JAVA_KEY])
               else jvm_archive.Plan())
    driver_opts = " ".join(o for o in (f"-Dlog4j2.configurationFile=file:{LOG_CONFIG}", tuning[DRIVER_JAVA_KEY],
                                       QUICK_JIT_OPTION if quick_jit and local else CATCH_UP_JIT_OPTION,
                                       archive.options) if o)
    if launching:
        # Named in the JVM's environment, not its command: the command is then the same for
        # every state dir, and the one kept from the last start serves them all (service.spark.launch).
        # A session without a log file must not inherit an earlier session's: that would
        # write into another state dir.
        if log_file is not None:
            os.environ[SPARK_LOG_ENV] = str(Path(log_file).resolve())
        else:
            os.environ.pop(SPARK_LOG_ENV, None)
    settings: dict[str, str] = {
        **DEFAULTS,
        jars_key: LISTS[jars_key].join(str(j) for j in jars),
        DRIVER_JAVA_KEY: driver_opts,
        # Executors elsewhere log the cluster's way: only the collector and the metaspace threshold travel.
        EXECUTOR_JAVA_KEY: tuning[EXECUTOR_JAVA_KEY],
    }
    if local or is_loopback(master):
        # Executors on this machine reach the driver on the loopback address.
        settings["spark.driver.host"] = "127.0.0.1"
        settings["spark.driver.bindAddress"] = "127.0.0.1"
    if local:
        # Files on the local disk without a forked chmod each (service/spark/jvm/brewstream/LocalFiles.java).
        settings[LOCAL_FILES_KEY] = LOCAL_FILES_CLASS

    final = merged(settings, from_file, user)
    for key, opts in theirs.items():
        if value := java_options(settings[key], opts):
            final[key] = value
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in final.items():
        builder = builder.config(key, value)
    try:
        with _session_python(executor_python(master, from_file, user)), _keep_sigint(), \
                _jvm_stderr_filtered(launching), started_directly() if launching else nullcontext():
            spark = builder.getOrCreate()
    except BaseException:
        archive.release()
        raise
    if archive.part is not None:
        proc = jvm_process()
        archive.writer_started(proc.pid if proc is not None else None)
        _writing = archive
    _hide_config_values_in_the_jvm_log(spark)
    spark.sparkContext.setLogLevel("WARN")
    _quiet_when_the_jvm_hangs_up(spark.sparkContext)
    _report_uncaught_in_the_jvm(spark)
    if not local:
        spark.sparkContext.addPyFile(str(code_zip()))
    return spark


class _OnlyOfNumpyValues:
    """One of pyspark's numpy converters, asked only about a numpy value.

    pyspark's own converters ask, of every argument of every py4j call, whether numpy is
    installed, by importing ``pyspark.testing.utils``; that module imports pandas, and
    pandas imports pyarrow and numpy, into every driver at the JVM's first call, inside the
    start (docs/operating/memory.md has what they cost). A numpy value is one whose type
    numpy defines, or derives from one numpy defines, so the question is asked of nothing
    else. The type tells without touching the numpy module: a thread may be importing it
    at that moment (a batch planned for the Python workers imports pandas), and a
    half-imported module has no ``ndarray`` yet."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def can_convert(self, obj: Any) -> bool:
        numpy_type = any(cls.__module__.partition(".")[0] == "numpy" for cls in type(obj).__mro__)
        return numpy_type and bool(self.inner.can_convert(obj))

    def convert(self, obj: Any, gateway_client: Any) -> Any:
        return self.inner.convert(obj, gateway_client)


def _numpy_converters_ask_only_of_numpy_values() -> None:
    """pyspark's numpy converters wrapped (``_OnlyOfNumpyValues``) in py4j's list, the very
    list every gateway reads, so a session built already is covered too."""
    from py4j import protocol
    from pyspark.sql.types import NumpyArrayConverter, NumpyScalarConverter

    converters = protocol.INPUT_CONVERTER
    for i, converter in enumerate(converters):
        if isinstance(converter, NumpyArrayConverter | NumpyScalarConverter):
            converters[i] = _OnlyOfNumpyValues(converter)


def _not_from_py4j(record: logging.LogRecord) -> bool:
    """False for a line py4j's own code logged (see build_session)."""
    return not record.pathname.startswith(_py4j_dir())


@functools.cache
def _py4j_dir() -> str:
    import py4j

    return str(Path(py4j.__file__).parent) + os.sep


def _quiet_when_the_jvm_hangs_up(sc: Any) -> None:
    """pyspark's accumulator server prints a traceback when the JVM closes its connection
    without a stop, as when a SIGTERM to the process group reaches the JVM first. That is
    the JVM going away, which the runner reports itself; any other error still prints."""
    server = getattr(sc, "_accumulatorServer", None)
    if server is None:
        return
    report = server.handle_error

    def handle_error(request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (EOFError, ConnectionError)):
            log.debug("Spark's JVM closed the accumulator connection")
            return
        report(request, client_address)

    server.handle_error = handle_error


def _hide_config_values_in_the_jvm_log(spark: SparkSession) -> None:
    """The Java Kafka client names its client id, servers and, in a refusal, a setting's value
    in its log lines: Spark's log must show none of the --kafka-config file's values
    (``topics.kafka_config.redact``). The pattern lives in the JVM's memory only (a system
    property, never a command line or a file), and the log configuration is reloaded so
    both of its layouts apply it (service/spark/conf/log4j2.properties)."""
    values = hidden_values()
    if not values:
        return
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    jvm.java.lang.System.setProperty(REDACT_PROPERTY, java_pattern(values))
    jvm.org.apache.logging.log4j.LogManager.getContext(False).reconfigure()


REDACT_PROPERTY = "brewstream.redact"


def java_pattern(values: list[str]) -> str:
    """A Java regex matching any of ``values`` as a whole word, the way ``redact`` does
    (``topics.kafka_config.whole_word``; a word character is a letter, a digit or ``_``, as
    ``\\pL``, ``\\pN`` and ``_`` say in Java), longest first, with every character but letters
    and digits of a value escaped as ``\\uXXXX`` (so no brace, percent or dollar reaches the
    log layout's own syntax)."""
    word = r"[\pL\pN_]"

    def escaped(value: str) -> str:
        return "".join(c if c.isascii() and c.isalnum() else "".join(f"\\u{ord(u):04x}" for u in _utf16(c))
                       for c in value)

    def whole(value: str) -> str:
        head = f"(?<!{word})" if re.match(r"\w", value[0]) else ""
        tail = f"(?!{word})" if re.match(r"\w", value[-1]) else ""
        return f"{head}{escaped(value)}{tail}"

    return "|".join(whole(v) for v in sorted(values, key=len, reverse=True))


def _utf16(c: str) -> list[str]:
    """A character as Java sees it: one UTF-16 unit, or a surrogate pair."""
    data = c.encode("utf-16-be")
    return [chr(int.from_bytes(data[i:i + 2], "big")) for i in range(0, len(data), 2)]


def _report_uncaught_in_the_jvm(spark: SparkSession) -> None:
    """The driver JVM logs an exception that ends one of its threads in one line, or only
    in Spark's log file when it is the stop itself (``JvmUncaught``, service/spark/jvm/), instead
    of a stack trace on stderr: a SIGTERM to the process group ends the query's thread
    that way."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a classic session, which brewstream always builds
    jvm.brewstream.JvmUncaught.install()


def jvm_process() -> subprocess.Popen[bytes] | None:
    """The driver JVM this process launched (pyspark's gateway), if it launched one."""
    from pyspark import SparkContext

    return getattr(SparkContext._gateway, "proc", None)


def stop_session(spark: SparkSession, stop: Callable[[Callable[[], object]], None]) -> None:
    """Stop the session with ``stop`` (which copes with a JVM already gone), then end its
    JVM and wait for it (for the class archive too, if it writes one). Call it last.

    A stopped session leaves its JVM running, and it would exit only once it saw this
    process's end, after the daemon had exited, for a supervisor that waits on the process
    group to find."""
    global _writing
    jvm = _jvm_of(spark)
    accumulators = _take_accumulator_server(spark)
    stop(spark.stop)
    if accumulators is not None:
        threading.Thread(target=accumulators.shutdown, name="accumulator-server-stop", daemon=True).start()
    if jvm is not None:
        _shut_gateway(spark)
    writing, _writing = _writing, None
    if writing is not None:
        writing.finish(jvm)
    else:
        jvm_archive.end_jvm(jvm, JVM_EXIT_WAIT_S)


def _jvm_of(spark: SparkSession) -> subprocess.Popen[bytes] | None:
    """The JVM ``spark`` runs in, if this process launched it: only that one is ended."""
    gateway = getattr(getattr(spark, "_sc", None), "_gateway", None)
    return getattr(gateway, "proc", None)


def _shut_gateway(spark: SparkSession) -> None:
    """Close py4j's server in the JVM (its listening socket and every connection) before
    the JVM is told to exit.

    Java 17's exit waits until no Java thread is inside a native call, giving up after
    300 ms (``VM_Exit::wait_for_threads_in_native_to_block``), and py4j's threads sit in
    one for the JVM's whole life: the gateway's ``accept`` and a ``read`` per connection
    from this process. So every stop waited those 300 ms, and a JVM whose gateway was
    shut first exits at once. Never raises: a JVM already gone has nothing left to close."""
    gateway = getattr(getattr(spark, "_sc", None), "_gateway", None)
    if gateway is None:
        return
    try:
        gateway.shutdown()
    except Exception:  # py4j's socket errors, for a JVM that is going anyway
        log.debug("shutting Spark's py4j gateway down", exc_info=True)


def _take_accumulator_server(spark: SparkSession) -> Any:
    """Take pyspark's accumulator server from the session, to be shut down off the caller's thread.

    pyspark's ``SparkContext.stop`` ends with that server's ``shutdown``, which waits until
    the thread serving it notices: it serves the JVM's connection in a loop that checks for
    a stop once a second (``select`` with a 1 s timeout, pyspark/accumulators.py). So every
    stop waited up to a second, idle, for a server brewstream never uses (it keeps no
    accumulators). Its thread is a daemon, so the process still exits at once."""
    sc = getattr(spark, "_sc", None)
    server = getattr(sc, "_accumulatorServer", None)
    if server is not None:
        sc._accumulatorServer = None  # type: ignore[union-attr]
    return server


@contextmanager
def _keep_sigint() -> Iterator[None]:
    """pyspark replaces the SIGINT handler when it creates a SparkContext (its handler
    cancels every job and raises KeyboardInterrupt in whatever py4j call is running);
    brewstream's own (``service.instance.signals``) lets the batch in flight commit instead, so
    it is put back."""
    before = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, before)


@contextmanager
def _jvm_stderr_filtered(launching: bool) -> Iterator[None]:
    """The JVM launched inside this block inherits as its stderr a pipe that this process
    forwards, for the JVM's whole life, to its own (``jvm_output.forwarded_stderr``): a user
    sees only brewstream's lines and Spark's one-line warnings."""
    if not launching:
        yield
        return
    write_end = forwarded_stderr()
    saved = os.dup(2)
    os.dup2(write_end, 2)  # the JVM inherits this as its stderr
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(write_end)


@contextmanager
def _session_python(executors: str | None) -> Iterator[None]:
    """The environment pyspark reads while it starts a session: PYSPARK_PYTHON is what
    every executor runs (pyspark takes it from the driver's environment, not from
    spark.pyspark.python), PYSPARK_DRIVER_PYTHON this interpreter (spark-submit uses it to
    find pyspark's home). Put back afterwards, so one session's choice does not leak into
    the next or into child processes."""
    wanted = {"PYSPARK_PYTHON": executors, "PYSPARK_DRIVER_PYTHON": sys.executable}
    before = {k: os.environ.get(k) for k in wanted}
    for key, value in wanted.items():
        if value is not None:
            os.environ[key] = value
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def warm_python_workers(spark: SparkSession, module: str) -> None:
    """Start a Python worker per task slot and import ``module`` in it, before the query.

    Otherwise the first batch after every start pays for spawning workers and importing
    pyarrow, the parsers and the batch code: seconds, on the path that decides how fast a
    restarted daemon catches up.
    """
    slots = spark.sparkContext.defaultParallelism

    def warm(batches: Iterator[Any]) -> Iterator[Any]:
        importlib.import_module(module)
        yield from batches

    map_in_arrow(spark.range(slots, numPartitions=slots), warm, "id long").collect()


def unapplied(df: DataFrame, applied: Mapping[int, int]) -> DataFrame:
    """The rows at or above the store's next offset of their partition (``applied``): a
    replayed batch's rows below it are counted already."""
    from pyspark.sql import functions as F

    for partition, next_offset in applied.items():
        df = df.where((F.col("partition") != partition) | (F.col("offset") >= next_offset))
    return df


def collect_rows(df: DataFrame) -> Iterator[dict[str, Any]]:
    """The rows of a small result as dicts, through Arrow (no Row objects), batch by batch."""
    for batch in df.toArrow().to_batches():
        yield from batch.to_pylist()
