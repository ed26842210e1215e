"""The ingest "limit": a plain confluent-kafka consumer that parses every order with
orjson, skips the bad ones by the order rules (``order_rules``) and sums drinks in a
dict. No state store, no changelog, no commits: the cost of reading and parsing the
backlog in one Python process, which no stateful system beats.

Prints ``RESULT {"counts", "orders", "first", "done"}`` (CLOCK_MONOTONIC stamps).
"""

from __future__ import annotations

import argparse
import time

import orjson

from bench.workers.order_rules import order_items
from bench.workers.plain import read_all


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    args = p.parse_args()

    totals: dict[str, int] = {}
    first: float | None = None
    orders = 0
    for batch in read_all(args.bootstrap, args.topic, "read_uncommitted"):
        if batch and first is None:
            first = time.monotonic()
        for msg in batch:
            for drink, quantity in order_items(msg.value()):
                totals[drink] = totals.get(drink, 0) + quantity
            orders += 1
    done = time.monotonic()
    print("RESULT " + orjson.dumps({"counts": totals, "orders": orders, "first": first or done,
                                    "done": done}).decode(), flush=True)


if __name__ == "__main__":
    main()
