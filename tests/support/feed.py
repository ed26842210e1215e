"""Orders for a test (about 1% bad) fed over a while by the paced feeder the drills use
(``topics.feed.PacedFeeder``), with the good ones kept for the test's own oracle."""

from __future__ import annotations

import threading

from tests.support.corpus import BAD_ORDERS
from tests.support.drink_count import make_orders
from tests.support.helpers import Pipeline, order_bytes, produce
from topics.feed import PacedFeeder, Record


class Feed(PacedFeeder):
    CHUNKS = 20

    def __init__(self, pipe: Pipeline, n: int, seed: int, seconds: float) -> None:
        self.pipe = pipe
        self.good = make_orders(n, seed)
        records: list[Record] = [order_bytes(o) for o in self.good]
        for i, (_, raw, _) in enumerate(BAD_ORDERS[: max(1, n // 100)]):
            records.insert(i * 53 % len(records), (b"bad", raw))
        self.bad = len(records) - len(self.good)
        super().__init__(pipe.conn, pipe.topics.orders, records, seconds / self.CHUNKS,
                         -(-len(records) // self.CHUNKS), "test-feed")

    @property
    def done(self) -> threading.Event:
        """Set it to stop feeding early."""
        return self.halt

    def more(self, n: int, seed: int) -> None:
        """``n`` more good orders at once (so a new active has a batch to commit)."""
        orders = make_orders(n, seed)
        produce(self.pipe.conn, self.pipe.topics.orders, (order_bytes(o) for o in orders))
        self.good += orders
