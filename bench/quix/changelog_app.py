"""Quix Streams' own changelog, written and then recovered (the restore scenario's peer).

Runs in the Quix virtualenv. One stateful application, two modes:

``write``  consumes ``{"round": r, "slot": s}`` messages, keyed ``slot-<s>`` and placed
           in partition s by the harness, and sets every state key the slot owns to r.
           ``commit_every=1`` makes each message its own checkpoint, so Quix produces
           one changelog record per key per message: rounds x keys records, written
           at-least-once (no transactions), to the compacted changelog Quix creates.
           Its segments are far from rolling, so compaction cannot have run.
``recover`` starts the same application (same consumer group, hence the same changelog)
           on an empty state dir, which makes Quix restore every partition from its
           changelog before it processes anything, then reads back each slot's keys
           on a probe message per partition. The time spent in Quix's recovery is
           measured by wrapping ``StateStoreManager.do_recovery``: that is the only
           instrumentation, and it does not change what recovery does.

Prints one ``RESULT {json}`` line.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson
from quixstreams import Application, State
from quixstreams.state.manager import StateStoreManager


def slot_keys(slot: int, slots: int, keys: int) -> list[str]:
    """The state keys one slot (one message key, one partition) owns."""
    return [f"key-{k:04d}" for k in range(slot, keys, slots)]


def main() -> None:
    args = _parse()
    recovery: list[float] = _time_recovery() if args.mode == "recover" else []
    probes: dict[int, dict[str, Any]] = {}

    def write(msg: dict[str, Any], state: State) -> int:
        for name in slot_keys(msg["slot"], args.slots, args.keys):
            state.set(name, msg["round"])
        return int(msg["round"])

    def probe(msg: dict[str, Any], state: State) -> int:
        probes[msg["slot"]] = {name: state.get(name) for name in slot_keys(msg["slot"], args.slots, args.keys)}
        return len(probes)

    app = Application(
        broker_address=args.bootstrap,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        processing_guarantee="at-least-once",
        state_dir=args.state_dir,
        commit_every=1 if args.mode == "write" else 0,
        loglevel=logging.WARNING,
    )
    topic = app.topic(args.topic, value_deserializer="json", key_deserializer="bytes")
    step: Callable[[dict[str, Any], State], int] = write if args.mode == "write" else probe
    app.dataframe(topic).apply(step, stateful=True)
    started = time.monotonic()
    app.run(count=args.count, collect=False)
    done = time.monotonic()
    result = {"mode": args.mode, "run_s": done - started, "recovery_s": sum(recovery),
              "probes": {str(s): v for s, v in probes.items()}}
    print("RESULT " + orjson.dumps(result).decode(), flush=True)


def _time_recovery() -> list[float]:
    spent: list[float] = []
    original = StateStoreManager.do_recovery

    def timed(self: StateStoreManager) -> None:
        t0 = time.monotonic()
        try:
            original(self)
        finally:
            spent.append(time.monotonic() - t0)

    StateStoreManager.do_recovery = timed
    return spent


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=("write", "recover"))
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--state-dir", required=True)
    p.add_argument("--slots", type=int, required=True, help="message keys = partitions of the input topic")
    p.add_argument("--keys", type=int, required=True, help="state keys over all slots")
    p.add_argument("--count", type=int, required=True, help="messages to process before stopping")
    return p.parse_args()


if __name__ == "__main__":
    main()
