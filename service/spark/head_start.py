"""Spark's driver JVM started ahead, while this process is still importing Python.

A start spends about 0.4 s importing pyspark, the Kafka client and brewstream's own modules
before it asks pyspark for a session, and the JVM pyspark then starts takes about 0.9 s to
serve its gateway: the session waits for the two one after the other. The JVM's command
depends only on the Spark settings, which a daemon is started with again and again. So the
command line's first step (``start_ahead``) starts the JVM command that the last start of
the same *shape* ran, before any other import; when pyspark asks for its JVM
(``service.spark.launch``), ``adopt`` hands it that one when its command and environment are
exactly those pyspark's would be, and otherwise stops it, and the usual start goes on. A
start that never asks stops it as it exits; were this process killed, the JVM exits by
itself (Spark's gateway exits when its stdin, a pipe from this process, closes).

The shape of a command line: the command and which long flags it gives, not their values
(each start's state dir may differ, and the JVM's command never names it: Spark's log is
named once the JVM is adopted, ``jvm_output.log_to``). Kept in the JVM cache folder's
``ahead`` folder, one small file per shape: the command, and what that start changed in its
own environment (Spark's variables only: no --kafka-config value is ever in the environment).

Imported before anything else: only the standard library and light brewstream modules.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import itertools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from service.spark.cache_files import archive_whole, cache_dir, keep_text
from service.spark.jvm_output import SPARK_LOG_ENV, forwarded_stderr
from topics.clock import WaitTimedOut, wait_until

log = logging.getLogger("brewstream.jvm")

CONN_INFO_ENV = "_PYSPARK_DRIVER_CONN_INFO_PATH"  # where pyspark's JVM writes its gateway's port and secret
# Differ from one start to the next without changing what the JVM does.
_PER_START = (CONN_INFO_ENV, SPARK_LOG_ENV)
# A command that writes the class archive as it exits is one start's, never started ahead.
_WRITES_ARCHIVE = "-XX:ArchiveClassesAtExit"
_MAPS_ARCHIVE = "-XX:SharedArchiveFile="
_CLASS_PATH = ("-cp", "-classpath", "--class-path")
GATEWAY_WAIT_S = 120.0  # what a start waits for a JVM's gateway before it gives that JVM up
_KEPT = 16


@dataclass
class _Ahead:
    proc: subprocess.Popen[bytes]
    command: list[str]
    env: dict[str, str]
    conn_dir: str

    @property
    def conn_file(self) -> str:
        return self.env[CONN_INFO_ENV]

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            self.proc.wait(10)
        shutil.rmtree(self.conn_dir, ignore_errors=True)


_ahead: _Ahead | None = None
_shape_file: Path | None = None  # this start's, once start_ahead has named it
_start_env: dict[str, str] | None = None  # the environment this process started with


def shape(argv: Sequence[str]) -> list[str] | None:
    """Pure: a command line's shape, its command then the long flags it gives (sorted, no
    values), or None for a line that starts no session: no command, or a call for help.
    Before the command, a flag's value is the next word unless it is given with ``=``
    (every option of the ``brewstream`` group takes a value; tests/unit/cli checks it)."""
    command: str | None = None
    flags: set[str] = set()
    value_next = False
    for word in argv:
        if word in ("-h", "--help", "--version"):
            return None
        if value_next:
            value_next = False
        elif word.startswith("--"):
            flags.add(word.split("=", 1)[0])
            value_next = command is None and "=" not in word
        elif command is None and not word.startswith("-"):
            command = word
    return None if command is None else [command, *sorted(flags)]


def start_ahead(argv: Sequence[str]) -> None:
    """Start the JVM the last start of this command line's shape ran, if one is kept. Never
    raises: whatever goes wrong (no home folder, a full disk, a damaged file), the start
    goes on as it would without it."""
    global _ahead, _shape_file, _start_env
    try:
        cache = cache_dir()
        line = shape(argv)
        if cache is None or line is None:
            return
        _start_env = dict(os.environ)
        digest = hashlib.sha256(json.dumps([os.path.realpath(sys.executable), *line]).encode()).hexdigest()[:24]
        _shape_file = cache / "ahead" / f"{digest}.json"
        kept = _read(_shape_file)
        if kept is not None:
            _ahead = _start(*kept, _start_env)
    except (OSError, ValueError, RuntimeError, subprocess.SubprocessError):  # RuntimeError: no home folder
        return
    if _ahead is not None:
        atexit.register(discard)


def _start(command: list[str], added: dict[str, str], removed: list[str], start_env: Mapping[str, str]) -> _Ahead:
    conn_dir = tempfile.mkdtemp(prefix="brewstream-ahead-")
    env = {k: v for k, v in start_env.items() if k not in removed and k not in _PER_START}
    env.update(added)
    env[CONN_INFO_ENV] = os.path.join(conn_dir, "conn")
    try:
        stderr = forwarded_stderr()
    except OSError:
        shutil.rmtree(conn_dir, ignore_errors=True)
        raise
    # As pyspark starts its JVM: deaf to SIGINT (a Ctrl+C is the daemon's to handle), which
    # an ignored signal stays across exec. Set here rather than in a preexec_fn, which the
    # forwarding thread already running would make unsafe.
    sigint = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stderr=stderr, env=env)
    except BaseException:
        shutil.rmtree(conn_dir, ignore_errors=True)
        raise
    finally:
        signal.signal(signal.SIGINT, sigint)
        os.close(stderr)
    return _Ahead(proc, list(command), env, conn_dir)


def adopt(command: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[bytes] | None:
    """The JVM started ahead, when it runs ``command`` in ``env`` but for what differs per
    start, with its gateway's address moved to where ``env`` says pyspark reads it; None
    (and that JVM stopped) otherwise."""
    global _ahead
    ahead, _ahead = _ahead, None
    if ahead is None:
        return None
    if list(command) != ahead.command or _without_per_start(env) != _without_per_start(ahead.env):
        log.debug("the JVM started ahead runs another command or environment; starting Spark's own")
        ahead.stop()
        return None
    try:
        if not gateway_served(ahead.proc, ahead.conn_file):
            raise OSError("it exited before it served its gateway")
        shutil.move(ahead.conn_file, env[CONN_INFO_ENV])
    except OSError as exc:
        log.debug("the JVM started ahead is not used: %s", exc)
        ahead.stop()
        return None
    shutil.rmtree(ahead.conn_dir, ignore_errors=True)
    log.debug("Spark's JVM was started ahead (pid %s)", ahead.proc.pid)
    return ahead.proc


def gateway_served(proc: subprocess.Popen[bytes], conn_file: str) -> bool:
    """Wait until a JVM has written its gateway's address to ``conn_file`` (True), looking
    every 10 ms where pyspark looks every 0.1 s; False once it has exited, or after
    ``GATEWAY_WAIT_S``."""
    try:
        wait_until(lambda: os.path.exists(conn_file), GATEWAY_WAIT_S, "Spark's gateway", every=0.01,
                   give_up=lambda: None if proc.poll() is None else "it exited")
    except WaitTimedOut:
        return False
    return True


def remember(command: Sequence[str], env: Mapping[str, str]) -> None:
    """Keep ``command`` and what ``env`` adds to this process's own for the next start of
    this shape (nothing when ``start_ahead`` did not run, or for a command a next start
    must not run ahead)."""
    if _shape_file is None or _start_env is None or any(a.startswith(_WRITES_ARCHIVE) for a in command):
        return
    added = {k: v for k, v in env.items() if k not in _PER_START and _start_env.get(k) != v}
    removed = sorted(k for k in _start_env if k not in env and k not in _PER_START)
    try:
        # Only its user reads it: it names the environment Spark's JVM runs in.
        keep_text(_shape_file, json.dumps({"command": list(command), "added": added, "removed": removed}), _KEPT,
                  mode=0o600)
    except OSError:
        log.debug("keeping the JVM's command for a start ahead failed", exc_info=True)


def discard() -> None:
    """Stop the JVM started ahead, if no session took it."""
    global _ahead
    ahead, _ahead = _ahead, None
    if ahead is not None:
        ahead.stop()
        log.debug("stopped the JVM started ahead (pid %s): no session took it", ahead.proc.pid)


def _read(path: Path) -> tuple[list[str], dict[str, str], list[str]] | None:
    try:
        kept = json.loads(path.read_text())
        command, added, removed = kept["command"], kept["added"], kept["removed"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    if not (isinstance(command, list) and command and all(isinstance(a, str) for a in command)
            and isinstance(added, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in added.items())
            and isinstance(removed, list) and all(isinstance(k, str) for k in removed)):
        return None
    return (command, added, removed) if _runnable(command) else None


def _runnable(command: list[str]) -> bool:
    """Whether every file the command names is still there as it was kept: the java binary,
    each jar of its class path (the folders on it may be missing: Spark's conf folder often
    is, and the JVM skips it), and a whole class archive (one cut short kills the JVM)."""
    if not os.access(command[0], os.X_OK):
        return False
    for flag, value in itertools.pairwise(command):
        if flag in _CLASS_PATH and not all(os.path.exists(p) for p in value.split(os.pathsep) if p.endswith(".jar")):
            return False
    archives = [a.split("=", 1)[1] for a in command if a.startswith(_MAPS_ARCHIVE)]
    return all(archive_whole(Path(a)) for a in archives)


def _without_per_start(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in _PER_START}
