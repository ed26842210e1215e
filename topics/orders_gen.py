"""Random Brew orders, reproducible from a seed (pure: no I/O)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

SHOPS = 80

# A realistic menu with a skewed popularity: a few drinks sell most of the cups.
MENU: tuple[tuple[str, int], ...] = (
    ("latte", 220), ("cappuccino", 170), ("americano", 140), ("flat white", 110),
    ("espresso", 90), ("iced latte", 70), ("mocha", 55), ("cold brew", 45),
    ("cortado", 35), ("chai latte", 28), ("matcha latte", 22), ("macchiato", 18),
    ("hot chocolate", 14), ("filter coffee", 10), ("affogato", 6), ("babyccino", 3),
)


class OrderGenerator:
    """Orders shaped like the seed's: an id, a shop (the record key) and 1-3 items."""

    def __init__(self, seed: int | None = None, run_id: str | None = None) -> None:
        self._rng = random.Random(seed)
        self._run = run_id if run_id is not None else f"{self._rng.getrandbits(32):08x}"
        self._n = 0
        self._drinks = [d for d, _ in MENU]
        self._weights = [w for _, w in MENU]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self

    def __next__(self) -> dict[str, Any]:
        self._n += 1
        rng = self._rng
        n_items = rng.choice((1, 1, 1, 2, 2, 3))
        drinks = rng.choices(self._drinks, weights=self._weights, k=n_items)
        return {
            "order_id": f"o-{self._run}-{self._n}",
            "shop_id": f"shop-{rng.randrange(1, SHOPS + 1):02d}",
            "items": [{"drink": d, "quantity": rng.choice((1, 1, 1, 2, 2, 3))} for d in drinks],
        }
