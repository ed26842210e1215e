"""Screenshot of ``brewstream board`` against a live pipeline, for docs/board.png.

Starts a sandbox broker of its own on a free port, both daemons, both feeds and the
board, waits until the page has a full picture, takes the screenshot in headless
Chromium (Debian's /usr/bin/chromium) and stops everything it started.

    .venv/bin/python tools/board_screenshot.py [--out docs/board.png]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from contextlib import suppress
from pathlib import Path

from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright

from sandbox.broker import Sandbox, down, free_port, up
from service.engine.sink import ANY_BATCH
from topics.admin import create_topics
from topics.clock import wait_until
from topics.errors import BrewError
from topics.kafka import KafkaConnection

ROOT = Path(__file__).resolve().parents[1]
BREW = str(Path(sys.executable).parent / "brewstream")
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
READY_S = 300.0
# Steady flow everywhere: windows with both bars across the chart, busy closed windows
# in the table, a full ranking.
FULL_PICTURE = """() => {
  const count = (el) => Number((el.dataset.count ?? el.textContent).replace(/,/g, ""));
  const proc = [...document.querySelectorAll('#chart rect.bar-processing')];
  const both = [...document.querySelectorAll('#chart rect.bar-event')]
    .filter((r, i) => count(r) > 0 && count(proc[i]) > 0).length;
  const busy = [...document.querySelectorAll('#windows tbody tr')].filter((tr) => count(tr.children[2]) >= 20).length;
  return both >= 10 && busy >= 8 && document.querySelectorAll('#top li').length >= 10
    && document.getElementById('status').className === 'live';
}"""


class Processes:
    """Every child in its own process group, stopped in reverse order."""

    def __init__(self, work: Path, env: dict[str, str]) -> None:
        self.work, self.env = work, env
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, *args: str) -> Path:
        log = self.work / f"{name}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(list(args), stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                    cwd=self.work, start_new_session=True)
        self.procs.append((name, proc))
        return log

    def run(self, name: str, *args: str) -> None:
        with open(self.work / f"{name}.log", "ab") as out:
            subprocess.run(list(args), stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=self.work,
                           check=True, timeout=120)

    def stop_all(self) -> None:
        for _name, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for _name, proc in reversed(self.procs):
            with suppress(subprocess.TimeoutExpired):
                proc.wait(60)
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "board.png")
    parser.add_argument("--width", type=int, default=1200)
    parser.add_argument("--height", type=int, default=800)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="board-shot-") as tmp:
        work = Path(tmp)
        box = Sandbox(free_port(), work / "kafka")
        print(up(box))
        procs = Processes(work, {**os.environ, "KAFKA_BOOTSTRAP": box.bootstrap, "BREWSTREAM_TOPIC_PREFIX": ""})
        try:
            create_topics(KafkaConnection(box.bootstrap), 3, 1)
            run_log = procs.start("run", BREW, "run", "--state-dir", "state/drink-count",
                                  "--checkpoint-dir", "state/checkpoints/drink-count", "--flush", "1s")
            win_log = procs.start("windows", BREW, "windows", "--state-dir", "state/windows",
                                  "--checkpoint-dir", "state/checkpoints/windows", "--window", "10s",
                                  "--watermark-delay", "10s", "--print", "1s", "--print-windows", "12",
                                  "--from", "earliest")
            # A few records first, so that each daemon's first batch (the slow one, which
            # starts Spark's Python workers) is over before the steady feed starts; the
            # chart then shows processing time tracking event time, not one backlog bar.
            for name, cmd in (("prime-orders", "seed-orders"), ("prime-events", "events")):
                procs.run(name, BREW, cmd, "--count", "5", "--rate", "0", "--seed", "1",
                          *(("--late-prob", "0", "--event-lag-max", "1s") if cmd == "events" else ()))
            wait_until(lambda: ANY_BATCH.search(run_log.read_text()), READY_S, "the drink-count daemon")
            wait_until(lambda: ANY_BATCH.search(win_log.read_text()), READY_S, "the windows daemon")
            procs.start("seed-orders", BREW, "seed-orders", "--rate", "250ms", "--burst", "6", "--seed", "7")
            procs.start("events", BREW, "events", "--rate", "40ms", "--event-lag-max", "15s", "--seed", "7")
            board_log = procs.start("board", sys.executable, "-m", "service.cli", "board", "--port", str(free_port()),
                                    "--windows-state-dir", "state/windows")
            wait_until(lambda: "http://" in board_log.read_text(), 30, "the board")
            url = board_log.read_text().split()[2]
            print(f"board at {url}; waiting for a full picture")
            shoot(url, args.out, args.width, args.height)
            print(f"wrote {args.out}")
        finally:
            procs.stop_all()
            print(down(box))


def shoot(url: str, out: Path, width: int, height: int) -> None:
    with sync_playwright() as pw, tempfile.TemporaryDirectory(prefix="board-chromium-") as profile:
        ctx = pw.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, headless=True,
                                                    args=CHROMIUM_ARGS, viewport={"width": width, "height": height})
        try:
            page = ctx.new_page()
            page.goto(url)
            try:
                page.wait_for_function(FULL_PICTURE, timeout=READY_S * 1000, polling=1000)
            except PlaywrightTimeout:
                partial = out.with_suffix(".timeout.png")
                page.screenshot(path=str(partial))
                raise SystemExit(f"the page did not fill up within {READY_S:.0f}s; see {partial}") from None
            # Bars slide to their new width; take the picture between updates, at rest.
            page.wait_for_function("document.getAnimations().every(a => a.playState !== 'running')",
                                   timeout=10_000)
            out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(out))
        finally:
            ctx.close()


if __name__ == "__main__":
    try:
        main()
    except BrewError as exc:  # a wait that timed out, a broker that would not start
        raise SystemExit(f"board_screenshot: {exc}") from None
