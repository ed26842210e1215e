"""The revenue pipeline as every command sees it, running or not (``service.pipelines``
registers it)."""

from __future__ import annotations

from operator import attrgetter

from service.engine.contract import Wing
from service.revenue.state import check_value, decode_revenue_state

WING = Wing("revenue", input_topic=attrgetter("orders"), changelog_topic=attrgetter("revenue_changelog"),
            check_value=check_value, counts=decode_revenue_state, side_inputs=lambda t: (t.menu,))
