"""The two stores a command can name (``--store``): their topics, default state dir and
the check a changelog value must pass."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from restorer.reader import ValueCheck, check_count
from topics.catalog import Topics, TopicSpec

NAMES = ("drink-count", "windows")


@dataclass(frozen=True)
class StoreKind:
    name: str
    input_topic: str
    changelog: TopicSpec
    check_value: ValueCheck

    @property
    def default_state_dir(self) -> Path:
        return Path("state") / self.name


def store_kind(name: str, topics: Topics) -> StoreKind:
    from service.windows.state import check_value as check_window

    input_topic, changelog = topics.of_store(name)
    spec = next(s for s in topics.specs() if s.name == changelog)
    return StoreKind(name, input_topic, spec, check_count if name == "drink-count" else check_window)
