"""A standby's warm-up on a real broker and Spark: over an empty input it runs the query
(the driver's side) and reads nothing; a later attempt with ``only_with_records`` does
nothing until the input holds records, then reads the last of each partition."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from service.drink_count.pipeline import pipeline
from service.engine.contract import RunConfig
from service.engine.query import WARM_RECORDS, warm_query
from tests.support.drink_count import make_orders
from tests.support.helpers import Pipeline, order_bytes, produce

pytestmark = pytest.mark.spark


def test_a_warm_up_reads_nothing_over_an_empty_input_and_the_last_records_later(
        pipe: Pipeline, spark: Any, dirs: dict[str, Path]) -> None:
    cfg = RunConfig(pipe.conn, dirs["state"], dirs["ckpt"], topics=pipe.topics)
    p = pipeline(cfg)
    assert warm_query(spark, p, cfg) == 0
    assert warm_query(spark, p, cfg, only_with_records=True) == 0

    produce(pipe.conn, pipe.topics.orders, [order_bytes(o) for o in make_orders(1200, 3)])
    c = Consumer({"bootstrap.servers": pipe.conn.bootstrap, "group.id": "t"})
    try:
        sizes = [c.get_watermark_offsets(TopicPartition(pipe.topics.orders, q), timeout=10)[1] for q in range(3)]
    finally:
        c.close()
    assert warm_query(spark, p, cfg, only_with_records=True) == sum(min(WARM_RECORDS, n) for n in sizes)
    assert not spark.streams.active  # the warm-up's query ended with it; nothing was committed anywhere
    assert not dirs["state"].exists() and not dirs["ckpt"].exists()
