"""Spark's own stateful aggregation: what a PySpark user writes for brewstream's job without
brewstream. Imports nothing of brewstream's; the harness starts it as a child process.

The query: Spark's Kafka source (read_committed, from the earliest offsets) → ``from_json``
with the order's schema → a filter with the order rules → ``explode`` of the items →
``groupBy(drink).sum(quantity)`` in Spark's RocksDB state store with changelog
checkpointing → Spark's Kafka sink in update mode: every batch writes the new absolute sum
of each drink it changed (key drink, value an 8-byte big-endian long, the format of
brewstream's changelog). The sink is at-least-once (a batch replayed after a failure
writes its rows again), but the values are absolute sums, so the latest value per drink
is exact whatever is replayed.

The order rules (DESIGN.md, "order") in Spark SQL: the value must be valid UTF-8 and a
JSON object; ``order_id``, ``shop_id`` and each item's ``drink`` and ``quantity`` are read
as VARIANT, so that their JSON type can be checked (``from_json`` would turn the number 7
into the string "7" for a STRING field, or 2.0 into 2 for a BIGINT one):
``order_id``, ``shop_id`` and ``drink`` strings, ``drink`` of 1 to 256 UTF-8 bytes,
``quantity`` an integer from 1 to 2^31-1, ``items`` a non-empty array of objects, and
every item good (``forall``), or the order counts nothing.

Modes: ``catch-up`` runs ``trigger(availableNow=True)`` over what the topic holds and
exits, printing ``RESULT {json}`` with CLOCK_MONOTONIC stamps; ``daemon`` runs a
processing-time trigger until SIGTERM.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import threading
import time
from typing import Any

import orjson

ORDER_SCHEMA = ("order_id VARIANT, shop_id VARIANT, "
                "items ARRAY<STRUCT<drink: VARIANT, quantity: VARIANT>>")
GOOD_ITEM = ("x IS NOT NULL AND schema_of_variant(x.drink) = 'STRING' "
             "AND octet_length(variant_get(x.drink, '$', 'string')) BETWEEN 1 AND 256 "
             "AND schema_of_variant(x.quantity) = 'BIGINT' "
             "AND variant_get(x.quantity, '$', 'bigint') BETWEEN 1 AND 2147483647")
GOOD_ORDER = (f"is_valid_utf8(json) AND schema_of_variant(o.order_id) = 'STRING' "
              f"AND schema_of_variant(o.shop_id) = 'STRING' AND size(o.items) > 0 "
              f"AND forall(o.items, x -> {GOOD_ITEM})")
STATE_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def main() -> None:
    args = _parse()
    started = time.monotonic()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.master(args.master).appName("spark-native-drink-count")
        .config("spark.jars", args.jars)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.local.dir", args.local_dir)
        # The same JVM and checkpoint settings brewstream's own session uses (service.spark_conf).
        .config("spark.driver.defaultJavaOptions", "-XX:+UseParallelGC")
        .config("spark.sql.streaming.checkpointFileManagerClass",
                "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager")
        # The state: one RocksDB instance per shuffle partition, with changelog checkpointing.
        .config("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
        .config("spark.sql.streaming.stateStore.providerClass", STATE_PROVIDER)
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    source = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.input)
              .option("startingOffsets", "earliest")
              .option("kafka.isolation.level", "read_committed")
              .option("failOnDataLoss", "true")
              .load())
    orders = (source.select(F.col("value").cast("string").alias("json"))
              .select("json", F.from_json("json", ORDER_SCHEMA).alias("o"))
              .where(F.expr(GOOD_ORDER)))
    items = (orders.select(F.explode("o.items").alias("x"))
             .select(F.expr("variant_get(x.drink, '$', 'string')").alias("drink"),
                     F.expr("variant_get(x.quantity, '$', 'bigint')").alias("quantity")))
    sums = items.groupBy("drink").agg(F.sum("quantity").alias("total"))
    # A bigint as 8 big-endian bytes (ANSI mode refuses a cast to binary): its hex, padded.
    out = sums.select(F.col("drink").cast("binary").alias("key"),
                      F.unhex(F.lpad(F.hex("total"), 16, "0")).alias("value"))
    writer = (out.writeStream.format("kafka")
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("topic", args.output)
              .option("checkpointLocation", args.checkpoint)
              .outputMode("update"))
    if args.mode == "catch-up":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{args.trigger_ms} milliseconds")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    query = writer.start()
    query_started = time.monotonic()
    print(f"{query_started:.6f} query started", flush=True)
    if args.mode == "catch-up":
        query.awaitTermination()
    else:
        while not stop.is_set() and query.isActive:
            stop.wait(0.2)
        if query.exception() is None and query.isActive:
            query.stop()
    done = time.monotonic()
    failure = query.exception()
    batches = _batches(query.recentProgress)
    spark.stop()
    print("RESULT " + orjson.dumps({
        "started": started, "query_started": query_started, "done": done,
        "first_batch": batches[0]["start"] if batches else None,
        "last_batch_end": batches[-1]["end"] if batches else None,
        "batches": len(batches), "rows": sum(b["rows"] for b in batches),
        "error": None if failure is None else str(failure),
    }).decode(), flush=True)
    if failure is not None:
        raise SystemExit(1)


def _batches(progress: list[Any]) -> list[dict[str, Any]]:
    """Each batch that read rows: its start and end on CLOCK_MONOTONIC (its progress carries
    wall-clock stamps), and its input rows."""
    offset = time.time() - time.monotonic()
    out = []
    for p in progress:
        rows = int(p.numInputRows or 0)
        if not rows:
            continue
        start = dt.datetime.fromisoformat(p.timestamp.replace("Z", "+00:00")).timestamp() - offset
        out.append({"start": start, "end": start + p.durationMs.get("triggerExecution", 0) / 1000, "rows": rows})
    return out


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--local-dir", required=True, help="spark.local.dir: the RocksDB working copies live here")
    p.add_argument("--jars", required=True, help="Spark's Kafka source and sink jars, comma-separated")
    p.add_argument("--mode", choices=("catch-up", "daemon"), required=True)
    p.add_argument("--trigger-ms", type=int, default=250)
    p.add_argument("--master", default="local[*]")
    p.add_argument("--shuffle-partitions", type=int, default=4)
    return p.parse_args()


if __name__ == "__main__":
    main()
