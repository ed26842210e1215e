"""Where the query starts reading: from Spark's checkpoint, or from the store's offsets.

Progress lives with the state. A checkpoint is only a shortcut, used when it does not
run ahead of the store: Spark resumes after its last committed batch, and any row it
skips there must already be counted in the store. A checkpoint ahead of the store
(the store and its changelog were lost, or the store is from another run) would skip
uncounted rows, so it is dropped and the store's offsets are used instead. So is a
checkpoint Spark could not read (a truncated file after a full disk, a bad copy):
``checkpoint_problem`` says what is wrong with it before Spark gets to fail on it. A
batch Spark planned and never committed is planned again, from the last committed one up
to the input's end (``checkpoint_dir.forget_unfinished_batches``).
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


@dataclass(frozen=True)
class CheckpointProblem:
    """Why Spark could not resume from a checkpoint: damaged, or whole but made for a query
    over another input (the pipeline's input changed: ``run --shuffle`` switched on or off)."""

    detail: str
    other_input: bool = False

    @property
    def verdict(self) -> str:
        return f"{'was made for another input' if self.other_input else 'is damaged'} ({self.detail})"


# What reading a damaged checkpoint file can raise: a file gone or unreadable, bytes that
# are no UTF-8 or no JSON, JSON of another shape, or JSON nested deeper than the parser goes.
_DAMAGE = (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError)


def checkpoint_problem(checkpoint_dir: Path, topic: str) -> CheckpointProblem | None:
    """Why Spark could not resume from this checkpoint, or None when it looks whole.

    Checks the files Spark reads on start: the query metadata, the last two offset logs,
    the last commit log and its batch's offset log, and the initial offsets. A folder with none of them (empty, or
    holding only the lock, ``engine.checkpoint_dir``) is no checkpoint yet, and whole;
    one with logs but no metadata (deleted under a running query) Spark refuses to start on.
    """
    if not checkpoint_dir.exists():
        return None
    try:
        metadata = checkpoint_dir / "metadata"
        if not metadata.exists():
            logged = [name for name in ("offsets", "commits", "sources") if _holds_files(checkpoint_dir / name)]
            return CheckpointProblem(f"its metadata file is missing, beside {' and '.join(logged)}") if logged else None
        if "id" not in json.loads(metadata.read_text()):
            return CheckpointProblem("its metadata has no query id")
        offsets = sorted(batch_ids(checkpoint_dir / "offsets"))
        commits = sorted(batch_ids(checkpoint_dir / "commits"))
        for batch in offsets[-2:]:
            text = _log_text(checkpoint_dir / "offsets" / str(batch))
            if _source_offsets(text, topic) is None:
                return CheckpointProblem(f"offsets/{batch} does not name {topic}", _names_a_source(text))
        if commits:
            if not offsets or commits[-1] > offsets[-1]:
                return CheckpointProblem(f"commits/{commits[-1]} has no offsets log")
            _log_text(checkpoint_dir / "commits" / str(commits[-1]))
            # Where the query resumes (``checkpoint_resume_offsets``): read whole here first.
            text = _log_text(checkpoint_dir / "offsets" / str(commits[-1]))
            if _source_offsets(text, topic) is None:
                return CheckpointProblem(f"offsets/{commits[-1]} does not name {topic}", _names_a_source(text))
        initial = checkpoint_dir / "sources" / "0" / "0"
        first = initial.read_text(errors="replace") if initial.exists() else None
        if first is not None and _source_offsets(first, topic) is None:
            return CheckpointProblem(f"sources/0/0 does not name {topic}", _names_a_source(first))
    except _DAMAGE as exc:
        return CheckpointProblem(f"{type(exc).__name__}: {str(exc)[:120]}")
    return None


def batch_end_offsets(checkpoint_dir: Path, batch_id: int, topic: str) -> dict[int, int] | None:
    """The offsets Spark planned batch ``batch_id`` to end at (it logs them before running
    the batch), or None when the log cannot tell."""
    try:
        return _source_offsets(_log_text(checkpoint_dir / "offsets" / str(batch_id)), topic)
    except _DAMAGE:
        return None


def batch_start_offsets(checkpoint_dir: Path, batch_id: int, topic: str) -> dict[int, int] | None:
    """Where batch ``batch_id`` starts: the previous batch's end, or the query's initial
    offsets for batch 0; None when the log cannot tell."""
    try:
        if batch_id > 0:
            return _source_offsets(_log_text(checkpoint_dir / "offsets" / str(batch_id - 1)), topic)
        return _source_offsets((checkpoint_dir / "sources" / "0" / "0").read_text(errors="replace"), topic)
    except _DAMAGE:
        return None


@dataclass(frozen=True)
class PlannedBatch:
    """What Spark logged for a batch of one topic before running it: where it starts and
    where it ends, per partition; None where the checkpoint cannot tell."""

    start: dict[int, int] | None = None
    end: dict[int, int] | None = None

    @property
    def reads_nothing(self) -> bool:
        """It starts where it ends in every partition: the first batch of a daemon started
        over an input with nothing new. False when the checkpoint cannot tell."""
        return self.start is not None and self.start == self.end

    @property
    def offsets(self) -> int | None:
        """How many offsets the batch spans (an upper bound on its records: transaction
        markers take offsets too); None when the checkpoint cannot tell."""
        if self.start is None or self.end is None or not set(self.end) <= set(self.start):
            return None
        return sum(max(0, o - self.start[p]) for p, o in self.end.items())

    def replay_filter(self, applied: Mapping[int, int]) -> dict[int, int]:
        """The store's next offsets that the batch's rows must be filtered by: none when it
        starts at or past them everywhere (the usual case: the filter's literals would
        otherwise make Spark generate and compile new code for every batch)."""
        if self.start is None:
            return dict(applied)
        return {p: o for p, o in applied.items() if self.start.get(p, 0) < o}

    def ends(self, seen: Mapping[int, int], applied: Mapping[int, int]) -> dict[int, int]:
        """The next offsets the batch brings each partition to, where it moves them past
        ``applied``: the highest of the rows ``seen`` and of the planned end. The planned
        end can lie beyond the last row (transaction markers, aborted records); recording
        it keeps the store's offsets equal to Spark's."""
        planned = self.end or {}
        moved = {p: max(seen.get(p, 0), planned.get(p, 0)) for p in {*seen, *planned}}
        return {p: o for p, o in moved.items() if o > applied.get(p, -1)}


def planned_batch(checkpoint_dir: Path | None, batch_id: int, topic: str) -> PlannedBatch:
    """Batch ``batch_id``'s offsets as Spark logged them in ``checkpoint_dir`` (two small
    files, read once a batch)."""
    if checkpoint_dir is None:
        return PlannedBatch()
    return PlannedBatch(batch_start_offsets(checkpoint_dir, batch_id, topic),
                        batch_end_offsets(checkpoint_dir, batch_id, topic))


def _log_text(path: Path) -> str:
    """A Spark metadata log file: a version line, then JSON lines; anything else is damage."""
    text = path.read_text()
    lines = text.splitlines()
    if not lines or not lines[0].startswith("v") or len(lines) < 2:
        raise ValueError(f"{path.name} is truncated")
    for line in lines[1:]:
        json.loads(line)
    return text


def checkpoint_resume_offsets(checkpoint_dir: Path, topic: str) -> dict[int, int] | None:
    """Offsets Spark resumes ``topic`` from in this checkpoint; None when there is none."""
    offsets_dir = checkpoint_dir / "offsets"
    commits = batch_ids(checkpoint_dir / "commits")
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
    gone = {p: (c, earliest[p]) for p, c in checkpoint.items() if p in earliest and c < earliest[p]}
    if gone:
        return StartPoint(False, from_store,
                          f"the checkpoint points at input that is gone (partition: (checkpoint, first offset left) "
                          f"{gone}); dropping it and starting from store offsets {_fmt(store_offsets)}")
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


def _holds_files(folder: Path) -> bool:
    return folder.is_dir() and any(f.is_file() for f in folder.rglob("*"))


def batch_ids(folder: Path) -> list[int]:
    """The batch ids of a Spark metadata log (``offsets`` or ``commits``); none when the
    folder is not there."""
    if not folder.is_dir():
        return []
    return [int(f.name) for f in folder.iterdir() if f.name.isdigit()]


def _source_offsets(text: str, topic: str) -> dict[int, int] | None:
    # Offset logs are "v1", a metadata line, then one JSON line per source; the
    # initial-offsets file is a version line and one JSON line.
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and f'"{topic}"' in line:
            doc = json.loads(line)
            if topic in doc:
                return {int(p): int(o) for p, o in doc[topic].items()}
    return None


def _names_a_source(text: str) -> bool:
    """Whether a log names a source's offsets (a line of topic -> partition -> offset): one
    that does, though not the topic asked for, is whole but made for another input."""
    for line in text.splitlines():
        try:
            doc = json.loads(line.strip()) if line.strip().startswith("{") else None
        except (ValueError, RecursionError):
            continue
        if isinstance(doc, dict) and doc and all(isinstance(v, dict) for v in doc.values()):
            return True
    return False


@dataclass(frozen=True)
class InputGap:
    """Input the store has not counted yet that the topic no longer holds."""

    partition: int
    stored: int  # the store's next offset
    low: int     # the first offset the partition holds now
    high: int    # its end now
    reset: bool  # the topic was re-created or truncated: its offsets restarted below the store's

    @property
    def lost(self) -> int:
        """Records known lost (a reset loses an unknown number)."""
        return 0 if self.reset else self.low - self.stored

    def describe(self) -> str:
        if self.reset:
            return (f"partition {self.partition} was re-created or truncated (offsets {self.low}..{self.high}, "
                    f"the store is at {self.stored})")
        return f"partition {self.partition} offsets {self.stored}..{self.low - 1} were deleted"


def input_gaps(stored: Mapping[int, int], offsets: Mapping[int, tuple[int, int]], recreated: bool) -> list[InputGap]:
    """Pure: where the input lost what the store still has to count. ``offsets`` holds
    (low, high) per partition; ``recreated`` says the topic id is not the recorded one."""
    gaps = []
    for p, (low, high) in sorted(offsets.items()):
        s = stored.get(p)
        if s is None:
            continue
        if recreated or s > high:
            gaps.append(InputGap(p, s, low, high, True))
        elif s < low:
            gaps.append(InputGap(p, s, low, high, False))
    return gaps
