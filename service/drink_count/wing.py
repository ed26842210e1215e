"""drink-count as every command sees it, running or not (``service.pipelines`` registers it)."""

from __future__ import annotations

from operator import attrgetter

from service.drink_count.counts import check_count
from service.engine.contract import Wing

WING = Wing("drink-count", input_topic=attrgetter("orders"), changelog_topic=attrgetter("changelog"),
            check_value=check_count)
