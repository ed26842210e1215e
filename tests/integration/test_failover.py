"""A hot standby takes over from a killed or paused active, exactly, in seconds."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from restorer.store import StateDir, Store
from tests.corpus import BAD_ORDERS
from tests.helpers import Pipeline, counts_json, oracle, order_bytes, produce, read_topic
from tests.integration.test_drink_count import make_orders
from topics.clock import wait_until

pytestmark = pytest.mark.spark


class Instance:
    """One `brewstream run` process group, with its own state dir, checkpoint and log."""

    def __init__(self, pipe: Pipeline, root: Path, name: str, *extra: str) -> None:
        self.pipe, self.name = pipe, name
        self.state, self.ckpt, self.log = root / name / "state", root / name / "ckpt", root / f"{name}.log"
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *more: str) -> Instance:
        self.proc = self.pipe.spawn("run", "--state-dir", str(self.state), "--checkpoint-dir", str(self.ckpt),
                                    "--flush", "1s", "--trigger", "200ms", "--max-offsets-per-trigger", "400",
                                    *self.extra, *more, log=self.log)
        return self

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_for(self, fragment: str, timeout: float = 180) -> None:
        def seen() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None and fragment not in self.text():
                raise AssertionError(f"{self.name} exited {self.proc.returncode}:\n{self.text()[-3000:]}")
            return fragment in self.text()
        wait_until(seen, timeout, f"{self.name} to log {fragment!r}")

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        assert self.proc is not None
        self.proc.wait(30)

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(120)

    def seq(self) -> int:
        with Store(StateDir(self.state).store_path, read_only=True) as store:
            return store.last_seq()


class Feed(threading.Thread):
    """Orders (about 1% bad) produced over ``seconds``, with their oracle."""

    def __init__(self, pipe: Pipeline, n: int, seed: int, seconds: float) -> None:
        super().__init__(daemon=True)
        self.pipe = pipe
        self.good = make_orders(n, seed)
        self.records: list[tuple[bytes | None, bytes | None]] = [order_bytes(o) for o in self.good]
        for i, (_, raw, _) in enumerate(BAD_ORDERS[: max(1, n // 100)]):
            self.records.insert(i * 53 % len(self.records), (b"bad", raw))
        self.bad = len(self.records) - len(self.good)
        self.chunks = 20
        self.pause = seconds / self.chunks
        self.done = threading.Event()

    def more(self, n: int, seed: int) -> None:
        """``n`` more good orders at once (so a new active has a batch to commit)."""
        orders = make_orders(n, seed)
        produce(self.pipe.conn, self.pipe.topics.orders, (order_bytes(o) for o in orders))
        self.good += orders

    def run(self) -> None:
        size = -(-len(self.records) // self.chunks)
        for i in range(0, len(self.records), size):
            produce(self.pipe.conn, self.pipe.topics.orders, self.records[i:i + size])
            if self.done.wait(self.pause):
                return
        self.done.set()


def drained(pipe: Pipeline, inst: Instance) -> bool:
    from confluent_kafka import Consumer, TopicPartition

    with Store(StateDir(inst.state).store_path, read_only=True) as store:
        stored = store.next_offsets(pipe.topics.orders)
    c = Consumer({"bootstrap.servers": pipe.conn.bootstrap, "group.id": "t"})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(pipe.topics.orders, p), timeout=10)[1] for p in range(3)}
    finally:
        c.close()
    return all(stored.get(p, 0) >= e for p, e in ends.items() if e > 0)


def assert_exact(pipe: Pipeline, inst: Instance, feed: Feed, tmp_path: Path) -> None:
    assert counts_json(pipe.conn, inst.state)["counts"] == oracle(feed.good)
    dlq = read_topic(pipe.conn, pipe.topics.dlq)
    sources = {(dict(m.headers())["source-partition"], dict(m.headers())["source-offset"]) for m in dlq}
    assert len(dlq) == len(sources) == feed.bad
    pipe.brew("restore", "--state-dir", str(tmp_path / "restored"), check=True)
    assert counts_json(pipe.conn, tmp_path / "restored")["counts"] == oracle(feed.good)


def test_a_standby_takes_over_from_a_killed_active(pipe: Pipeline, tmp_path: Path) -> None:
    """Mid-stream SIGKILL of the active; the killed one comes back as the new standby and
    takes over in its turn. The standby starts while the active is mid-batch, and loses
    its own disk once."""
    feed = Feed(pipe, 4000, seed=70, seconds=70)
    feed.start()
    a = Instance(pipe, tmp_path, "a").start()
    b = Instance(pipe, tmp_path, "b", "--standby").start()  # while the active restores and counts
    try:
        b.wait_for("role: standby")
        a.wait_for("INFO batch ")
        # The standby's own disk is lost: it restores from the changelog and follows again.
        b.kill()
        shutil.rmtree(b.state)
        b.start()
        b.wait_for("role: standby")
        wait_until(lambda: a.seq() > 5, 120, "a few batches on the active")
        a.kill()
        b.wait_for("took over from")
        b.wait_for("role: active")
        a.start("--standby")  # the killed one is the new standby
        a.wait_for("role: standby")
        feed.more(100, seed=77)
        wait_until(lambda: "INFO batch " in b.text(), 120, "batches on the new active")
        b.kill()
        a.wait_for("took over from")
        feed.more(100, seed=78)
        feed.join(120)
        wait_until(lambda: drained(pipe, a), 240, "the new active to count every order", every=1.0)
        assert a.stop() == 0, a.text()[-3000:]
    finally:
        feed.done.set()
        for inst in (a, b):
            if inst.proc is not None and inst.proc.poll() is None:
                inst.kill()
    assert_exact(pipe, a, feed, tmp_path)


def test_a_paused_zombie_commits_nothing_more(pipe: Pipeline, tmp_path: Path) -> None:
    """SIGSTOP the active past the takeover timeout, let the standby take over, SIGCONT it."""
    feed = Feed(pipe, 2000, seed=71, seconds=40)
    feed.start()
    a = Instance(pipe, tmp_path, "a").start()
    b = Instance(pipe, tmp_path, "b", "--standby").start()
    try:
        b.wait_for("role: standby")
        wait_until(lambda: a.seq() > 3, 180, "a few batches on the active")
        a.signal(signal.SIGSTOP)
        b.wait_for("took over from")
        feed.more(50, seed=75)
        wait_until(lambda: "INFO batch " in b.text(), 120, "a batch on the new active")
        feed.more(50, seed=76)
        wait_until(lambda: b.text().count("INFO batch ") >= 2, 120, "batches on the new active")
        paused_seq = a.seq()
        a.signal(signal.SIGCONT)
        assert a.proc is not None
        assert a.proc.wait(120) == 1, a.text()[-3000:]
        last = a.text().strip().splitlines()[-1]
        assert last.startswith("brewstream: error: ") and ("took the lease over" in last or "fenced" in last), last
        # Nothing more reached its store than the batch it may have had between its two commits.
        assert a.seq() <= paused_seq + 1
        assert "role: fenced" in a.text()
        feed.join(120)
        wait_until(lambda: drained(pipe, b), 240, "the new active to count every order", every=1.0)
        assert b.stop() == 0, b.text()[-3000:]
    finally:
        feed.done.set()
        for inst in (a, b):
            if inst.proc is not None and inst.proc.poll() is None:
                inst.signal(signal.SIGCONT)
                inst.kill()
    assert_exact(pipe, b, feed, tmp_path)


def test_status_shows_the_roles(pipe: Pipeline, tmp_path: Path) -> None:
    produce(pipe.conn, pipe.topics.orders, (order_bytes(o) for o in make_orders(200, seed=72)))
    a = Instance(pipe, tmp_path, "a").start()
    b = Instance(pipe, tmp_path, "b", "--standby").start()
    try:
        b.wait_for("role: standby")
        a.wait_for("INFO batch ")
        status: Any = pipe.brew("status", "--state-dir", str(b.state), "--json", check=True)
        import json

        doc = json.loads(status.stdout)
        roles = sorted(i["role"] for i in doc["instances"])
        assert roles == ["active", "standby"], doc
        assert doc["role"] == "standby"
    finally:
        for inst in (a, b):
            if inst.proc is not None and inst.proc.poll() is None:
                inst.stop()


def test_a_short_failover_drill_is_exact(kafka: Any, tmp_path: Path) -> None:
    from tests.helpers import brew

    proc = brew(kafka, "drill", "failover", "--orders", "3000", "--kills", "3", "--feed-time", "60s",
                "--max-kill-delay", "2s", "--work-dir", str(tmp_path), timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "verdict: exact" in proc.stdout
    assert proc.stdout.count("  failover ") == 3
    assert "(mid-transaction)" in proc.stdout  # the third round dies at a fault point
    assert "median" in proc.stdout and "max" in proc.stdout


def test_a_fenced_active_that_may_stand_by_goes_back_to_standby(pipe: Pipeline, tmp_path: Path) -> None:
    feed = Feed(pipe, 1500, seed=73, seconds=30)
    feed.start()
    a = Instance(pipe, tmp_path, "a", "--standby").start()  # no active yet: it takes the lease at once
    try:
        a.wait_for("role: active")
        b = Instance(pipe, tmp_path, "b", "--standby").start()
        b.wait_for("role: standby")
        a.signal(signal.SIGSTOP)
        b.wait_for("took over from")
        feed.more(50, seed=74)
        wait_until(lambda: "INFO batch " in b.text(), 120, "a batch on the new active")
        a.signal(signal.SIGCONT)
        a.wait_for("back to standby")
        wait_until(lambda: a.text().rfind("role: standby") > a.text().find("back to standby"), 120,
                   "the fenced active to stand by again")
        feed.join(120)
        wait_until(lambda: drained(pipe, b), 240, "the new active to count every order", every=1.0)
        assert b.stop() == 0 and a.stop() == 0
    finally:
        feed.done.set()
        for inst in (a, locals().get("b")):
            if isinstance(inst, Instance) and inst.proc is not None and inst.proc.poll() is None:
                inst.signal(signal.SIGCONT)
                inst.kill()
    assert_exact(pipe, b, feed, tmp_path)


def test_a_windows_standby_takes_over_exactly(pipe: Pipeline, tmp_path: Path) -> None:
    """`windows --standby` follows the active's changelog; after a SIGKILL of the active
    mid-stream it takes over, and every window is emitted once with the oracle's count."""
    from tests.integration.test_windows import MIN, on_time_stream, results, send
    from tests.integration.test_windows import oracle as window_oracle

    events = on_time_stream(300)
    push = ("shop-00", events[-1][1] + 60 * MIN)  # closes every window before it
    send(pipe, events[:150])

    def start(name: str, *extra: str) -> subprocess.Popen[bytes]:
        return pipe.spawn("windows", "--state-dir", str(tmp_path / name / "state"),
                          "--checkpoint-dir", str(tmp_path / name / "ckpt"), "--from", "earliest",
                          "--max-offsets-per-trigger", "40", "--watermark-delay", "0", "--trigger", "200ms",
                          *extra, log=tmp_path / f"{name}.log")

    def text(name: str) -> str:
        log = tmp_path / f"{name}.log"
        return log.read_text(errors="replace") if log.exists() else ""

    active, standby = start("a"), start("b", "--standby")
    try:
        wait_until(lambda: "role: standby" in text("b"), 240, "the windows standby to follow")
        wait_until(lambda: text("a").count("INFO batch ") >= 2, 240, "batches on the windows active")
        os.killpg(active.pid, signal.SIGKILL)
        active.wait(30)
        wait_until(lambda: "took over from" in text("b"), 120, "the windows standby to take over")
        send(pipe, [*events[150:], push])
        expected = window_oracle(events, MIN)
        wait_until(lambda: len({r["start"] for r in results(pipe)}) >= len(expected), 240,
                   "every window to be emitted", every=1.0)
        standby.send_signal(signal.SIGTERM)
        assert standby.wait(120) == 0, text("b")[-3000:]
    finally:
        for proc in (active, standby):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
    finals = results(pipe)
    starts = [r["start"] for r in finals]
    assert len(starts) == len(set(starts)), "a window was emitted twice"
    assert {r["start"]: r["count"] for r in finals} == expected
