"""The drink count as a Quix Streams application (the peer of the ingest scenario).

Runs in the Quix virtualenv, so it imports nothing from brewstream (the order rules are
the benchmark's own plain Python, ``bench/workers/order_rules.py``). Each order is read
as bytes, checked by the order rules (a bad one yields no item) and expanded into its
items, re-keyed by drink with ``group_by`` (Quix state is scoped by
message key, so this is how a per-drink total gets one state key per drink, as in
brewstream's store), and a stateful ``apply`` keeps the running total in RocksDB with
its changelog. The app stops through Quix's own ``run(count=...)`` once every item
has reached the stateful step, which commits a final checkpoint on the way out.

Prints one ``RESULT {json}`` line: the final totals and CLOCK_MONOTONIC stamps of the
first order seen and of the end of ``run`` (after the last commit).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

import orjson
from quixstreams import Application, State

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: bench.workers
from bench.workers.order_rules import order_items


def main() -> None:
    args = _parse()
    totals: dict[str, int] = {}
    stamps: dict[str, float] = {}

    def items_of(order: bytes | None) -> list[dict[str, Any]]:
        if "first" not in stamps:
            stamps["first"] = time.monotonic()
        return [{"drink": drink, "quantity": quantity} for drink, quantity in order_items(order)]

    def add(item: dict[str, Any], state: State) -> int:
        total = state.get("total", 0) + item["quantity"]
        state.set("total", total)
        totals[item["drink"]] = total
        return total

    app = Application(
        broker_address=args.bootstrap,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        processing_guarantee=args.guarantee,
        state_dir=args.state_dir,
        loglevel=logging.WARNING,
    )
    orders = app.topic(args.topic, value_deserializer="bytes", key_deserializer="bytes")
    sdf = app.dataframe(orders)
    sdf = sdf.apply(items_of, expand=True)
    sdf = sdf.group_by("drink")
    sdf = sdf.apply(add, stateful=True)
    if args.items:
        app.run(count=args.items, collect=False)
    else:  # an empty input (the catch-up baseline): stop once nothing came for --idle-s
        app.run(timeout=args.idle_s, collect=False)
    done = time.monotonic()
    print("RESULT " + orjson.dumps({"counts": totals, "first": stamps.get("first"), "done": done}).decode(),
          flush=True)


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--state-dir", required=True)
    p.add_argument("--guarantee", choices=("exactly-once", "at-least-once"), required=True)
    p.add_argument("--items", type=int, required=True, help="order items in the backlog: the stop count")
    p.add_argument("--idle-s", type=float, default=1.0, help="with --items 0: stop after this long without a message")
    return p.parse_args()


if __name__ == "__main__":
    main()
