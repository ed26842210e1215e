"""A small batch's rows, carried whole to the driver by ``CarryRows`` (its blob's layout
is in service/spark/jvm/brewstream/CarryRows.java), as the Arrow batch the Python
workers would have been handed: so the driver runs the same pure code over them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from service.spark.blob import BlobReader, handed_over

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# The columns CarryRows picks from the Kafka source's, as mapInArrow hands them to a worker.
ROWS = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("partition", pa.int32()), ("offset", pa.int64()),
                  ("ts_us", pa.int64()),
                  ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))])


def carry_rows(df: DataFrame, row_bytes: int, task_bytes: int) -> pa.RecordBatch | None:
    """The rows of ``df`` (Spark's Kafka source's, with headers) as the columns of
    ``ROWS``, or None when a row is over ``row_bytes`` or a task's rows over
    ``task_bytes``: one stage, one call."""
    jvm = df.sparkSession.sparkContext._jvm
    assert jvm is not None  # a classic session, which brewstream always builds
    carry = jvm.brewstream.CarryRows
    return read_carried_rows(handed_over(lambda path: carry.collect(df._jdf, row_bytes, task_bytes, path),
                                         "the carried rows"))


def read_carried_rows(blob: bytes) -> pa.RecordBatch | None:
    """``CarryRows``' blob as a batch of ``ROWS``, None for an overflow; ``ValueError`` for
    a blob that does not follow the layout, to its last byte."""
    r = BlobReader(blob, "the carried rows")
    overflow = r.unpack(">b")[0]
    if overflow not in (0, 1):
        raise ValueError(f"the carried rows' overflow flag is {overflow}")
    cols: dict[str, list[Any]] = {name: [] for name in ROWS.names}
    for _ in range(r.count()):
        p, offset, has_ts = r.unpack(">iqb")
        if has_ts not in (0, 1):
            raise ValueError(f"a row's time flag is {has_ts}")
        cols["partition"].append(p)
        cols["offset"].append(offset)
        cols["ts_us"].append(r.unpack(">q")[0] if has_ts else None)
        cols["key"].append(r.optional())
        cols["value"].append(r.optional())
        n = r.unpack(">i")[0]
        if n < -1:
            raise ValueError(f"a row's header count is {n}")
        headers = None if n == -1 else [{"key": _text(r.optional()), "value": r.optional()} for _ in range(n)]
        cols["headers"].append(headers)
    r.done()
    return None if overflow else pa.RecordBatch.from_pydict(cols, schema=ROWS)


def _text(raw: bytes | None) -> str | None:
    # The JVM wrote a Spark string's bytes: valid UTF-8 unless the blob is damaged.
    return None if raw is None else raw.decode("utf-8")
