"""A small batch's rows, carried whole to the driver by ``CarryRows`` (its blob's layout
is in service/spark/jvm/brewstream/CarryRows.java), as the columns the Python workers read
from the Arrow batch they are handed: so the driver runs the same pure code over them,
without pyarrow."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from service.spark.blob import BlobReader, handed_over

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# The columns CarryRows picks from the Kafka source's, as mapInArrow hands them to a worker:
# key and value bytes, partition, offset, the timestamp in microseconds, and the headers as
# a list of {"key": str, "value": bytes}.
COLUMNS = ("key", "value", "partition", "offset", "ts_us", "headers")
Columns = dict[str, list[Any]]


def carry_rows(df: DataFrame, row_bytes: int, task_bytes: int) -> Columns | None:
    """The rows of ``df`` (Spark's Kafka source's, with headers) as ``COLUMNS``, or None
    when a row is over ``row_bytes`` or a task's rows over ``task_bytes``: one stage, one
    call."""
    jvm = df.sparkSession.sparkContext._jvm
    assert jvm is not None  # a classic session, which brewstream always builds
    carry = jvm.brewstream.CarryRows
    return read_carried_rows(handed_over(lambda path: carry.collect(df._jdf, row_bytes, task_bytes, path),
                                         "the carried rows"))


def read_carried_rows(blob: bytes) -> Columns | None:
    """``CarryRows``' blob as ``COLUMNS``, None for an overflow; ``ValueError`` for
    a blob that does not follow the layout, to its last byte."""
    r = BlobReader(blob, "the carried rows")
    overflow = r.unpack(">b")[0]
    if overflow not in (0, 1):
        raise ValueError(f"the carried rows' overflow flag is {overflow}")
    cols: Columns = {name: [] for name in COLUMNS}
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
    return None if overflow else cols


def _text(raw: bytes | None) -> str | None:
    # The JVM wrote a Spark string's bytes: valid UTF-8 unless the blob is damaged.
    return None if raw is None else raw.decode("utf-8")
