"""Event-time windows on a real broker, real Spark and real RocksDB."""

from __future__ import annotations

import dataclasses
import json
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from restorer.restore import restore_store
from restorer.store import Store
from restorer.tasks import BY_WHOLE_KEY, task_of
from service.engine.contract import RunConfig
from service.records.event_time import DEFAULT_MAX_AHEAD_NS, MAX_AHEAD_LIMIT_NS
from service.windows import pipeline as windows_pipeline
from service.windows.assign import WindowSpec
from service.windows.pipeline import TableConfig, run
from service.windows.state import ROUTING as WINDOWS_ROUTING
from service.windows.state import check_value, decode_windows_state, state_key
from service.windows.step import WindowsConfig
from service.windows.wing import WING as WINDOWS_WING
from tests.support.helpers import Pipeline, read_topic
from tests.support.windows import MIN, at, iso, on_time_stream, oracle, results, send
from topics.event_time import encode_event_time
from topics.partitioner import murmur2_partition

pytestmark = pytest.mark.spark









def run_windows(pipe: Pipeline, spark: Any, dirs: dict[str, Path], spec: WindowSpec, **kw: Any) -> int:
    cfg = WindowsConfig(spec, kw.pop("delay", MIN), kw.pop("idle_ms", 3_600_000), kw.pop("early", False),
                        kw.pop("table_ns", MIN), max_ahead_ns=kw.pop("max_ahead", DEFAULT_MAX_AHEAD_NS))
    reset = kw.pop("reset_watermark", False)
    common = RunConfig(pipe.conn, dirs["state"], dirs["ckpt"], available_now=True, topics=pipe.topics, **kw)
    return run(common, cfg, TableConfig(60, 8), start_from="earliest", spark=spark, reset_watermark=reset)




def test_textbook_case_on_the_real_pipeline(pipe: Pipeline, spark: Any, dirs: dict[str, Path]) -> None:
    # Seed 03, worked example 2; one record per batch so the watermark moves between them.
    send(pipe, [("shop-01", at(t)) for t in ("10:01", "10:04", "10:09", "10:12", "10:08", "10:14", "10:07")])
    spec = WindowSpec.tumbling(10 * MIN, 2 * MIN)
    assert run_windows(pipe, spark, dirs, spec, max_offsets_per_trigger=1) == 0

    first = [r for r in results(pipe) if r["start"] == iso(at("10:00"))]
    assert len(first) == 1, first  # emitted once, final
    assert (first[0]["count"], first[0]["late_accepted"], first[0]["emit"]) == (4, 1, "final")
    assert first[0]["amount"] == 10.0
    late = read_topic(pipe.conn, pipe.topics.late_events)
    assert len(late) == 1
    headers = dict(late[0].headers())
    assert headers["event-time"] == encode_event_time(at("10:07"))
    assert headers["window"].decode() == f"tumbling/{iso(at('10:00'))}/{iso(at('10:10'))}"
    assert headers["watermark"].decode() == iso(at("10:13"))


def test_early_results_and_revisions(pipe: Pipeline, spark: Any, dirs: dict[str, Path]) -> None:
    send(pipe, [("shop-01", at(t)) for t in ("10:01", "10:04", "10:09", "10:12", "10:08", "10:14", "10:07")])
    spec = WindowSpec.tumbling(10 * MIN, 2 * MIN)
    assert run_windows(pipe, spark, dirs, spec, max_offsets_per_trigger=1, early=True) == 0
    first = [(r["emit"], r["count"]) for r in results(pipe) if r["start"] == iso(at("10:00"))]
    assert first == [("early", 3), ("revision", 4), ("final", 4)]


def test_hopping_windows(pipe: Pipeline, spark: Any, dirs: dict[str, Path]) -> None:
    send(pipe, [("s", at("10:03", 20)), ("s", at("10:04", 10)), ("s", at("10:30"))])
    assert run_windows(pipe, spark, dirs, WindowSpec.hopping(5 * MIN, MIN), max_offsets_per_trigger=1,
                       delay=0) == 0
    finals = sorted((r["start"], r["count"]) for r in results(pipe))
    # 10:03:20 falls in the windows starting 09:59..10:03, 10:04:10 in those starting 10:00..10:04.
    counts = {"09:59": 1, "10:00": 2, "10:01": 2, "10:02": 2, "10:03": 2, "10:04": 1}
    assert finals == [(iso(at(h)), n) for h, n in counts.items()]


def test_session_windows_per_shop(pipe: Pipeline, spark: Any, dirs: dict[str, Path]) -> None:
    base = at("10:00")
    s = 10**9
    send(pipe, [("a", base), ("b", base + 5 * s), ("a", base + 20 * s), ("a", base + 45 * s), ("b", base + 100 * s),
                ("a", base + 300 * s)])
    assert run_windows(pipe, spark, dirs, WindowSpec.session(30 * s), max_offsets_per_trigger=2, delay=0) == 0
    finals = sorted((r["key"], r["start"], r["end"], r["count"]) for r in results(pipe))
    assert finals == [
        ("a", iso(base), iso(base + 75 * s), 3),
        ("b", iso(base + 5 * s), iso(base + 35 * s), 1),
        ("b", iso(base + 100 * s), iso(base + 130 * s), 1),
    ]


def test_windows_routed_by_their_start_are_refused_then_republished_by_their_key(
        pipe: Pipeline, spark: Any, dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """A windows changelog of an earlier brewstream, which routed each window by its start
    too, is refused in one line naming the command; that command moves every window to its
    key's task, and the sessions go on from there, exact."""
    base, s, gap = at("10:00"), 10**9, 60 * 10**9
    shops = [f"shop-{k}" for k in range(5)]
    spec = WindowSpec.session(gap)
    send(pipe, [(shop, base + (k + d) * s) for d in (0, 10, 20) for k, shop in enumerate(shops)])
    with monkeypatch.context() as earlier:  # the rule before: windows by their whole store key
        earlier.setattr(windows_pipeline, "WING", dataclasses.replace(WINDOWS_WING, routing=BY_WHOLE_KEY))
        assert run_windows(pipe, spark, dirs, spec, max_offsets_per_trigger=5, delay=0) == 0
    legacy = [m for m in read_topic(pipe.conn, pipe.topics.windows_changelog) if (m.key() or b"")[:1] == b"w"]
    assert any(m.partition() != task_of(m.key(), 3, WINDOWS_ROUTING) for m in legacy), "nothing to move"

    flags = ["--state-dir", str(dirs["state"]), "--checkpoint-dir", str(dirs["ckpt"]), "--available-now",
             "--from", "earliest", "--session-gap", "60s", "--watermark-delay", "0"]
    refused = pipe.brew("windows", *flags)
    assert refused.returncode == 1, refused.stderr[-2000:]
    line = refused.stderr.strip().splitlines()[-1]
    assert line.startswith(f"brewstream: error: changelog {pipe.topics.windows_changelog} was written with its "
                           "keys routed"), line
    assert "run `brewstream republish-changelog --store windows --partitions 3`" in line
    assert "Traceback" not in refused.stderr

    pipe.brew("republish-changelog", "--store", "windows", "--state-dir", str(dirs["state"]), "--partitions", "3",
              check=True)
    send(pipe, [(shop, base + (k + d) * s) for d in (40, 50) for k, shop in enumerate(shops)])
    send(pipe, [("closer", base + 1000 * s)])
    assert run_windows(pipe, spark, dirs, spec, max_offsets_per_trigger=5, delay=0) == 0
    finals = sorted((r["key"], r["start"], r["end"], r["count"]) for r in results(pipe))
    assert finals == [(shop, iso(base + k * s), iso(base + (k + 50) * s + gap), 5) for k, shop in enumerate(shops)]
    routed = [m for m in read_topic(pipe.conn, pipe.topics.windows_changelog) if (m.key() or b"")[:1] == b"w"]
    assert routed and all(m.partition() == murmur2_partition(state_key(m.key()), 3) for m in routed)
    assert {state_key(m.key()) for m in routed} >= {shop.encode() for shop in shops}


def test_an_idle_partition_stops_holding_the_watermark(pipe: Pipeline, spark: Any, dirs: dict[str, Path]) -> None:
    send(pipe, [("a", at("10:00"))], partition=0)
    send(pipe, [("b", at("10:00"))], partition=1)
    send(pipe, [("a", at("10:05"))], partition=0)
    spec = WindowSpec.tumbling(MIN)
    assert run_windows(pipe, spark, dirs, spec, delay=0, idle_ms=2_000) == 0
    assert results(pipe) == []  # partition 1 holds the watermark at 10:00
    time.sleep(2.5)  # processing time is the input here: partition 1 becomes idle
    send(pipe, [("a", at("10:06"))], partition=0)
    assert run_windows(pipe, spark, dirs, spec, delay=0, idle_ms=2_000) == 0
    assert sorted(r["start"] for r in results(pipe)) == [iso(at("10:00")), iso(at("10:05"))]






def test_kill9_between_batches_then_restore_is_exact(
        pipe: Pipeline, spark: Any, dirs: dict[str, Path], tmp_path: Path) -> None:
    events = on_time_stream(300)
    push = ("shop-00", events[-1][1] + 60 * MIN)  # closes every window before it
    send(pipe, [*events, push])
    log = tmp_path / "crash.log"
    crashed = pipe.spawn("windows", "--state-dir", str(dirs["state"]), "--checkpoint-dir", str(dirs["ckpt"]),
                         "--from", "earliest", "--available-now", "--max-offsets-per-trigger", "40",
                         "--watermark-delay", "0", env={"BREWSTREAM_FAULT": "after-changelog-commit@3"}, log=log)
    assert crashed.wait(300) == -signal.SIGKILL, log.read_text()[-3000:]

    # Disk lost as well: restore the window state by hand, then finish the stream.
    shutil.rmtree(dirs["state"])
    restored = pipe.brew("restore", "--store", "windows", "--state-dir", str(dirs["state"]), check=True)
    assert restored.stdout.startswith("restore done:")
    assert run_windows(pipe, spark, dirs, WindowSpec.tumbling(MIN), max_offsets_per_trigger=40, delay=0) == 0

    finals = results(pipe)
    starts = [r["start"] for r in finals]
    assert len(starts) == len(set(starts)), "a window was emitted twice"
    assert {r["start"]: r["count"] for r in finals} == oracle(events, MIN)
    with Store(dirs["state"] / "store", read_only=True) as store:
        state = decode_windows_state(store.items())
    assert [w.start_ns for w in state.windows.values()] == [push[1] - push[1] % MIN]  # only the open one


# --- clocks far ahead ----------------------------------------------------------------------

YEAR = 365 * 86_400 * 10**9
HOUR = 60 * MIN
SEC = 10**9


def recent_base() -> int:
    """A minute boundary half an hour ago: real event times near this machine's clock."""
    now = time.time_ns()
    return now - now % MIN - 30 * MIN


def send_stamped(pipe: Pipeline, records: list[tuple[str, int, int]], partition: int = 0) -> None:
    """(shop, event_ns, Kafka timestamp ns) triples, in this order, to one partition."""
    p = Producer({"bootstrap.servers": pipe.conn.bootstrap, "enable.idempotence": True})
    for shop, t, ts in records:
        value = json.dumps({"shop_id": shop, "drink": "latte", "amount": 2.5}).encode()
        p.produce(pipe.topics.events, key=shop.encode(), value=value, partition=partition,
                  headers=[("event-time", encode_event_time(t))], timestamp=ts // 10**6)
    assert p.flush(10) == 0


def real(times: list[int]) -> list[tuple[str, int, int]]:
    """Real events: written a second after they happened."""
    return [(f"shop-{i % 4}", t, t + SEC) for i, t in enumerate(times)]


def test_clocks_far_ahead_leave_the_real_windows_exact(pipe: Pipeline, spark: Any, dirs: dict[str, Path]) -> None:
    """A year ahead, 2^63 and 2^63-1 ns, and a till whose clock jumped an hour ahead, in one
    partition between real events: the DLQ, and the real windows as if they were not there."""
    base = recent_base()
    times = [base + i * 5 * SEC for i in range(120)]  # ten minutes of real events
    records = real(times)
    hostile = [("till-9", times[30] + YEAR, times[30]), ("till-9", 2**63, times[30]),
               ("till-9", 2**63 - 1, times[30])]
    hostile += [("till-7", t + HOUR, t + SEC) for t in times[60:70]]  # its clock jumped an hour ahead
    behind = ("till-3", times[90] - 3 * HOUR, times[90])  # an offline till's order: late, not bad
    stream = records[:30] + hostile[:3] + records[30:60] + hostile[3:] + records[60:90] + [behind] + records[90:]
    closer = ("shop-0", times[-1] + 5 * MIN, times[-1] + 5 * MIN)
    send_stamped(pipe, [*stream, closer])

    assert run_windows(pipe, spark, dirs, WindowSpec.tumbling(MIN), max_offsets_per_trigger=25) == 0

    finals = results(pipe)
    assert len({r["start"] for r in finals}) == len(finals), "a window was emitted twice"
    assert {r["start"]: r["count"] for r in finals} == oracle([(s, t) for s, t, _ in records], MIN)
    dlq = read_topic(pipe.conn, pipe.topics.dlq)
    bad = {(int(dict(m.headers())["source-offset"]), dict(m.headers())["error"].decode()) for m in dlq}
    offsets = {i for i, r in enumerate(stream) if r in hostile}
    assert {o for o, _ in bad} == offsets and len(dlq) == len(hostile)
    reasons = sorted(r for _, r in bad)
    assert sum("365d0h ahead of the record's Kafka timestamp, over the 1m limit" in r for r in reasons) == 1
    assert sum("ns out of range" in r for r in reasons) == 2
    assert sum(r.startswith("event time 59m59s ahead") for r in reasons) == 10, reasons
    by_source = sorted(dlq, key=lambda m: int(dict(m.headers())["source-offset"]))
    assert [m.value() for m in by_source] == [
        json.dumps({"shop_id": s, "drink": "latte", "amount": 2.5}).encode() for s, _, _ in hostile]  # whole
    late = read_topic(pipe.conn, pipe.topics.late_events)
    assert [dict(m.headers())["event-time"] for m in late] == [encode_event_time(behind[1])]
    with Store(dirs["state"] / "store", read_only=True) as store:
        state = decode_windows_state(store.items())
    assert state.clocks[0].max_event_ns == closer[1]


def test_a_poisoned_store_is_refused_then_repaired(pipe: Pipeline, spark: Any, dirs: dict[str, Path],
                                                   tmp_path: Path) -> None:
    base = recent_base()
    first = real([base + i * 5 * SEC for i in range(60)])  # 10 min .. 5 min ago: five windows
    poison = ("till-9", base + 5 * MIN + YEAR, base + 5 * MIN)
    under_poison = real([base + 5 * MIN + i * 5 * SEC for i in range(36)])  # late under the poison
    send_stamped(pipe, [*first, poison, *under_poison])
    # The old way: no bound worth the name (ten years), as before --max-event-time-ahead.
    assert run_windows(pipe, spark, dirs, WindowSpec.tumbling(MIN), max_offsets_per_trigger=30,
                       max_ahead=MAX_AHEAD_LIMIT_NS) == 0
    late_under_poison = len(read_topic(pipe.conn, pipe.topics.late_events))
    assert late_under_poison > 0  # real events after the poison's batch: all late
    closed_early = {r["start"] for r in results(pipe)}

    # The daemon notices, before Spark starts, and says what to run.
    flags = ["--state-dir", str(dirs["state"]), "--checkpoint-dir", str(dirs["ckpt"]), "--available-now",
             "--from", "earliest"]
    refused = pipe.brew("windows", *flags)
    assert refused.returncode == 1, refused.stderr[-2000:]
    line = refused.stderr.strip().splitlines()[-1]
    assert line.startswith("brewstream: error: the clock of ") and "ahead of its newest input record" in line, line
    assert "run `brewstream windows --reset-watermark` once" in line and "Traceback" not in refused.stderr

    assert run_windows(pipe, spark, dirs, WindowSpec.tumbling(MIN), reset_watermark=True) == 0
    with Store(dirs["state"] / "store", read_only=True) as store:
        repaired = decode_windows_state(store.items())
    latest = under_poison[-1][1]
    assert repaired.clocks[0].max_event_ns == latest
    assert repaired.watermark_ns == latest - latest % MIN + MIN  # the end of the window holding it
    assert repaired.windows == {}  # the poison's own window, dropped
    # The repair is a committed batch of the changelog: a restore gives the same state.
    restore_store(pipe.conn, pipe.topics.windows_changelog, tmp_path / "restored", False, False, check_value)
    with Store(tmp_path / "restored" / "store", read_only=True) as store:
        restored = decode_windows_state(store.items())
    assert (restored.clocks, restored.watermark_ns, restored.windows, restored.by_event) == \
        (repaired.clocks, repaired.watermark_ns, repaired.windows, repaired.by_event)

    # Real events from now on: exact windows; one in a window the poison closed is late.
    after = real([base + 8 * MIN + i * 5 * SEC for i in range(48)])
    sealed = ("shop-1", latest + 2 * SEC, latest + 3 * SEC)
    closer = ("shop-0", base + 20 * MIN, base + 20 * MIN)
    send_stamped(pipe, [sealed, *after, closer])
    assert run_windows(pipe, spark, dirs, WindowSpec.tumbling(MIN), max_offsets_per_trigger=30) == 0
    finals = results(pipe)
    assert len({r["start"] for r in finals}) == len(finals), "a window was emitted twice"
    new = {r["start"]: r["count"] for r in finals if r["start"] not in closed_early}
    assert new == oracle([(s, t) for s, t, _ in after], MIN)
    late = read_topic(pipe.conn, pipe.topics.late_events)
    assert len(late) == late_under_poison + 1
    assert encode_event_time(sealed[1]) in {dict(m.headers())["event-time"] for m in late}
    assert read_topic(pipe.conn, pipe.topics.dlq) == []
