"""``brewstream drill failover``: an active and a hot standby, the active killed again and
again, and the numbers checked at the end.

On topics of its own, while orders (about 1% bad) stream in, two instances run: one
active, one ``--standby``. Each round, once the standby is ready, kills the active — by
SIGKILL at a random moment, or, every third round, at a fault point inside its sink (it
is armed then and SIGKILLs itself there) — and times the failover: from the kill to the
first batch the standby commits as the new active (a few orders are produced right
after the kill, so there is always a batch to commit). The killed instance comes back as
the new standby.
At the end the last active drains the input, and its store, the DLQ and a fresh restore
from the changelog are compared with an oracle summed from the orders fed.
"""

from __future__ import annotations

import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from restorer.faults import ENV as FAULT_ENV
from restorer.faults import FILE_ENV, POINTS
from service.drills.process import ChildProcess
from service.drills.recovery import (
    DrillConfig,
    Verdict,
    count_dlq,
    daemon_command,
    drained,
    printer,
    read_counts,
    restore_check,
    set_up,
    stream,
)
from service.drink_count.pipeline import BATCH_PATTERN
from service.engine.runner import TOOK_OVER_PATTERN
from service.instance.health import STANDBY, role_pattern
from topics.admin import delete_topics
from topics.catalog import Topics
from topics.clock import WaitTimedOut, wait_until
from topics.errors import BrewError
from topics.feed import PacedFeeder, produce

START_TIMEOUT_S = 240.0
TAKEOVER_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 600.0
POLL_S = 0.02  # the failover time is measured by these polls
PROBE_ORDERS = 30


@dataclass
class Failover:
    n: int
    how: str
    killed: str
    new_active: str
    seconds: float


@dataclass
class FailoverResult(Verdict):
    failovers: list[Failover] = field(default_factory=list)

    @property
    def times(self) -> list[float]:
        return [f.seconds for f in self.failovers]


class Instance:
    """One ``brewstream run`` process group (``service.drills.process``) with its own state
    dir, checkpoint and log, started again after each kill (its log goes on)."""

    def __init__(self, cfg: DrillConfig, topics: Topics, work: Path, name: str, extra: tuple[str, ...] = ()) -> None:
        self.cfg, self.topics, self.name, self.extra = cfg, topics, name, extra
        self.state, self.checkpoint = work / name / "state", work / name / "checkpoint"
        self.log, self.fault_file = work / f"{name}.log", work / f"{name}.fault"
        self.child: ChildProcess | None = None
        self.died_at: float | None = None  # monotonic time its process was seen gone

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return None if self.child is None else self.child.proc

    def start(self, standby: bool) -> None:
        args = daemon_command(self.cfg, self.topics, self.state, self.checkpoint, "--instance", self.name,
                              *self.extra, *(["--standby"] if standby else []))
        self.fault_file.write_text("")
        self.died_at = None
        # The drill arms fault points through the file, never through the environment it runs in.
        self.child = ChildProcess(self.name, args, self.log, env={FAULT_ENV: "", FILE_ENV: str(self.fault_file)})
        threading.Thread(target=self._watch, args=(self.child,), daemon=True).start()

    def _watch(self, child: ChildProcess) -> None:
        child.proc.wait()
        if child is self.child:
            self.died_at = time.monotonic()

    def arm(self, fault: str) -> None:
        """Make it SIGKILL itself at a fault point from now on."""
        self.fault_file.write_text(fault)

    def text(self) -> str:
        """What this run of it printed."""
        return "" if self.child is None else self.child.text()

    def exited(self) -> str | None:
        code = None if self.proc is None else self.proc.poll()
        return None if code is None else f"{self.name} exited with {code}; see {self.log}"

    def wait_for(self, cond: Callable[[str], bool], what: str, timeout: float) -> None:
        try:
            wait_until(lambda: cond(self.text()), timeout, f"{self.name} {what}", every=POLL_S, give_up=self.exited)
        except WaitTimedOut as exc:
            raise BrewError(str(exc)) from None

    def kill(self) -> None:
        if self.child is not None:
            self.child.kill()

    def stop(self) -> int:
        assert self.child is not None
        return self.child.stop(120)


def committed_after_takeover(text: str) -> bool:
    took = TOOK_OVER_PATTERN.search(text)
    return took is not None and BATCH_PATTERN.search(text, took.end()) is not None


def is_standby(text: str) -> bool:
    return STANDBY_LINE.search(text) is not None


STANDBY_LINE = role_pattern(STANDBY)


def run_failover_drill(cfg: DrillConfig, out: TextIO = sys.stdout) -> FailoverResult:
    if cfg.mode != "failover":
        raise BrewError(f"not a failover drill: {cfg.mode!r}")
    rng = random.Random(cfg.seed)
    setup = set_up(cfg, min_feed_s=20.0)
    topics, work = setup.topics, setup.work
    result = FailoverResult(expected=setup.expected, bad_fed=setup.bad)
    say = printer(out)
    say(f"drill failover: {cfg.orders} orders ({setup.bad} bad) over ~{setup.feed_s:.0f}s to {topics.orders}, "
        f"{cfg.kills} failovers, seed {cfg.seed}; work dir {work}")

    # Rounds 3, 6, 9 … die at a fault point, in turn; the others by SIGKILL at random.
    def fault_for(round_n: int) -> str | None:
        return f"{POINTS[(round_n // 3 - 1) % len(POINTS)]}@1" if round_n % 3 == 0 else None

    active, standby = Instance(cfg, topics, work, "a"), Instance(cfg, topics, work, "b")
    feeder = PacedFeeder.spread(cfg.conn, topics.orders, setup.records, setup.feed_s, "drill-feeder")
    feeder.start()

    def feed_now(k: int) -> None:
        """A few more orders at once (with their share of bad ones), into the oracle too."""
        more, counts, bad_more = stream(PROBE_ORDERS, cfg.seed * 1000 + k)
        produce(cfg.conn, more, topic=topics.orders, count=len(more), interval_s=0)
        for drink, n in counts.items():
            result.expected[drink] = result.expected.get(drink, 0) + n
        result.bad_fed += bad_more

    try:
        active.start(standby=False)
        standby.start(standby=True)
        active.wait_for(lambda t: BATCH_PATTERN.search(t) is not None, "to commit its first batch", START_TIMEOUT_S)
        for n in range(1, cfg.kills + 1):
            standby.wait_for(is_standby, "to be a standby", START_TIMEOUT_S)
            how = fault_for(n)
            if how is None:
                time.sleep(rng.uniform(0.0, cfg.max_kill_delay_s))  # a random moment, on purpose
                if active.exited():
                    raise BrewError(f"{active.exited()} before it was killed")
                active.kill()
                killed_at = time.monotonic()
            else:
                active.arm(how)
                feed_now(n * 2)  # a batch for it to die in
                wait_until(active.exited, START_TIMEOUT_S, f"{active.name} to reach its fault point", every=POLL_S)
                killed_at = active.died_at or time.monotonic()
                active.kill()  # anything of its group still standing
            feed_now(n * 2 + 1)
            standby.wait_for(committed_after_takeover, "to take over and commit a batch", TAKEOVER_TIMEOUT_S)
            seconds = time.monotonic() - killed_at
            result.failovers.append(Failover(n, how.split("@")[0] if how else "SIGKILL at random", active.name,
                                             standby.name, seconds))
            say(f"  failover {n}: {active.name} killed ({result.failovers[-1].how}); {standby.name} active after "
                f"{seconds:.2f}s")
            active, standby = standby, active
            standby.start(standby=True)
        feeder.join()
        feeder.finish()  # every order the oracle sums was committed
        try:
            wait_until(lambda: drained(cfg.conn, topics.orders, active.state), DRAIN_TIMEOUT_S,
                       "the last active to count every order", every=1.0, give_up=active.exited)
        except WaitTimedOut as exc:
            raise BrewError(f"{exc}; see {active.log}") from None
        # The last killed instance came back as a standby, as every one before it: a
        # SIGTERM that lands in its start-up is a stop of another kind (exit 143).
        standby.wait_for(is_standby, "to be a standby", START_TIMEOUT_S)
        for inst in (active, standby):
            if inst.stop() != 0:
                raise BrewError(f"{inst.name} did not stop cleanly on SIGTERM; see {inst.log}")
        result.counted = read_counts(active.state)
        result.dlq_records, result.dlq_unique = count_dlq(cfg.conn, topics.dlq)
        result.restored = restore_check(cfg.conn, topics.changelog, work / "restore-check")
    finally:
        feeder.stop()
        for inst in (active, standby):
            inst.kill()
        if not cfg.keep_topics:
            delete_topics(cfg.conn, topics)
    _report(result, say)
    return result


def _report(r: FailoverResult, say: Callable[[str], None]) -> None:
    if r.times:
        say(f"failover (SIGKILL to the new active's first committed batch): median {statistics.median(r.times):.2f}s, "
            f"max {max(r.times):.2f}s over {len(r.times)}")
    r.report(say)
