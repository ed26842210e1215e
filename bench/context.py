"""What every scenario shares: the config, the broker, the work dir and fresh names."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.config import BenchConfig
from restorer.store import StateDir
from topics.catalog import Topics
from topics.kafka import KafkaConnection


@dataclass(frozen=True)
class DaemonDirs:
    state: Path
    checkpoint: Path

    @property
    def store(self) -> Path:
        return StateDir(self.state).store_path


@dataclass
class BenchContext:
    cfg: BenchConfig
    conn: KafkaConnection
    work: Path
    stamp: str
    broker_pid: int | None = None
    # The settings the ingest sweep chose for each peer, by its name in the results: its
    # daemons in the fed scenarios run with them.
    peer_settings: dict[str, Any] = field(default_factory=dict)
    _n: int = 0
    _t0: float = field(default_factory=time.monotonic)

    def fresh(self, what: str) -> str:
        """A name used once in this run: no two runs share topics, groups or dirs."""
        self._n += 1
        return f"{what}-{self._n}"

    def topics(self, what: str) -> Topics:
        return Topics(f"bench-{self.stamp}-{self.fresh(what)}.")

    def dirs(self, what: str) -> DaemonDirs:
        base = self.work / "runs" / self.fresh(what)
        return DaemonDirs(base / "state", base / "checkpoint")

    def path(self, what: str) -> Path:
        return self.work / "runs" / self.fresh(what)

    def log(self, what: str) -> Path:
        return self.work / "logs" / f"{self.fresh(what)}.log"

    def say(self, text: str) -> None:
        """Progress on stderr, so stdout keeps only the results table."""
        elapsed = time.monotonic() - self._t0
        print(f"[bench {elapsed:7.1f}s] {text}", file=sys.stderr, flush=True)
