"""The pipelines' partial rows' schemas, stated once as Spark's DDL, read as Arrow's: the
same schemas the workers built from Arrow's own types before (written out here as the
oracle)."""

from __future__ import annotations

import pyarrow as pa

from service.drink_count import aggregate as counts
from service.revenue import orders as revenue
from service.spark.ddl import arrow_schema, ddl_columns
from service.windows import aggregate as windows


def test_the_counts_partial_rows_read_as_arrow_schema() -> None:
    assert arrow_schema(counts.PARTIAL_DDL) == pa.schema([
        ("kind", pa.string()), ("name", pa.string()), ("n", pa.int64()), ("partition", pa.int32()),
        ("offset", pa.int64()), ("key", pa.binary()), ("value", pa.binary()), ("ksize", pa.int64())])
    assert ddl_columns(counts.PARTIAL_DDL) == counts.PARTIAL_COLUMNS


def test_the_windows_partial_rows_read_as_arrow_schema() -> None:
    assert arrow_schema(windows.PARTIAL_DDL) == pa.schema([
        ("kind", pa.string()), ("part", pa.int32()), ("off", pa.int64()), ("start", pa.int64()), ("end", pa.int64()),
        ("name", pa.string()), ("n", pa.int64()), ("amount", pa.int64()), ("late_acc", pa.int64()),
        ("aux", pa.int64()), ("rkey", pa.binary()), ("value", pa.binary()), ("headers", pa.binary()),
        ("ksize", pa.int64()), ("vsize", pa.int64()), ("carried", pa.bool_())])
    assert ddl_columns(windows.PARTIAL_DDL) == windows.PARTIAL_COLUMNS


def test_the_revenue_orders_read_as_arrow_schema() -> None:
    assert arrow_schema(revenue.DDL) == pa.schema([
        ("kind", pa.string()), ("part", pa.int32()), ("off", pa.int64()), ("t", pa.int64()), ("shop", pa.string()),
        ("items", pa.binary()), ("rkey", pa.binary()), ("value", pa.binary()), ("ksize", pa.int64()),
        ("vsize", pa.int64()), ("carried", pa.bool_())])
    assert ddl_columns(revenue.DDL) == revenue.COLUMNS
