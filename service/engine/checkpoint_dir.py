"""The Spark checkpoint dir of one instance: owned like its state dir, and dropped only by
its owner, only of what Spark wrote there.

The rule, stated here once: a checkpoint dir holds ``brewstream.lock``, an flock held by
the one process that runs a query on it (``restorer.file_lock``), taken at start beside
the state dir's. Another live instance's checkpoint dir is refused in one line naming its
pid, never touched. A drop (a damaged checkpoint, one ahead of the store, a standby's
own) deletes Spark's entries only (``SPARK_ENTRIES`` and Spark's hidden files beside
``metadata``), so the lock, and anything else someone put in the folder, outlive it. The
checkpoint dir may not be the state dir, hold it, or lie inside its store.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from restorer.file_lock import lock_folder
from service.engine.start_point import batch_ids
from topics.errors import BrewError

# What Spark writes at the top of a checkpoint location (``state`` only for stateful
# operators), beside ``.metadata.crc`` and the temporary files of an atomic write.
SPARK_ENTRIES = frozenset({"metadata", "offsets", "commits", "sources", "state"})


def spark_entry(name: str) -> bool:
    """Whether a checkpoint's top-level entry ``name`` is Spark's: one of ``SPARK_ENTRIES``,
    or a hidden file of ``metadata`` (``.metadata.crc``, ``.metadata.<id>.tmp`` and its
    ``..metadata.<id>.tmp.crc``)."""
    return name in SPARK_ENTRIES or (name.startswith(".") and name.lstrip(".").startswith("metadata."))


def overlap_problem(checkpoint_dir: Path, state_dir: Path) -> str | None:
    """Why ``checkpoint_dir`` cannot serve beside ``state_dir``, or None (both resolved)."""
    ckpt, state = checkpoint_dir.resolve(), state_dir.resolve()
    store = state / "store"
    if ckpt == state or state.is_relative_to(ckpt):
        where = "is the state dir" if ckpt == state else f"holds the state dir {state}"
    elif ckpt.is_relative_to(store):
        where = f"lies inside the store {store}"
    else:
        return None
    return (f"the checkpoint dir {checkpoint_dir} {where}: a damaged checkpoint is deleted, so it must be a folder "
            "of its own; pass another --checkpoint-dir")


class CheckpointDir:
    """The checkpoint dir, taken for this process while the block runs."""

    def __init__(self, path: Path, state_dir: Path) -> None:
        self.path, self.state_dir = Path(path), Path(state_dir)
        self._fd: int | None = None

    def __enter__(self) -> CheckpointDir:
        problem = overlap_problem(self.path, self.state_dir)
        if problem:
            raise BrewError(problem)
        self._fd = lock_folder(self.path, "checkpoint dir", "--checkpoint-dir")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the flock
            self._fd = None


def forget_unfinished_batches(checkpoint_dir: Path) -> list[int]:
    """Delete the offset logs of batches Spark planned but never committed (a driver killed
    mid-batch), so that it plans them again from its last committed batch up to the input's
    end now, instead of running the planned range on its own first: after a crash, one
    batch instead of two before the output is current again. Safe because progress lives
    with the state: the store says what such a batch had applied, and the sink filters
    those rows out whatever the batch's range (``start_point.PlannedBatch.replay_filter``).
    Returns the batch ids forgotten."""
    offsets = checkpoint_dir / "offsets"
    committed = max(batch_ids(checkpoint_dir / "commits"), default=-1)
    unfinished = sorted(b for b in batch_ids(offsets) if b > committed)
    names = {str(b) for b in unfinished}
    for f in offsets.iterdir() if unfinished else ():
        # the log and its hidden companions (``.N.crc``, a temporary ``.N.<id>.tmp``)
        if f.name.lstrip(".").split(".")[0] in names:
            try:
                f.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise BrewError(f"cannot delete {f} from the checkpoint: {exc.strerror}; check its "
                                "permissions") from None
    return unfinished


def drop_checkpoint(checkpoint_dir: Path) -> None:
    """Delete what Spark wrote in ``checkpoint_dir`` (its owner's; see the rule above):
    the query then starts from the store's offsets."""
    try:
        entries = [e for e in checkpoint_dir.iterdir() if spark_entry(e.name)]
    except FileNotFoundError:
        return
    except OSError as exc:
        raise BrewError(f"cannot read the checkpoint {checkpoint_dir}: {exc.strerror}; check its permissions") from None
    for entry in entries:
        try:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise BrewError(f"cannot delete the checkpoint {checkpoint_dir}: {exc.strerror}; delete its "
                            f"{', '.join(sorted(SPARK_ENTRIES))} by hand") from None
