"""Quix Streams, run from its own virtualenv (see bench/quix/requirements.txt).

The applications live in bench/quix/ and import nothing from brewstream; the harness
only starts them, reads their RESULT line and measures their process.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.config import REPO
from bench.context import BenchContext
from bench.dataset import Backlog
from bench.errors import BenchError
from bench.procs import run_to_end
from bench.runs import IngestRun, RestoreRun, require_same

COUNT_APP = REPO / "bench" / "quix" / "count_app.py"
CHANGELOG_APP = REPO / "bench" / "quix" / "changelog_app.py"
# quixstreams' dependencies print deprecation warnings at import; they say nothing here.
ENV = {"PYTHONWARNINGS": "ignore"}
TIMEOUT_S = 3600.0
# Over an empty input Quix stops after this long without a message (its run(timeout=)).
EMPTY_IDLE_S = 1.0


def require(python: Path) -> str:
    """The installed quixstreams version; a clear error when the virtualenv is missing."""
    try:
        out = subprocess.run([str(python), "-c", "import quixstreams; print(quixstreams.__version__)"],
                             capture_output=True, text=True, timeout=120, env=None)
    except OSError:
        out = None
    if out is None or out.returncode != 0:
        raise BenchError(f"no Quix Streams at {python}; `make bench` creates its virtualenv "
                         "(or pass --quix-python)")
    return out.stdout.strip()


def ingest(ctx: BenchContext, backlog: Backlog, guarantee: str) -> IngestRun:
    name = f"quix-{guarantee}"
    group = f"bench-{ctx.stamp}-{ctx.fresh('quix-count')}"
    args = [str(ctx.cfg.quix_python), str(COUNT_APP), "--bootstrap", ctx.conn.bootstrap, "--topic", backlog.topic,
            "--group", group, "--state-dir", str(ctx.path("quix-state")), "--guarantee", guarantee,
            "--items", str(backlog.items)]
    if not backlog.orders:
        args += ["--idle-s", str(EMPTY_IDLE_S)]
    child = run_to_end(name, args, ctx.log(name), TIMEOUT_S, env=ENV)
    out = child.result()
    require_same(f"Quix Streams ({guarantee})", out["counts"], backlog.expected)
    if not backlog.orders:  # start-up and shutdown alone: the idle wait is not Quix's cost
        wall = child.wall_s - EMPTY_IDLE_S
        return IngestRun(f"quix {guarantee}", "empty input", 0, 0.0, wall, wall, child.rss.peak, child.rss.peak_parts)
    first, done = float(out["first"]), float(out["done"])
    return IngestRun(f"quix {guarantee}", f'processing_guarantee="{guarantee}", defaults otherwise',
                     backlog.orders, done - first, first - child.started, child.wall_s, child.rss.peak,
                     child.rss.peak_parts)


def write_changelog(ctx: BenchContext, topic: str, group: str, slots: int, keys: int, messages: int) -> float:
    """Let Quix write its own changelog (see changelog_app.py); returns its run time."""
    args = _changelog_args(ctx, "write", topic, group, ctx.path("quix-writer"), slots, keys, messages)
    child = run_to_end("quix-changelog-write", args, ctx.log("quix-changelog-write"), TIMEOUT_S, env=ENV)
    return float(child.result()["run_s"])


def recover(ctx: BenchContext, topic: str, group: str, slots: int, keys: int, records: int,
            expected_value: int) -> RestoreRun:
    """A cold start on an empty state dir: Quix restores every partition from its changelog
    before it processes the probe messages (one per partition) that read the state back."""
    args = _changelog_args(ctx, "recover", topic, group, ctx.path("quix-recover"), slots, keys, slots)
    child = run_to_end("quix-recover", args, ctx.log("quix-recover"), TIMEOUT_S, env=ENV)
    out = child.result()
    got = {k: v for probe in out["probes"].values() for k, v in probe.items()}
    require_same("Quix Streams recovery", got, {f"key-{k:04d}": expected_value for k in range(keys)})
    return RestoreRun("quix", records, len(got), float(out["recovery_s"]), child.wall_s, child.rss.peak,
                      {"run_s": out["run_s"]})


def _changelog_args(ctx: BenchContext, mode: str, topic: str, group: str, state_dir: Path, slots: int, keys: int,
                    count: int) -> list[str]:
    return [str(ctx.cfg.quix_python), str(CHANGELOG_APP), mode, "--bootstrap", ctx.conn.bootstrap, "--topic", topic,
            "--group", group, "--state-dir", str(state_dir), "--slots", str(slots), "--keys", str(keys),
            "--count", str(count)]
