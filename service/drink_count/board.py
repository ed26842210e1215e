"""The top-N board: every flush interval, a consistent read of the store becomes a
printed table and one JSON snapshot on the output topic. It runs on its own thread and
only reads the store, so flushing never holds up a batch.

The snapshot is produced without a transaction: a lost one is replaced by the next.
``seq`` counts snapshots of this process; consumers that need order across restarts
use ``ts``. Only the proven active instance publishes one (``may_publish``): a process
woken after a takeover must not put an older count after a newer one. A snapshot already
handed to the producer when its process was frozen would still go out on waking, so it
expires after ``stale_after_s`` (the takeover timeout): one frozen longer may have been
taken over, and librdkafka drops the expired record instead of sending it.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import TextIO

from confluent_kafka import KafkaException

from restorer.store import Store
from service.drink_count.counts import drink_counts
from service.drink_count.topn import SNAPSHOT_KEY, board_text, snapshot_record, top_n
from service.instance.periodic import Every
from topics.kafka import KafkaConnection, max_record_bytes
from topics.records import RECORD_OVERHEAD

log = logging.getLogger("brewstream")
FINAL_PROOF_WAIT_S = 3.0


class BoardFlusher:
    def __init__(self, store: Store, conn: KafkaConnection, topic: str, n: int, interval_s: float,
                 out: TextIO = sys.stdout, clock: Callable[[], datetime] = datetime.now,
                 on_flush: Callable[[float], None] | None = None,
                 may_publish: Callable[[], bool] = lambda: True, *, stale_after_s: float) -> None:
        self.store = store
        self.topic = topic
        self.n = n
        self.interval_s = interval_s
        self.out = out
        self.clock = clock
        self.on_flush = on_flush
        self.may_publish = may_publish
        self.seq = 0
        self._producer = conn.producer({"linger.ms": 0, "acks": "all",
                                        "message.timeout.ms": max(1, int(stale_after_s * 1000))})
        self._max_bytes = max_record_bytes(conn, topic) - RECORD_OVERHEAD
        self._every = Every(interval_s, self.flush, "top-N flush")

    def start(self) -> None:
        self._every.start()

    def stop(self, final_flush: bool = True) -> None:
        self._every.stop()
        if final_flush:
            # The last word is worth a short wait for the lease's proof (its own announcement
            # read back), which a busy moment can delay past one flush.
            deadline = time.monotonic() + FINAL_PROOF_WAIT_S
            while not self.may_publish() and time.monotonic() < deadline:
                time.sleep(0.05)
            self.flush()
        # Best effort (see above): a stop on the way to wait for Kafka leaves what it cannot send.
        self._producer.flush(10 if final_flush else 0)

    def flush(self) -> None:
        started = time.monotonic()
        state = drink_counts(self.store.read_all())
        now = self.clock()
        ranked = top_n(state.counts, self.n)
        self.seq += 1
        print(board_text(now, state.processed_orders, self.n, ranked), file=self.out, flush=True)
        record = snapshot_record(self.seq, now, state.processed_orders, ranked, self._max_bytes)
        if not self.may_publish():  # asked last, just before the produce
            log.debug("top-N snapshot %d not sent: this instance is not the proven active one", self.seq)
            return
        try:
            self._producer.produce(self.topic, key=SNAPSHOT_KEY, value=record)
            self._producer.poll(0)
        except (BufferError, KafkaException) as exc:
            # Snapshots are best effort by design (see above): the next one replaces this.
            log.warning("top-N snapshot not sent: %s", exc)
        if self.on_flush is not None:
            self.on_flush(time.monotonic() - started)
