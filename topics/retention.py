"""Does a topic delete records by itself? A changelog and a replay ledger must keep every
key's last record for good: compaction only, or compaction with time and size retention
both off (-1). Pure: the settings come from ``topics.kafka.topic_config``."""

from __future__ import annotations

import re
from collections.abc import Mapping

# Kafka's defaults for a topic that does not set them (and a broker that does not either).
DEFAULTS = {"cleanup.policy": "delete", "retention.ms": "604800000", "retention.bytes": "-1"}
_NON_NEGATIVE = re.compile(r"\s*\+?[0-9]+\s*")


def deletes_records(config: Mapping[str, str]) -> str | None:
    """How the topic would delete records by itself (for a message: "is not compacted
    (cleanup.policy=delete)"), or None when it keeps every key's last record."""
    named = config.get("cleanup.policy", DEFAULTS["cleanup.policy"])
    policy = {p.strip() for p in named.split(",")}
    if "compact" not in policy:
        return f"is not compacted (cleanup.policy={named})"
    if "delete" not in policy:
        return None
    limits = [f"{k}={config.get(k, DEFAULTS[k])}" for k in ("retention.ms", "retention.bytes")
              if _NON_NEGATIVE.fullmatch(config.get(k, DEFAULTS[k]))]  # -1 is off
    if not limits:
        return None
    return (f"also deletes by retention (cleanup.policy={named}, {', '.join(limits)}; -1 for both would keep "
            "every record)")


def keep_records_fix(topic: str) -> str:
    """What to set so that ``topic`` keeps every key's last record."""
    return (f"set cleanup.policy=compact on it (kafka-configs --alter --entity-type topics --entity-name {topic} "
            "--add-config cleanup.policy=compact)")
