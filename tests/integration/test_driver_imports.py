"""The drivers count a batch of orders and window a batch of events, bad records carried
from the JVM included, without loading pandas, pyarrow or numpy: pyspark's numpy converters
would import all three at the JVM's first call (``service.spark.session._OnlyOfNumpyValues``),
and the rows the JVM carries are read as plain lists (``service.drink_count.aggregate.count_rows``,
``service.windows.aggregate.window_partials``). A batch run on the Python workers (the
revenue join's, every batch) loads no pandas either (``service.spark.arrow_map``): only
pyarrow, which reads the workers' rows back."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.spark

SCRIPT = """
import sys
from service.drink_count.aggregate import aggregate_batch
from service.spark.session import build_session

spark = build_session("local[1]", "driver-imports")
rows = [("CAST('k' AS BINARY)", '{"order_id":"o","shop_id":"s","items":[{"drink":"latte","quantity":2}]}', 0, 5),
        ("CAST(NULL AS BINARY)", "not json", 1, 7)]
df = spark.sql(" UNION ALL ".join(
    f"SELECT {key} AS key, CAST('{value}' AS BINARY) AS value, {p} AS partition, CAST({o} AS BIGINT) AS offset"
    for key, value, p, o in rows))
agg = aggregate_batch(df, {})
print(agg.deltas, [(b.partition, b.offset, b.reason) for b in agg.bad], agg.next_offsets)

from service.windows.aggregate import aggregate_events
from service.windows.assign import WindowSpec

MIN = 60 * 10**9
events = [('{"shop_id":"s1","drink":"latte","amount":3.5}', 3), ('{"shop_id":"s1"}', 4)]
df = spark.sql(" UNION ALL ".join(
    f"SELECT CAST('s1' AS BINARY) AS key, CAST('{value}' AS BINARY) AS value, 0 AS partition, "
    f"CAST({o} AS BIGINT) AS offset, TIMESTAMP '2026-01-01 00:00:30' AS timestamp, "
    "CAST(array() AS array<struct<key:string,value:binary>>) AS headers" for value, o in events))
win = aggregate_events(df, {}, WindowSpec.tumbling(MIN), None, MIN, planned_offsets=len(events))
print(win.total, [(b.offset, b.reason) for b in win.bad])
print(sorted(m for m in ("numpy", "pandas", "pyarrow") if m in sys.modules))

from service.revenue.orders import parse_orders

orders = [('{"order_id":"o1","shop_id":"s1","items":[{"drink":"latte","quantity":2}]}', 5), ("not json", 6)]
df = spark.sql(" UNION ALL ".join(
    f"SELECT CAST('s1' AS BINARY) AS key, CAST('{value}' AS BINARY) AS value, 0 AS partition, "
    f"CAST({o} AS BIGINT) AS offset, TIMESTAMP '2026-01-01 00:00:30' AS timestamp, "
    "CAST(array() AS array<struct<key:string,value:binary>>) AS headers" for value, o in orders))
priced = parse_orders(df, {}, 60 * 10**9)
print(len(priced.orders), [b.offset for b in priced.bad], priced.next_offsets)
print(sorted(m for m in ("numpy", "pandas", "pyarrow") if m in sys.modules))
spark.stop()
"""


def test_the_driver_counts_without_pandas_pyarrow_or_numpy() -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    counted, windowed, loaded, priced, loaded_by_workers = proc.stdout.strip().splitlines()[-5:]
    assert counted == "{'latte': 2} [(1, 7, 'not JSON')] {0: 6, 1: 8}", proc.stdout
    assert windowed == "2 [(4, 'drink is missing or not a non-empty string')]", proc.stdout
    assert loaded == "[]", proc.stdout
    assert priced == "1 [6] {0: 7}", proc.stdout
    assert loaded_by_workers == "['numpy', 'pyarrow']", proc.stdout
