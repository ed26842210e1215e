"""Orders for drink-count tests (``make_orders``, with their own oracle in tests.support.helpers),
an in-process ``run --available-now`` on the test's topics, and the check that a store and
the DLQ equal the oracle."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from restorer.codec import StoreState
from restorer.store import Store
from service.drink_count.pipeline import BoardConfig, run
from service.engine.contract import RunConfig
from tests.support.corpus import BAD_ORDERS
from tests.support.helpers import Pipeline, counts_json, oracle, order_bytes, produce, read_topic

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


def store_state(state_dir: Path) -> StoreState:
    with Store(state_dir / "store", read_only=True) as store:
        return store.read_all()


def feed_with_bad(pipe: Pipeline, n: int, seed: int) -> list[dict[str, Any]]:
    good = make_orders(n, seed)
    records: list[tuple[bytes | None, bytes | None]] = [order_bytes(o) for o in good]
    for i, (_, raw, _) in enumerate(BAD_ORDERS[:6]):
        records.insert(i * 97 % len(records), (b"bad", raw))
    produce(pipe.conn, pipe.topics.orders, records)
    return good


def assert_exact(pipe: Pipeline, state_dir: Path, good: list[dict[str, Any]], bad: int = 6) -> None:
    assert counts_json(pipe.conn, state_dir)["counts"] == oracle(good)
    dlq = read_topic(pipe.conn, pipe.topics.dlq)
    sources = {(dict(m.headers())["source-partition"], dict(m.headers())["source-offset"]) for m in dlq}
    assert len(dlq) == len(sources) == bad
