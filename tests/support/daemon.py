"""One ``brewstream run`` process group under a test, with its own state dir, checkpoint
and log: driven by the one driver the drills and the benchmark use
(``service.drills.process``)."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from restorer.store import StateDir, Store
from service.drills.process import ChildProcess
from tests.support.helpers import BREW, Pipeline


class Instance:
    def __init__(self, pipe: Pipeline, root: Path, name: str, *extra: str) -> None:
        self.pipe, self.name = pipe, name
        self.state, self.ckpt, self.log = root / name / "state", root / name / "ckpt", root / f"{name}.log"
        self.extra = extra
        self.child: ChildProcess | None = None

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return None if self.child is None else self.child.proc

    def start(self, *more: str) -> Instance:
        args = [BREW, "run", "--state-dir", str(self.state), "--checkpoint-dir", str(self.ckpt), "--flush", "1s",
                "--trigger", "200ms", "--max-offsets-per-trigger", "400", *self.extra, *more]
        self.child = ChildProcess(self.name, args, self.log,
                                  env={"KAFKA_BOOTSTRAP": self.pipe.conn.bootstrap, **self.pipe.env},
                                  error=AssertionError)
        return self

    def text(self) -> str:
        """Everything it printed, over every start."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_for(self, fragment: str, timeout: float = 180) -> None:
        assert self.child is not None
        self.child.wait_until(lambda _text: fragment in self.text(), timeout, f"to log {fragment!r}")

    def signal(self, sig: int) -> None:
        assert self.child is not None
        self.child.signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        assert self.child is not None
        self.child.proc.wait(30)

    def stop(self) -> int:
        assert self.child is not None
        return self.child.stop(120)

    def seq(self) -> int:
        with Store(StateDir(self.state).store_path, read_only=True) as store:
            return store.last_seq()
