"""``DataFrame.mapInArrow`` planned without loading pandas into the driver.

pyspark builds a mapInArrow's function through ``pandas_udf``, which imports pandas (and
with it pyarrow and numpy) to check their versions, and then imports pyarrow again to
check that the result's schema has an Arrow type: on the driver, where no Arrow batch
is ever built. Only the Python workers run the function, and they import what it needs
themselves. So ``map_in_arrow`` hands Spark the same Python function of the same eval
type and result schema as pyspark does, without those checks. The schemas passed here are
brewstream's own DDL (``service.spark.ddl``), of types Arrow takes.

It uses two of pyspark's private helpers (``_wrap_function``, ``_parse_datatype_string``),
so an upgrade of pyspark that moves them fails ``test_driver_imports.py`` and the
pipelines' integration tests at once, not a user's batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

ArrowMapFunction = Callable[[Iterator[Any]], Iterator[Any]]


def map_in_arrow(df: DataFrame, fn: ArrowMapFunction, ddl: str) -> DataFrame:
    """``df.mapInArrow(fn, ddl)``, the same plan, without pandas in the driver."""
    from pyspark.sql import DataFrame
    from pyspark.sql.classic.column import _to_java_column, _to_seq
    from pyspark.sql.types import _parse_datatype_string
    from pyspark.sql.udf import _wrap_function
    from pyspark.util import PythonEvalType

    spark = df.sparkSession
    sc = spark.sparkContext
    assert sc._jvm is not None
    schema = _parse_datatype_string(ddl)
    udf = sc._jvm.org.apache.spark.sql.execution.python.UserDefinedPythonFunction(
        getattr(fn, "__name__", "brewstream_batch"), _wrap_function(sc, fn, schema),
        spark._jsparkSession.parseDataType(schema.json()), PythonEvalType.SQL_MAP_ARROW_ITER_UDF, True)
    column = udf.apply(_to_seq(sc, [_to_java_column(df[c]) for c in df.columns]))
    return DataFrame(df._jdf.mapInArrow(column, False, None), spark)
