"""A partial rows' schema stated once, as Spark's DDL ("name type, name type, ..."): read as
its column names, or as Arrow's schema for the Python workers that build those rows."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa


def ddl_columns(ddl: str) -> tuple[str, ...]:
    """The column names of ``ddl``, in order."""
    return tuple(name for name, _ in _fields(ddl))


@cache
def arrow_schema(ddl: str) -> pa.Schema:
    """``ddl`` as Arrow's schema. pyarrow is imported here, so that only a process that
    builds Arrow batches (a Python worker) loads it: a driver reads rows as plain lists."""
    import pyarrow as pa

    types = {"string": pa.string(), "int": pa.int32(), "long": pa.int64(), "binary": pa.binary(),
             "boolean": pa.bool_()}
    return pa.schema([(name, types[kind]) for name, kind in _fields(ddl)])


def _fields(ddl: str) -> list[tuple[str, str]]:
    return [(name, kind) for name, kind in (column.split() for column in ddl.split(", "))]
