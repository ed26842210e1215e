"""The restore "limit": a plain consumer reading a brewstream changelog to its end and
keeping the last value per key in a dict (read_committed, like the restorer). No store.

Prints ``RESULT {"latest", "records", "seconds"}``; ``seconds`` runs from creating the
consumer to the last record, the same span ``brewstream restore`` reports.
"""

from __future__ import annotations

import argparse
import time

import orjson

from bench.workers.plain import read_all


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    args = p.parse_args()

    started = time.monotonic()
    latest: dict[bytes, bytes | None] = {}
    records = 0
    for batch in read_all(args.bootstrap, args.topic, "read_committed"):
        for msg in batch:
            latest[msg.key() or b""] = msg.value()
        records += len(batch)
    seconds = time.monotonic() - started
    values = {k.decode(): int.from_bytes(v, "big") for k, v in latest.items() if v}
    print("RESULT " + orjson.dumps({"latest": values, "records": records, "seconds": seconds}).decode(), flush=True)


if __name__ == "__main__":
    main()
