"""The revenue pipeline as every command sees it, running or not (``service.pipelines``
registers it)."""

from __future__ import annotations

from operator import attrgetter

from service.engine.contract import Wing
from service.revenue.state import check_value, decode_revenue_state

# Its refused orders were counted by drink-count, which reads the same input: sent back to
# it, they would be counted twice. A malformed order is in drink-count's DLQ too, and its
# replay from there reaches both pipelines.
NO_REPLAY = ("the revenue DLQ cannot be replayed: its orders are on brew.orders.v1 already, and drink-count would "
             "count them again; a malformed order is also in drink-count's DLQ, whose replay (`brewstream dlq "
             "replay`) reaches both pipelines; `brewstream dlq export --store revenue` lists the rest")

WING = Wing("revenue", input_topic=attrgetter("orders"), changelog_topic=attrgetter("revenue_changelog"),
            check_value=check_value, counts=decode_revenue_state, side_inputs=lambda t: (t.menu,),
            dlq_topic=attrgetter("revenue_dlq"), no_replay=NO_REPLAY)
