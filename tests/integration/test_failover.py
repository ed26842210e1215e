"""A hot standby takes over from a killed or paused active, exactly, in seconds."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from restorer.store import StateDir, Store
from sandbox.broker import free_port
from tests.support.daemon import Instance
from tests.support.drink_count import make_orders
from tests.support.feed import Feed
from tests.support.helpers import Pipeline, counts_json, oracle, order_bytes, produce, read_topic
from tests.support.http import get_json
from topics.clock import wait_until

pytestmark = pytest.mark.spark


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
    feed = Feed(pipe, 4000, seed=70, seconds=35)
    feed.start()
    ports = {"a": free_port(), "b": free_port()}
    a = Instance(pipe, tmp_path, "a", "--instance", "a", "--http-port", str(ports["a"])).start()
    # while the active restores and counts
    b = Instance(pipe, tmp_path, "b", "--standby", "--instance", "b", "--http-port", str(ports["b"])).start()

    def answered(at: str, by: str) -> dict[str, Any] | None:
        """/api/counts asked of ``at``, once the instance ``by`` answers it."""
        doc = get_json(ports[at], "/api/counts")
        return doc if doc is not None and doc.get("instance") == by and "stale" not in doc else None

    try:
        b.wait_for("role: standby")
        a.wait_for("INFO batch ")
        # The standby's own disk is lost: it restores from the changelog and follows again.
        b.kill()
        shutil.rmtree(b.state)
        b.start()
        b.wait_for("role: standby")
        wait_until(lambda: a.seq() > 5, 120, "a few batches on the active")
        # Asked of the standby, the active answers: fresh, its tasks running there.
        doc = wait_until(lambda: answered("b", "a"), 60, "the standby to forward a query to the active")
        assert doc["forwarded_by"] == "b" and {t["state"] for t in doc["tasks"].values()} == {"running"}
        a.kill()
        b.wait_for("took over from")
        b.wait_for("role: active")
        assert "forwarded_by" not in wait_until(lambda: answered("b", "b"), 60, "the new active to answer")
        a.start("--standby")  # the killed one is the new standby
        a.wait_for("role: standby")
        assert wait_until(lambda: answered("a", "b"), 60, "the new standby to forward")["forwarded_by"] == "a"
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


def test_a_paused_zombie_commits_nothing_more_and_stands_by(pipe: Pipeline, tmp_path: Path) -> None:
    """SIGSTOP the active past the takeover timeout, let the standby take over, SIGCONT it:
    fenced, it commits nothing more and stands by behind the new active."""
    feed = Feed(pipe, 2000, seed=71, seconds=20)
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
        before_wake = len(a.text())
        a.signal(signal.SIGCONT)
        # Taken over, it stands by behind the new active, whatever it was started as.
        a.wait_for("; back to standby behind ")
        a.wait_for("role: standby")
        after_wake = a.text()[before_wake:]
        assert "role: fenced" in after_wake and "Traceback" not in after_wake, after_wake[-3000:]
        # Nothing more reached its store than the batch it may have had between its two commits.
        woken_batches = [int(s) for s in re.findall(r"INFO batch \d+ \(seq (\d+)\)", after_wake)]
        assert all(s <= paused_seq + 1 for s in woken_batches), after_wake[-3000:]
        feed.join(120)
        wait_until(lambda: drained(pipe, b), 240, "the new active to count every order", every=1.0)
        wait_until(lambda: a.seq() == b.seq(), 120, "the woken one, now a standby, to follow the new active")
        assert a.proc is not None and a.proc.poll() is None, a.text()[-3000:]
        assert a.stop() == 0, a.text()[-3000:]
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
    from tests.support.helpers import brew

    proc = brew(kafka, "drill", "failover", "--orders", "3000", "--kills", "3", "--feed-time", "30s",
                "--max-kill-delay", "2s", "--work-dir", str(tmp_path), timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "verdict: exact" in proc.stdout
    assert proc.stdout.count("  failover ") == 3
    assert "(mid-transaction)" in proc.stdout  # the third round dies at a fault point
    assert "median" in proc.stdout and "max" in proc.stdout


def test_a_woken_zombie_never_costs_the_new_active_its_role(pipe: Pipeline, tmp_path: Path) -> None:
    """Two instances that may both stand by. Again and again, at a random moment, the active
    is frozen (SIGSTOP, a long GC pause or a frozen VM) past the takeover timeout; the other
    takes over; then the frozen one is woken. The woken one goes back to standby; the new
    active keeps its role and its pace throughout, and no older snapshot follows a newer."""
    rng = random.Random(77)
    feed = Feed(pipe, 4000, seed=78, seconds=60)
    feed.start()
    a = Instance(pipe, tmp_path, "a", "--standby").start()  # the first to find no active takes the lease
    b = Instance(pipe, tmp_path, "b", "--standby").start()
    gaps: list[tuple[float, float]] = []
    try:
        wait_until(lambda: "role: active" in a.text() + b.text(), 180, "one instance to be active")
        active, other = (a, b) if "role: active" in a.text() else (b, a)
        other.wait_for("role: standby")
        # Both may find the lease free at once: the later claim yields, it is never fenced.
        assert "role: fenced" not in a.text() + b.text(), a.text()[-2000:] + b.text()[-2000:]
        for cycle in range(3):
            gaps.append(_freeze_take_over_and_wake(active, other, rng, cycle, feed))
            active, other = other, active
        print(f"longest gap between batches before the freeze and after the wake, each round: {gaps}")
        # A woken zombie once cost the new active its role: 3-4 s with no active, ~6 s without a batch.
        for before, after in gaps:
            assert after < max(4.0, before + 1.5), gaps
        feed.join(180)
        wait_until(lambda: drained(pipe, active), 240, "the active to count every order", every=1.0)
        assert active.stop() == 0 and other.stop() == 0
    finally:
        feed.done.set()
        for inst in (a, b):
            if inst.proc is not None and inst.proc.poll() is None:
                inst.signal(signal.SIGCONT)
                inst.kill()
    assert_exact(pipe, active, feed, tmp_path)
    snapshots = [json.loads(m.value()) for m in read_topic(pipe.conn, pipe.topics.counts)]
    processed = [s["processed_orders"] for s in snapshots]
    assert processed == sorted(processed), "a snapshot carried an older count after a newer one"
    seqs = [s["seq"] for s in snapshots]
    assert seqs == sorted(set(seqs)), "a snapshot's seq went back across a takeover"


def _freeze_take_over_and_wake(active: Instance, other: Instance, rng: random.Random, cycle: int,
                               feed: Feed) -> tuple[float, float]:
    """One round: ``active`` frozen at a random moment, ``other`` takes over, ``active`` woken
    and back to standby; ``other`` keeps its role. The longest gap between batches, with
    input always waiting: on ``active`` before the freeze, on ``other`` after the wake."""
    wait_until(lambda: "INFO batch " in active.text(), 180, f"{active.name} to count")
    before = _longest_gap_between_batches(active, 4.0, feed, seed=1000 * cycle + 100)
    time.sleep(rng.uniform(0.2, 2.5))  # a random moment of its work
    takeovers = other.text().count("took over from")
    active.signal(signal.SIGSTOP)
    wait_until(lambda: other.text().count("took over from") > takeovers, 120,
               f"{other.name} to take over (cycle {cycle})")
    batches = other.text().count("INFO batch ")
    wait_until(lambda: other.text().count("INFO batch ") >= batches + 2, 120, f"batches on {other.name}")
    mark = len(other.text())
    active.signal(signal.SIGCONT)
    after = _longest_gap_between_batches(other, 8.0, feed, seed=1000 * cycle + 500)
    active.wait_for("back to standby")
    wait_until(lambda: active.text().rfind("role: standby") > active.text().rfind("back to standby"), 120,
               f"the woken {active.name} to stand by again")
    said = other.text()[mark:]
    assert not re.search(r"role: (standby|fenced|starting|restoring)|back to standby", said), said[-3000:]
    return before, after


def _longest_gap_between_batches(inst: Instance, seconds: float, feed: Feed, seed: int) -> float:
    """Watch ``inst``'s store for ``seconds`` while a few orders arrive every 0.25 s: the
    longest time its batch number stood still."""
    last_seq, last_change, longest = inst.seq(), time.monotonic(), 0.0
    end = last_change + seconds
    while time.monotonic() < end:
        feed.more(5, seed=seed)
        seed += 1
        seq = inst.seq()
        now = time.monotonic()
        if seq != last_seq:
            longest = max(longest, now - last_change)
            last_seq, last_change = seq, now
        time.sleep(0.25)
    return max(longest, time.monotonic() - last_change)


def test_a_windows_standby_takes_over_exactly(pipe: Pipeline, tmp_path: Path) -> None:
    """`windows --standby` follows the active's changelog; after a SIGKILL of the active
    mid-stream it takes over, and every window is emitted once with the oracle's count."""
    from tests.support.windows import MIN, on_time_stream, results, send
    from tests.support.windows import oracle as window_oracle

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


def test_a_windows_standby_of_another_shape_refuses_as_it_starts_following(pipe: Pipeline, spark: Any,
                                                                           tmp_path: Path) -> None:
    """A standby with other window flags than the store its changelog holds could never take
    over: it says so once it has read the changelog, never `ready: standby` first."""
    from service.engine.contract import RunConfig
    from service.windows.assign import WindowSpec
    from service.windows.pipeline import TableConfig, run
    from service.windows.step import WindowsConfig
    from tests.support.windows import MIN, on_time_stream, send

    send(pipe, on_time_stream(40))
    minute = WindowsConfig(WindowSpec.tumbling(MIN, 0), MIN, 3_600_000, False, MIN)
    active = RunConfig(pipe.conn, tmp_path / "a" / "state", tmp_path / "a" / "ckpt", available_now=True,
                       topics=pipe.topics)
    assert run(active, minute, TableConfig(60, 8), start_from="earliest", spark=spark) == 0
    log = tmp_path / "b.log"
    standby = pipe.spawn("windows", "--standby", "--window", "2m", "--state-dir", str(tmp_path / "b" / "state"),
                         "--checkpoint-dir", str(tmp_path / "b" / "ckpt"), log=log)
    try:
        assert standby.wait(300) == 1, log.read_text()[-3000:]
    finally:
        if standby.poll() is None:
            standby.kill()
    text = log.read_text()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert lines[-1].startswith("brewstream: error: this standby could not take over: the state dir ")
    assert "holds windows of another shape" in lines[-1] and "start it with the active's flags" in lines[-1]
    assert "role: standby" not in text and "role: active" not in text and "Traceback" not in text, text[-3000:]
