"""The revenue foreachBatch sink: the drink-count order of commits, for the join's state.

    1. keep only order rows at or above the next offsets the store has applied
    2. in Spark: parse the orders (``orders.parse_orders``)
    3. on the driver: the menu records past the store's menu offsets (``menu_topic``)
    4. the pure join step: versions in, orders waiting, orders released and priced
    5. one Kafka transaction: state changes, the orders and menu records refused (to the
       revenue DLQ, with the reason), both topics' offsets, the commit markers
    6. one synced RocksDB WriteBatch with the same entries; return, Spark checkpoints

A tick between batches (``tick``) runs 3. to 6. without orders, so a menu update reaches
the store, and releases the orders it lets through, while no order arrives.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING

from restorer.changelog import ChangelogWriter
from restorer.codec import meta_key
from restorer.faults import FaultPlan
from restorer.store import Store
from service.dlq.records import dlq_records
from service.engine.sink import OrderedCommitSink, PhaseTimes, SinkOptions
from service.records.badrecords import BadRecord
from service.revenue.join import JoinConfig, step
from service.revenue.menu_topic import MenuRead, MenuReader, MenuUnavailable
from service.revenue.orders import OrderBatch, parse_orders
from service.revenue.state import MENU_TOPIC_ID, RevenueState, decode_revenue_state, step_entries
from topics.catalog import Topics
from topics.clock import iso_ns
from topics.errors import BrewError, one_line
from topics.kafka import KafkaConnection

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("brewstream")


@dataclass(frozen=True)
class RevenueConfig:
    join: JoinConfig
    currency: str
    max_ahead_ns: int
    tick_s: float = 1.0  # how often the menu is read between batches


@dataclass(frozen=True)
class RevenueReport:
    batch_id: int | None  # None: a tick, the menu read without orders
    seq: int
    orders: int
    menu_records: int
    priced: int
    refused: dict[str, int]  # by cause: "no price", "too late"
    bad_reasons: dict[str, int]  # bad orders and bad menu records, by reason
    waiting: int
    menu_time: int | None
    changelog_records: int
    times: PhaseTimes


class RevenueSink(OrderedCommitSink):
    def __init__(self, store: Store, changelog: ChangelogWriter, topics: Topics, cfg: RevenueConfig,
                 faults: FaultPlan, on_batch: Callable[[RevenueReport], None] | None = None,
                 options: SinkOptions | None = None) -> None:
        super().__init__(store, changelog, faults, options)
        self.opts = options or SinkOptions(KafkaConnection())
        self.topics, self.cfg, self.on_batch = topics, cfg, on_batch
        self._menu_down: float | None = None  # since when the menu cannot be read
        self.menu = MenuReader(self.opts.conn, topics.menu, cfg.currency, cfg.max_ahead_ns, self.opts.max_name_bytes,
                               self.opts.dlq_record_bytes)

    def tick(self) -> None:
        """Read the menu between batches. A failure here stops the sink like a failed batch."""
        with self._lock:
            if self._closed:
                return
            try:
                t0 = time.monotonic()
                menu = self._read_menu()
                if menu is not None and not menu.is_empty:  # the whole state is read only then
                    state = decode_revenue_state(self.store.items())
                    self._publish(state, OrderBatch(), menu, None, time.monotonic() - t0)
            except Exception as exc:
                self._failed(exc if isinstance(exc, BrewError) else BrewError(
                    f"reading the menu failed: {one_line(exc)}"))

    def close(self, timeout_s: float = -1) -> bool:
        done = super().close(timeout_s)
        if done:
            self.menu.close()
        return done

    def _apply(self, df: DataFrame, batch_id: int) -> None:
        t0 = time.monotonic()
        state = decode_revenue_state(self.store.items())
        t = self.topics
        # 1. + 2. Only what the store has not applied.
        applied = state.reserved.next_offsets(t.orders)
        planned = self.planned(batch_id, t.orders)
        batch = OrderBatch() if planned.reads_nothing else parse_orders(
            df, planned.replay_filter(applied), self.cfg.max_ahead_ns, self.opts.max_name_bytes,
            self.opts.dlq_record_bytes)
        batch.next_offsets = planned.ends(batch.next_offsets, applied)
        # 3. The menu up to now. When it cannot be read, the orders are taken but none is
        # released: a version one of them needs may be among what is unread.
        menu = self._read_menu()
        if batch.is_empty and (menu is None or menu.is_empty):
            return
        self._publish(state, batch, menu, batch_id, time.monotonic() - t0)

    def _read_menu(self) -> MenuRead | None:
        """The menu past what the store read; None (said once an episode) when unreadable."""
        read_id = self.store.get_u64([meta_key(MENU_TOPIC_ID)]).get(meta_key(MENU_TOPIC_ID))
        try:
            menu = self.menu.read(self.store.next_offsets(self.topics.menu), read_id)
        except MenuUnavailable as exc:
            if self._menu_down is None:
                log.warning("%s; orders wait (none is priced) until it can be read again", exc)
                self._menu_down = time.monotonic()
            return None
        if self._menu_down is not None:
            log.info("the menu topic %s can be read again after %.1fs", self.topics.menu,
                     time.monotonic() - self._menu_down)
            self._menu_down = None
        return menu

    def _publish(self, state: RevenueState, batch: OrderBatch, menu: MenuRead | None, batch_id: int | None,
                 aggregate_s: float) -> None:
        t, cfg = self.topics, self.cfg
        release = menu is not None
        menu = menu or MenuRead()
        # 4. The pure step.
        result = step(state.join, menu.updates, batch.orders, cfg.join, iso_ns, release=release)
        entries = step_entries(state, result, cfg.join.window_ns, len(batch.bad), len(menu.bad),
                               {t.orders: batch.next_offsets, t.menu: menu.next_offsets}, menu.topic_id)
        refused = [BadRecord(r.order.partition, r.order.offset, None, None, r.reason, carried=False)
                   for r in result.refused]
        conn, limit = self.opts.conn, self.opts.dlq_record_bytes
        bad_orders = sorted([*batch.bad, *refused], key=lambda b: (b.partition, b.offset))
        outputs = chain(dlq_records(conn, t.revenue_dlq, t.orders, bad_orders, limit),
                        dlq_records(conn, t.revenue_dlq, t.menu, menu.bad, limit))
        # 5. + 6. State, refused records and both topics' offsets in one transaction, then
        # the store; returning lets Spark commit its checkpoint.
        written, times = self._commit(entries, outputs, aggregate_s)
        if self.on_batch is not None:
            waiting = len(state.join.pending) + len(result.waiting) - len(result.released)
            self.on_batch(RevenueReport(
                batch_id, self.seq, len(batch.orders) + len(batch.bad), len(menu.updates) + len(menu.bad),
                len(result.priced), Counter(r.reason.split(":", 1)[0] for r in result.refused),
                Counter(b.reason for b in chain(batch.bad, menu.bad)), waiting, result.menu_time, len(written),
                times))
