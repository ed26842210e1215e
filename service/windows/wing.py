"""The windows pipeline as every command sees it, running or not (``service.pipelines``
registers it)."""

from __future__ import annotations

from operator import attrgetter

from service.engine.contract import Wing
from service.windows.state import ROUTING, check_value

WING = Wing("windows", input_topic=attrgetter("events"), changelog_topic=attrgetter("windows_changelog"),
            check_value=check_value, routing=ROUTING)
