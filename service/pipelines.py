"""The registry: every pipeline by name, the one place that names them.

The CLI (``--store``, ``restore``, ``republish-changelog``, ``status``, ``counts``), the
board and the drills look a pipeline up here; the engine and the HTTP server never do
(``make lint`` checks it): what they need of a pipeline reaches them in its contract
(``service.engine.contract``).
"""

from __future__ import annotations

from service.drink_count.wing import WING as DRINK_COUNT
from service.engine.contract import Wing
from service.revenue.wing import WING as REVENUE
from service.windows.wing import WING as WINDOWS
from topics.catalog import DEFAULT_TOPICS, Topics

WINGS: dict[str, Wing] = {w.name: w for w in (DRINK_COUNT, WINDOWS, REVENUE)}
__all__ = ["DRINK_COUNT", "REVENUE", "WINDOWS", "WINGS", "names", "of_changelog", "of_store", "wing"]


def names() -> list[str]:
    return list(WINGS)


def wing(name: str) -> Wing:
    """The pipeline called ``name``; ``KeyError`` when there is none."""
    return WINGS[name]


def of_changelog(topics: Topics, changelog: str) -> Wing | None:
    """The pipeline whose changelog (under ``topics``' prefix) is ``changelog``, if any."""
    return next((w for w in WINGS.values() if w.changelog_topic(topics) == changelog), None)


def of_store(changelog: str) -> Wing | None:
    """The pipeline whose changelog, under any prefix, is ``changelog`` (the name a store
    records of the changelog it was built from)."""
    return next((w for w in WINGS.values() if changelog.endswith(w.changelog_topic(DEFAULT_TOPICS))), None)
