"""Orders for drink-count tests (``make_orders``, with their own oracle in tests.support.helpers)
and an in-process ``run --available-now`` on the test's topics."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from service.drink_count.pipeline import BoardConfig, run
from service.engine.contract import RunConfig
from tests.support.helpers import Pipeline

DRINKS = ["latte", "mocha", "tea", "flat white", "cortado", "caf\u00e9 cr\u00e8me"]


def make_orders(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    orders = []
    for i in range(n):
        # Repeated drinks inside one order, and the same drinks over many orders/batches.
        items = [{"drink": rng.choice(DRINKS), "quantity": rng.randint(1, 4)} for _ in range(rng.randint(1, 4))]
        orders.append({"order_id": f"o-{seed}-{i}", "shop_id": f"shop-{rng.randint(1, 80):02d}", "items": items})
    return orders


def run_available_now(pipe: Pipeline, spark: Any, dirs: dict[str, Path], **kw: Any) -> int:
    top_n = kw.pop("top_n", 10)
    cfg = RunConfig(pipe.conn, dirs["state"], dirs["ckpt"], available_now=True, topics=pipe.topics, **kw)
    return run(cfg, BoardConfig(60, top_n), spark=spark)
