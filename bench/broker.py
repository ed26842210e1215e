"""The run's own sandbox broker: a free port, a data dir in the work dir, always stopped."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sandbox.broker import Sandbox, down, free_port, up
from topics.kafka import KafkaConnection, require_broker


@contextmanager
def broker(data_dir: Path, bootstrap: str | None = None) -> Iterator[tuple[KafkaConnection, int | None]]:
    """A sandbox broker for the duration of the block, or an existing one when given; with
    the broker's pid when it is ours (its CPU time is part of a run's cost)."""
    if bootstrap is not None:
        conn = KafkaConnection(bootstrap)
        require_broker(conn)
        yield conn, None
        return
    box = Sandbox(free_port(), data_dir)
    up(box)
    try:
        yield KafkaConnection(box.bootstrap), int(box.pid_file.read_text())
    finally:
        down(box)
