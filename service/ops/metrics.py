"""Prometheus metrics of a running pipeline, served on --http-port when asked (``service.ops.http_api``).

Batch counters and durations come from the sinks' batch reports; gauges that need a
look outside the batch path (input lag, store size) are refreshed every two seconds on
a thread of their own, so scrapes never touch Kafka or RocksDB themselves.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from confluent_kafka import Consumer, KafkaException
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from restorer.store import Store
from service.instance.health import PHASES, Phase
from service.instance.periodic import Every
from service.ops.status import input_lag
from topics.errors import KafkaUnavailable
from topics.kafka import KafkaConnection, end_offsets, partitions_of

log = logging.getLogger(__name__)

REFRESH_S = 2.0
_PHASE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_ITEM = re.compile(r"^item \d+: ")
_NUMBER = re.compile(r"-?\d+")


def reason_label(reason: str) -> str:
    """A DLQ reason without the numbers in it, so the label set stays small."""
    return _NUMBER.sub("N", _ITEM.sub("", reason))


class Metrics:
    def __init__(self, pipeline: str) -> None:
        self.pipeline = pipeline
        self.registry = CollectorRegistry()
        r = self.registry

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, ["pipeline", *labels], registry=r)

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(name, doc, ["pipeline", *labels], registry=r)

        self.records = counter("brewstream_input_records", "Input records applied, good and bad")
        self.orders = counter("brewstream_orders_processed", "Orders counted by drink-count")
        self.bad = counter("brewstream_bad_records", "Input records routed to the DLQ, by reason", ("reason",))
        self.batches = counter("brewstream_batches", "Batches committed to the changelog and the store")
        self.changelog_records = counter("brewstream_changelog_records", "Records produced to the changelog")
        self.batch_seconds = Histogram("brewstream_batch_duration_seconds", "Time spent per batch, by phase",
                                       ["pipeline", "phase"], buckets=_PHASE_BUCKETS, registry=r)
        self.flush_seconds = Histogram("brewstream_topn_flush_seconds", "Time to read the store and publish the "
                                       "top-N snapshot", ["pipeline"], buckets=_PHASE_BUCKETS, registry=r)
        self.input_lag = gauge("brewstream_input_lag_records", "Input end offset minus the store's next offset",
                               ("partition",))
        self.store_keys = gauge("brewstream_store_keys", "Keys in the local store")
        self.store_bytes = gauge("brewstream_store_size_bytes", "Size of the local store on disk")
        self.last_batch_age = gauge("brewstream_last_batch_age_seconds", "Seconds since the last committed batch")
        self.restore_records = counter("brewstream_restore_records",
                                       "Changelog records applied by restores and catch-ups")
        self.restore_remaining = gauge("brewstream_restore_remaining_offsets",
                                       "Changelog offsets left to read by a restore in progress, or by a standby "
                                       "when it last followed its changelog", ("partition",))
        self.input_lost = counter("brewstream_input_lost_records", "Input records skipped because the topic no "
                                  "longer held them (--accept-input-loss)", ("partition",))
        self.role = gauge("brewstream_role", "1 for what this instance is doing now (starting, restoring, active, "
                          "standby, fenced, stopped), 0 for the rest", ("role",))
        self.standby_lag = gauge("brewstream_standby_changelog_lag_records",
                                 "Changelog offsets a standby has yet to apply (0 on an active instance)")
        self.watermark = gauge("brewstream_watermark_seconds", "Event-time watermark (unix seconds)")
        self.open_windows = gauge("brewstream_open_windows", "Windows and sessions kept in the store")
        self.late_events = counter("brewstream_late_events", "Events sent to the late output")
        self.window_results = counter("brewstream_window_results", "Window results emitted", ("emit",))
        self.orders_waiting = gauge("brewstream_orders_waiting", "Orders waiting for the menu's grace to pass")
        self.orders_refused = counter("brewstream_orders_refused", "Orders the join sent to its DLQ whole, by cause "
                                      "(no price, too late)", ("cause",))
        self.menu_watermark = gauge("brewstream_menu_watermark_seconds", "Latest menu event time read (unix seconds)")
        self.menu_records = counter("brewstream_menu_records", "Menu records applied, good and bad")
        self.kafka_outages = counter("brewstream_kafka_outages", "Episodes of Kafka unable to serve this instance "
                                     "(a broker, leader, coordinator or in-sync replicas lost) that it waited out")
        self.kafka_waiting = gauge("brewstream_kafka_waiting", "1 while this instance waits for Kafka to heal, else 0")
        self.held_back = gauge("brewstream_input_held_back_records", "Input records past a partition's last stable "
                               "offset that an open upstream transaction holds back from this active instance, "
                               "once it has for a few seconds (0: none)", ("partition",))
        self.held_back_seconds = gauge("brewstream_input_held_back_seconds", "How long an open upstream "
                                       "transaction has held the partition back (0: it does not)", ("partition",))
        self.changelog_deletes = gauge("brewstream_changelog_deletes_records", "1 while the changelog's settings let "
                                       "it delete records by itself (not compacted, or retention on), else 0")
        self._last_batch = math.nan
        self.last_batch_age.labels(pipeline).set_function(lambda: time.time() - self._last_batch)
        # Series without more labels exist from the start, so a scrape shows zeros, not gaps.
        for metric in (self.records, self.batches, self.changelog_records, self.restore_records,
                       self.store_keys, self.store_bytes, self.kafka_outages, self.kafka_waiting,
                       self.changelog_deletes):
            metric.labels(pipeline)

    def phase_changed(self, phase: Phase) -> None:
        for name in PHASES:
            self.role.labels(self.pipeline, name).set(1 if name == phase.name else 0)

    def batch_committed(self, at: float, records: int, bad_reasons: Mapping[str, int], changelog_records: int,
                        phases: Mapping[str, float]) -> None:
        p = self.pipeline
        self._last_batch = at
        self.batches.labels(p).inc()
        self.records.labels(p).inc(records)
        self.changelog_records.labels(p).inc(changelog_records)
        self.bad_records(bad_reasons)
        for phase, seconds in phases.items():
            self.batch_seconds.labels(p, phase).observe(seconds)

    def bad_records(self, reasons: Mapping[str, int]) -> None:
        """Input records sent to the DLQ, by reason."""
        for reason, n in reasons.items():
            self.bad.labels(self.pipeline, reason_label(reason)).inc(n)

    def kafka_outage(self, reason: str | None) -> None:
        """An outage began (its reason) or ended (None)."""
        if reason is not None:
            self.kafka_outages.labels(self.pipeline).inc()
        self.kafka_waiting.labels(self.pipeline).set(0 if reason is None else 1)

    def last_batch_at(self, at: float) -> None:
        self._last_batch = at

    def restore_progress(self, partition: int, _start: int, position: int, end: int) -> None:
        self.restore_remaining.labels(self.pipeline, str(partition)).set(max(0, end - position))


class MetricsRefresher:
    """Keeps the input lag and store size gauges fresh on a thread of their own."""

    def __init__(self, metrics: Metrics, conn: KafkaConnection, store: Callable[[], Store | None], input_topic: str,
                 interval_s: float = REFRESH_S) -> None:
        self.metrics, self.conn, self.store, self.topic = metrics, conn, store, input_topic
        self._consumer: Consumer | None = None
        self._every = Every(interval_s, self.refresh, "metrics refresh")

    def start(self) -> None:
        self._every.start()

    def stop(self) -> None:
        self._every.stop()
        if self._consumer is not None:
            self._consumer.close()

    def refresh(self) -> None:
        if self._consumer is None:
            self._consumer = self.conn.consumer()
        m, p = self.metrics, self.metrics.pipeline
        store = self.store()  # the daemon's store now: it opens another when its folder is deleted
        if store is None:
            return  # not whole yet (``engine.runner.OpenStore``): its lag would be its restore's, not the input's
        stored = store.next_offsets(self.topic)
        try:
            ends = end_offsets(self._consumer, self.topic, partitions_of(self.conn, self.topic))
        except (KafkaException, KafkaUnavailable) as exc:
            # The cluster is healing: the daemon says so once (``engine.outage``), and the
            # lag gauges keep their last value until the next refresh that goes through.
            log.debug("input lag not refreshed: %s", exc)
            ends = None
        if ends is not None:
            for partition, lag in input_lag(stored, ends).items():
                m.input_lag.labels(p, str(partition)).set(lag)
        m.store_keys.labels(p).set(store.key_count())
        m.store_bytes.labels(p).set(_dir_size(store.path))


def _dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
