"""A small batch is windowed by the driver from rows the JVM carries to it; a large one (or
one the checkpoint cannot size, or with a row too big to carry) by Spark's Python
workers. Both must judge every row the same way: on real Spark, the same rows give the
same partial results either way."""

from __future__ import annotations

import random
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from service.spark.carried import carry_rows, read_carried_rows
from service.windows.aggregate import DRIVER_ROW_BYTES, DRIVER_TASK_BYTES, WindowBatch, aggregate_events
from service.windows.assign import WindowSpec
from service.windows.watermark import closed
from topics.event_time import EVENT_TIME, encode_event_time

pytestmark = pytest.mark.spark

MIN = 60 * 10**9
T0 = int(datetime(2026, 11, 22, 10, 0, tzinfo=UTC).timestamp()) * 10**9
SCHEMA = ("key binary, value binary, partition int, offset long, timestamp timestamp, "
          "headers array<struct<key:string,value:binary>>")


def corpus(seed: int, big: bool = False) -> list[tuple[Any, ...]]:
    """On-time, late, headerless and bad events over three partitions; with ``big``, rows
    too big for the driver too."""
    rnd = random.Random(seed)
    rows = []
    offsets = [0, 0, 0]
    for _ in range(400):
        p = rnd.randrange(3)
        shop = f"shop-{rnd.randrange(6)}"
        event_ns = T0 + rnd.randrange(20 * MIN) - (15 * MIN if rnd.random() < 0.1 else 0)
        value: bytes | None = orjson.dumps({"shop_id": shop, "drink": rnd.choice(["latte", "tea"]),
                                            "amount": rnd.randrange(1, 900) / 100})
        headers: list[tuple[str, bytes | None]] | None = [(EVENT_TIME, encode_event_time(event_ns))]
        kind = rnd.random()
        if kind < 0.05:
            value = b"not json " + bytes([rnd.randrange(256)])
        elif kind < 0.08 and big:
            value = orjson.dumps({"shop_id": shop, "drink": "x" * (DRIVER_ROW_BYTES + 10), "amount": 1})
        elif kind < 0.10:
            # Headers beside the event time (the driver's rows carry them as the workers' do).
            size = DRIVER_ROW_BYTES + 1 if big else 300
            headers = [("trace", b"t" * size), ("empty", None), (EVENT_TIME, encode_event_time(event_ns))]
        elif kind < 0.13:
            headers = None
        elif kind < 0.15:
            value = None
        ts = datetime.fromtimestamp((T0 + 20 * MIN) / 1e9, tz=UTC)
        rows.append((shop.encode(), value, p, offsets[p], ts, headers))
        offsets[p] += 1
    return rows


def normalized(b: WindowBatch, spec: WindowSpec, wm_start: int) -> dict[str, Any]:
    """What a batch says, independent of the order rows arrived in and of how its rows were
    cut into tasks: a session's members travel for the late output, so they count only
    where the session is closed (a task that saw part of an open session sends the members
    of its closed part along, unused)."""
    def raw(r: Any) -> tuple[Any, ...]:
        return (r.partition, r.offset, r.key, r.value, r.key_size, r.value_size, r.carried)

    return {"fixed": b.fixed, "table": b.table, "max_event": b.max_event, "next_offsets": b.next_offsets,
            "total": b.total, "no_header": b.no_header,
            "late": sorted((raw(r), s, e) for r, s, e in b.late),
            "bad": sorted((x.partition, x.offset, x.reason, x.key, x.value, x.carried) for x in b.bad),
            "sessions": {k: sorted((s.start_ns, s.end_ns, s.count, s.amount_cents,
                                    tuple(sorted(raw(b.records[m]) for m in s.members))
                                    if closed(s.end_ns, spec.allowed_ns, wm_start) else ()) for s in ss)
                         for k, ss in b.sessions.items()}}


@pytest.mark.parametrize("spec", [WindowSpec.tumbling(MIN, MIN), WindowSpec.session(2 * MIN, MIN)],
                         ids=["tumbling", "session"])
@pytest.mark.parametrize("seed", [1, 2])
def test_the_driver_and_the_workers_window_a_batch_alike(spark: Any, spec: WindowSpec, seed: int) -> None:
    rows = corpus(seed)
    df = spark.createDataFrame(rows, SCHEMA).repartition(3)
    wm_start = T0 + 8 * MIN  # windows ending before 10:07 are closed: the early events are late
    applied = {0: 5}  # a replayed batch's rows below the store's offsets are left out
    args = (df, applied, spec, wm_start, MIN)
    by_workers = aggregate_events(*args, planned_offsets=None)
    by_driver = aggregate_events(*args, planned_offsets=400)
    # The corpus reaches every kind of row: bad ones, late ones (or late session candidates), windows.
    assert by_workers.bad and (by_workers.late or by_workers.records) and (by_workers.fixed or by_workers.sessions)
    assert normalized(by_driver, spec, wm_start) == normalized(by_workers, spec, wm_start)
    assert by_driver.total == 400 - sum(1 for r in rows if r[2] == 0 and r[3] < 5)
    # The driver's path was taken: the JVM carried every row.
    carried = carry_rows(df, DRIVER_ROW_BYTES, DRIVER_TASK_BYTES)
    assert carried is not None and len(carried["offset"]) == 400


def test_the_carried_rows_cross_whole_with_or_without_their_file(spark: Any, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The JVM hands the blob over through a temporary file; where that file cannot be
    written, it answers the blob itself: the same rows either way, and no file is left."""
    df = spark.createDataFrame(corpus(4), SCHEMA).repartition(3)
    jvm = spark.sparkContext._jvm
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    through_file = carry_rows(df, DRIVER_ROW_BYTES, DRIVER_TASK_BYTES)
    assert list(tmp_path.iterdir()) == []
    answered = jvm.brewstream.CarryRows.collect(df._jdf, DRIVER_ROW_BYTES, DRIVER_TASK_BYTES, "/nonexistent/dir/blob")
    assert isinstance(answered, bytes)
    direct = read_carried_rows(answered)
    assert through_file is not None and direct is not None and len(through_file["offset"]) == 400

    def by_position(cols: dict[str, list[Any]]) -> list[tuple[Any, ...]]:
        return sorted(zip(*cols.values(), strict=True), key=lambda row: (row[2], row[3]))

    assert by_position(through_file) == by_position(direct)


def test_a_row_too_big_to_carry_sends_the_batch_to_the_workers(spark: Any) -> None:
    rows = corpus(3, big=True)
    df = spark.createDataFrame(rows, SCHEMA).repartition(3)
    assert carry_rows(df, DRIVER_ROW_BYTES, DRIVER_TASK_BYTES) is None
    assert carry_rows(df, 10**9, 1000) is None  # a task's budget, too
    spec, wm_start = WindowSpec.tumbling(MIN, MIN), T0 + 8 * MIN
    by_workers = aggregate_events(df, {}, spec, wm_start, MIN, planned_offsets=None)
    by_driver = aggregate_events(df, {}, spec, wm_start, MIN, planned_offsets=400)
    assert normalized(by_driver, spec, wm_start) == normalized(by_workers, spec, wm_start)
    assert by_driver.total == 400 and any(len(b.value or b"") > DRIVER_ROW_BYTES or not b.carried
                                          for b in by_driver.bad)

