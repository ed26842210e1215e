"""A Python environment for Spark executors that has what the batch code imports and
nothing of brewstream: what a worker of a real cluster has.

Built once into ``.cache/spark-executor-venv`` (pip's cache keeps the large pyspark
wheel) and rebuilt only when its requirements change. Not ``--system-site-packages``:
it must not see the packages of the interpreter it was made from.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement

from service.spark.shipped_code import EXECUTOR_PACKAGES

REPO = Path(__file__).resolve().parents[2]
VENV = REPO / ".cache" / "spark-executor-venv"
MARKER = VENV / ".installed"
INSTALL_TIMEOUT_S = 900


def requirements() -> list[str]:
    """brewstream's own requirements of the executor packages (pyspark pinned to the
    driver's): one list of versions, in pyproject.toml."""
    own = [Requirement(r) for r in importlib.metadata.requires("brewstream") or []]
    wanted = [str(r) for r in own if r.name in EXECUTOR_PACKAGES and r.marker is None]
    assert len(wanted) == len(EXECUTOR_PACKAGES), (wanted, EXECUTOR_PACKAGES)
    return wanted


def executor_python() -> Path:
    """The environment's interpreter, built first when needed."""
    want = "\n".join(requirements())
    python = VENV / "bin" / "python"
    if not (MARKER.exists() and MARKER.read_text() == want and python.exists()):
        _build(want)
    return python


def _build(want: str) -> None:
    base = getattr(sys, "_base_executable", sys.executable)  # the interpreter this venv was made from
    MARKER.unlink(missing_ok=True)
    _run([base, "-m", "venv", "--clear", str(VENV)])
    _run([str(VENV / "bin" / "pip"), "install", "-q", *want.splitlines()])
    _check()
    MARKER.write_text(want)


def _check() -> None:
    """The environment has what executors need, and no brewstream."""
    python = str(VENV / "bin" / "python")
    _run([python, "-c", "import " + ", ".join(EXECUTOR_PACKAGES)])
    probe = subprocess.run([python, "-c", "import service"], capture_output=True, text=True, cwd="/")
    assert probe.returncode != 0, f"{VENV} can import brewstream's packages; it must not"


def _run(args: list[str]) -> None:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, cwd="/")
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
