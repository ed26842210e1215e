"""drink-count as every command sees it, running or not (``service.pipelines`` registers it)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from operator import attrgetter

from restorer.codec import decode_entries
from service.drink_count.counts import DrinkCounts, check_count, drink_counts
from service.drink_count.topn import counts_text
from service.engine.contract import Wing


@dataclass(frozen=True)
class CountsText:
    counts: DrinkCounts

    def as_json(self) -> dict[str, object]:
        return self.counts.as_json()

    def text(self, top_n: int | None) -> str:
        return counts_text(self.counts, top_n)


def read_counts(entries: Iterable[tuple[bytes, bytes]]) -> CountsText:
    return CountsText(drink_counts(decode_entries(entries)))


WING = Wing("drink-count", input_topic=attrgetter("orders"), changelog_topic=attrgetter("changelog"),
            check_value=check_count, counts=read_counts)
