"""Where the query starts reading: from Spark's checkpoint, or from the store's offsets.

Progress lives with the state. A checkpoint is only a shortcut, used when it does not
run ahead of the store: Spark resumes after its last committed batch, and any row it
skips there must already be counted in the store. A checkpoint ahead of the store
(the store and its changelog were lost, or the store is from another run) would skip
uncounted rows, so it is dropped and the store's offsets are used instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

EARLIEST = -2  # Spark's startingOffsets code for a partition's earliest offset


@dataclass(frozen=True)
class StartPoint:
    use_checkpoint: bool
    starting_offsets: dict[str, dict[str, int]] | None  # Spark's startingOffsets, or None
    reason: str

    def starting_offsets_json(self) -> str | None:
        return None if self.starting_offsets is None else json.dumps(self.starting_offsets)


def checkpoint_resume_offsets(checkpoint_dir: Path, topic: str) -> dict[int, int] | None:
    """Offsets Spark resumes ``topic`` from in this checkpoint; None when there is none."""
    offsets_dir = checkpoint_dir / "offsets"
    commits = _batch_ids(checkpoint_dir / "commits")
    if commits:
        return _source_offsets((offsets_dir / str(max(commits))).read_text(), topic)
    initial = checkpoint_dir / "sources" / "0" / "0"
    if initial.exists():
        return _source_offsets(initial.read_text(errors="replace"), topic)
    return None


def choose_start(topic: str, partitions: list[int], store_offsets: Mapping[int, int],
                 earliest: Mapping[int, int], checkpoint: Mapping[int, int] | None) -> StartPoint:
    """Pure decision; ``earliest`` is each partition's low watermark."""
    from_store = {topic: {str(p): store_offsets.get(p, EARLIEST) for p in partitions}}
    if checkpoint is None:
        where = "store offsets" if store_offsets else "the earliest offsets (empty store)"
        return StartPoint(False, from_store, f"no checkpoint; starting from {where} {_fmt(store_offsets)}")
    ahead = {
        p: (c, store_offsets.get(p, earliest.get(p, 0)))
        for p, c in checkpoint.items()
        if c > store_offsets.get(p, earliest.get(p, 0))
    }
    if ahead:
        return StartPoint(False, from_store,
                          f"checkpoint is ahead of the store (partition: (checkpoint, store) {ahead}); "
                          f"dropping it and starting from store offsets {_fmt(store_offsets)}")
    return StartPoint(True, None, f"resuming from the checkpoint at {_fmt(checkpoint)}")


def _fmt(offsets: Mapping[int, int]) -> str:
    return "{" + ", ".join(f"{p}:{o}" for p, o in sorted(offsets.items())) + "}"


def _batch_ids(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    return [int(f.name) for f in folder.iterdir() if f.name.isdigit()]


def _source_offsets(text: str, topic: str) -> dict[int, int] | None:
    # Offset logs are "v1", a metadata line, then one JSON line per source; the
    # initial-offsets file is a version line and one JSON line.
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and f'"{topic}"' in line:
            return {int(p): int(o) for p, o in json.loads(line)[topic].items()}
    return None
