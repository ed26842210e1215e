"""The revenue join on Kafka Streams (``RevenueJoin.java``), and brewstream's revenue
pipeline over the same topics (``bench.revenue_ours``), against the as-of oracle.

``python -m bench.revenue --bootstrap HOST:PORT``: on fresh topics under
``bench-<stamp>-revenue`` (orders and menu under brewstream's names, with the prefix
``bench-<stamp>-revenue.``), a compacted menu topic gets a seeded menu history (initial
prices, then changes, some of them out of order within the grace, a withdrawal, a drink
priced only later, one never priced; ``bench.revenue_data``) and an orders topic gets
``--orders`` orders with event-time headers, then a flush order (one item on every partition
of the join) later than everything by more than the grace. The application runs until every
item has left its join and reached its sums (or its DLQ); then the harness reads back its
revenue per drink and per shop and its DLQ, and compares them with the oracle.

``--feed-rate`` feeds both topics while the application runs instead, interleaved as they
arrive (``Dataset.arrivals``), so a menu record that arrives late comes after the orders it
applies to. With ``--audit`` (the default here) the application also writes every item with
the price it got, and each item priced differently from the oracle is put down to a cause.
``--brewstream`` then runs ``brewstream revenue --available-now`` over the same topics,
checked against the oracle's whole-order rule: the input then ends with a closing menu
record too, later than the flush order by more than the grace, which moves brewstream's
join clock (menu records do) past every order. ``python -m bench --scenarios revenue``
runs both catch-ups, unaudited, as a scenario of the benchmark (``bench.scenarios.revenue``).

Why the flush order: the join's clock is the highest item time its task has seen (menu
records do not move it), so without a later order the items of the last grace period wait
in its buffer for ever (``--flush none`` shows how many; ``--flush menu``, a later menu record,
releases none of them).

Why the menu is produced with the ``murmur2_random`` partitioner: Kafka Streams puts the
items on the repartition topic's partitions by Java's murmur2 of the drink, and the join
looks each one up in the menu partition of the same number; librdkafka's default
partitioner hashes otherwise, and the join would find most prices missing.
"""

from __future__ import annotations

import re
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import click
import orjson

from bench import revenue_ours
from bench.config import REPO
from bench.errors import BenchError
from bench.kafka_topics import committed_messages, create_pipeline, create_plain, delete_containing
from bench.outputs import latest_sums
from bench.procs import Child, kill_all, run_to_end
from bench.revenue_data import MS, AsOf, Dataset, MenuVersion, Oracle, Order, Plan, flush_drinks, generate, oracle
from bench.revenue_ours import OursSettings
from bench.systems import kstreams
from topics.catalog import Topics
from topics.errors import BrewError
from topics.event_time import EVENT_TIME, encode_event_time
from topics.kafka import KafkaConnection, require_broker
from topics.records import produce_waiting

MAIN = "brewbench.RevenueJoin"
TIMEOUT_S = 3600.0
STALL_EXIT_MS = 30_000  # nothing left the join for this long: the rest is stuck in its buffer
FLUSH_SHOP = "shop-flush"
CLOSING_DRINK = "~closing-bell"  # only the closing menu record names it
# What ends the input, later than everything by more than the grace: an order (of drinks that
# land on every partition of the repartition topic), a menu record (which moves brewstream's
# join clock, not Kafka Streams'), or nothing.
FLUSH_MODES = ("order", "menu", "none")
RUNNING = re.compile(r"state REBALANCING -> RUNNING")
READY_TIMEOUT_S = 120.0
FEED_TICK = 100  # orders between two looks at the clock of a live feed


@dataclass(frozen=True)
class RevenueTopics:
    """The topics of one run, under the application id. Orders and menu carry brewstream's
    names under the prefix ``<app id>.`` (``brewstream`` for brewstream's own), so both
    systems read the very same records."""

    app_id: str

    def name(self, what: str) -> str:
        return f"{self.app_id}.{what}"

    @property
    def brewstream(self) -> Topics:
        return Topics(f"{self.app_id}.")

    @property
    def orders(self) -> str:
        return self.brewstream.orders

    @property
    def menu(self) -> str:
        return self.brewstream.menu

    @property
    def by_drink(self) -> str:
        return self.name("revenue-by-drink")

    @property
    def by_shop(self) -> str:
        return self.name("revenue-by-shop")

    @property
    def dlq(self) -> str:
        return self.name("dlq")

    @property
    def audit(self) -> str:
        return self.name("audit")


@dataclass(frozen=True)
class JoinSettings:
    grace_ms: int = 10_000
    retention_ms: int = 86_400_000
    threads: int = 1
    audit: bool = False
    flush: str = "order"  # FLUSH_MODES
    # A closing menu record later than the flush order by more than the grace: it moves
    # brewstream's join clock (menu records do, not Kafka Streams') past every order.
    close_menu: bool = False


def create_topics(conn: KafkaConnection, topics: RevenueTopics, partitions: int, audit: bool,
                  brewstream: bool = False) -> None:
    # The menu as brew.menu.v1 is kept: compacted, the latest version per drink survives.
    # Not the catalog's settings (segments rolled every minute): the records carry event
    # times months old, older than its min.compaction.lag.ms, and a cleaner could compact
    # history away under either system mid-run.
    create_plain(conn, topics.menu, partitions, {"cleanup.policy": "compact"})
    names = [topics.orders, topics.by_drink, topics.by_shop, topics.dlq] + ([topics.audit] if audit else [])
    for name in names:
        create_plain(conn, name, partitions)
    if brewstream:  # the rest of brewstream's topics under the prefix; the two above exist
        create_pipeline(conn, topics.brewstream, partitions)


def produce_menu(conn: KafkaConnection, topic: str, data: Dataset) -> None:
    producer = _menu_producer(conn)
    for v in data.menu:
        _produce_version(producer, topic, v)
    if producer.flush(120):
        raise BenchError(f"the menu records were not all delivered to {topic}")


def _menu_producer(conn: KafkaConnection) -> Any:
    return conn.producer({"linger.ms": 5, "enable.idempotence": True, "acks": "all", "partitioner": "murmur2_random"})


def _produce_version(producer: Any, topic: str, v: MenuVersion) -> None:
    headers = [(EVENT_TIME, encode_event_time(v.time_ns))] if v.header else None
    produce_waiting(producer, topic, v.drink.encode(), v.value(), headers=headers, timestamp_ms=v.time_ns // MS)


def _produce_order(producer: Any, topic: str, order: Order) -> None:
    # The Kafka timestamp is the time of producing: only the header carries the event time.
    produce_waiting(producer, topic, order.shop_id.encode(), order.value(),
                    headers=[(EVENT_TIME, encode_event_time(order.time_ns))])


def _produce_flush(producer: Any, topic: str, partitions: int, at_ns: int) -> None:
    """The flush order: one item of a drink on every partition of the repartition topic."""
    items = [{"drink": d, "quantity": 1} for d in flush_drinks(partitions)]
    value = orjson.dumps({"order_id": "o-flush", "shop_id": FLUSH_SHOP, "items": items})
    produce_waiting(producer, topic, FLUSH_SHOP.encode(), value, headers=[(EVENT_TIME, encode_event_time(at_ns))])


def _order_producer(conn: KafkaConnection) -> Any:
    return conn.producer({"linger.ms": 20, "batch.size": 1_000_000, "enable.idempotence": True, "acks": "all"})


def produce_orders(conn: KafkaConnection, topic: str, data: Dataset, partitions: int, flush_after_ns: int | None,
                   ) -> None:
    """The orders, each with its event-time header, then the flush order when asked for."""
    producer = _order_producer(conn)
    for i, order in enumerate(data.orders):
        _produce_order(producer, topic, order)
        if i % 50_000 == 0:
            producer.poll(0)
    if flush_after_ns is not None:
        _produce_flush(producer, topic, partitions, flush_after_ns)
    if producer.flush(120):
        raise BenchError(f"the orders were not all delivered to {topic}")


def feed_live(conn: KafkaConnection, topics: RevenueTopics, data: Dataset, partitions: int, rate: int,
              flush_after_ns: int | None) -> float:
    """Menu records and orders interleaved as they arrive (``Dataset.arrivals``), the orders
    at ``rate`` a second, while the application runs: a menu record that arrives late then
    really comes after the orders it applies to. Returns the seconds the feed took."""
    menu_producer, order_producer = _menu_producer(conn), _order_producer(conn)
    started = time.monotonic()
    orders = 0
    for record in data.arrivals():
        if isinstance(record, MenuVersion):
            _produce_version(menu_producer, topics.menu, record)
            menu_producer.poll(0)
            continue
        _produce_order(order_producer, topics.orders, record)
        orders += 1
        if orders % FEED_TICK == 0:
            order_producer.poll(0)
            ahead = started + orders / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)  # pacing the feed, not waiting for a condition
    if flush_after_ns is not None:
        _produce_flush(order_producer, topics.orders, partitions, flush_after_ns)
    if menu_producer.flush(120) or order_producer.flush(120):
        raise BenchError(f"the live feed into {topics.app_id} was not all delivered")
    return time.monotonic() - started


def read_records(conn: KafkaConnection, topic: str, timeout: float = 120.0) -> list[tuple[bytes, bytes, int]]:
    """Every committed record of ``topic`` up to its end offsets of now: (key, value, Kafka timestamp in ms)."""
    return [(msg.key() or b"", msg.value() or b"", msg.timestamp()[1])
            for msg in committed_messages(conn, topic, timeout)]


def app_args(conn: KafkaConnection, topics: RevenueTopics, settings: JoinSettings, items: int, work: Path,
             ) -> list[str]:
    args = ["java", "-cp", f"{kstreams.JARS}/*:{kstreams.APP_JAR}", MAIN, "--mode", "count",
            "--bootstrap", conn.bootstrap, "--app-id", topics.app_id, "--state-dir", str(work / "state"),
            "--orders", topics.orders, "--menu", topics.menu, "--by-drink", topics.by_drink,
            "--by-shop", topics.by_shop, "--dlq", topics.dlq, "--grace-ms", str(settings.grace_ms),
            "--retention-ms", str(settings.retention_ms), "--threads", str(settings.threads),
            "--items", str(items), "--stall-exit-ms", str(STALL_EXIT_MS)]
    if settings.audit:
        args += ["--audit", topics.audit]
    return args


def fill_backlog(conn: KafkaConnection, topics: RevenueTopics, settings: JoinSettings, data: Dataset,
                 partitions: int) -> None:
    """Both topics filled first: the menu, the orders and the flush order, the closing record."""
    produce_menu(conn, topics.menu, data)
    produce_orders(conn, topics.orders, data, partitions, _flush_at(data, settings, "order"))
    _produce_menu_ends(conn, topics, data, settings)
    say(f"topics under {topics.app_id} filled")


def run_backlog(conn: KafkaConnection, topics: RevenueTopics, settings: JoinSettings, data: Dataset,
                work: Path) -> Child:
    """The application over the filled topics: its catch-up rate."""
    say(f"starting {MAIN}")
    return run_to_end("kstreams-revenue", app_args(conn, topics, settings, data.items, work),
                      work / "kstreams-revenue.log", TIMEOUT_S)


def run_live(conn: KafkaConnection, topics: RevenueTopics, settings: JoinSettings, data: Dataset,
             partitions: int, work: Path, rate: int) -> Child:
    """The application first, then the live feed."""
    child = Child("kstreams-revenue", app_args(conn, topics, settings, data.items, work),
                  work / "kstreams-revenue.log")
    child.wait_for(RUNNING, READY_TIMEOUT_S)
    say(f"{MAIN} running; feeding {len(data.orders):,} orders at {rate:,}/s with the menu interleaved")
    took = feed_live(conn, topics, data, partitions, rate, _flush_at(data, settings, "order"))
    _produce_menu_ends(conn, topics, data, settings)
    say(f"feed done in {took:.1f}s")
    code = child.finish(TIMEOUT_S)
    if code != 0:
        raise BenchError(f"{MAIN} exited {code}; see {child.log_path}")
    return child


def _flush_at(data: Dataset, settings: JoinSettings, kind: str) -> int | None:
    return data.max_time_ns + (settings.grace_ms + 60_000) * MS if settings.flush == kind else None


def closing_at(data: Dataset, settings: JoinSettings) -> int:
    """The closing menu record's time: later than the flush order (or anything, without
    one) by more than the grace."""
    return data.max_time_ns + 2 * (settings.grace_ms + 60_000) * MS


def _produce_menu_ends(conn: KafkaConnection, topics: RevenueTopics, data: Dataset, settings: JoinSettings) -> None:
    menu_flush = _flush_at(data, settings, "menu")
    if menu_flush is not None:
        produce_menu_flush(conn, topics.menu, menu_flush)
    if settings.close_menu:
        produce_menu_flush(conn, topics.menu, closing_at(data, settings), CLOSING_DRINK)


def produce_menu_flush(conn: KafkaConnection, topic: str, at_ns: int, drink: str = "~menu-flush") -> None:
    """A price for a drink nobody orders, later than everything by more than the grace."""
    producer = _menu_producer(conn)
    _produce_version(producer, topic, MenuVersion(drink, at_ns, 100))
    if producer.flush(120):
        raise BenchError(f"the menu flush record was not delivered to {topic}")


# ------------------------------------------------------------------ comparison


@dataclass
class Cases:
    """Items priced differently from the oracle, by cause, as the audit topic shows them."""

    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)

    def add(self, cause: str, n: int, example: str) -> None:
        self.counts[cause] += n
        self.examples.setdefault(cause, example)


RETENTION = "null from the versioned store: the order's time is older than the menu store's clock - history retention"
SAME_MS = "same millisecond: Kafka Streams' clock is in ms, a version later by < 1 ms counts as valid"
OTHER_VERSION = "priced with another version (a menu record that came after the join, past its grace, or was dropped)"
UNPRICED_OTHER = "null from the join where the oracle has a price (not explained by the retention)"
PRICED_NO_PRICE = "priced where the oracle has no price"
STUCK = "never left the join (waiting in its buffer for the join's clock to pass t + grace)"
EXTRA = "left the join but matches no order item"


def classify(data: Dataset, settings: JoinSettings, audit: Iterable[tuple[bytes, bytes, int]]) -> Cases:
    """Match every item out of the join (key: drink, shop, time in ms, quantity) with the
    oracle's items of that key, and put each price that differs down to a cause."""
    exact = AsOf(data.menu)
    per_ms = AsOf(data.menu, MS)
    menu_clock_ms = max(v.time_ns for v in data.menu) // MS
    expected: dict[tuple[str, str, int, int], Counter[int | None]] = {}
    for order in data.orders:
        for drink, quantity in order.items:
            key = (drink, order.shop_id, order.time_ns // MS, quantity)
            expected.setdefault(key, Counter())[exact.price(drink, order.time_ns)] += 1
    got: dict[tuple[str, str, int, int], Counter[int | None]] = {}
    for raw_key, value, ts in audit:
        quantity = int.from_bytes(value[0:8], "big", signed=True)
        price: int | None = int.from_bytes(value[8:16], "big", signed=True)
        shop = value[16:].decode()
        if shop == FLUSH_SHOP:
            continue
        if price == -(2**63):
            price = None
        got.setdefault((raw_key.decode(), shop, ts, quantity), Counter())[price] += 1
    cases = Cases()
    for key in expected.keys() | got.keys():
        want, have = expected.get(key, Counter()), got.get(key, Counter())
        missing, extra = want - have, have - want
        drink, shop, ms, _q = key
        where = f"{drink} at {ms} ms, {shop}"
        for price, n in extra.items():
            if price is None:
                cause = RETENTION if ms < menu_clock_ms - settings.retention_ms else UNPRICED_OTHER
            elif per_ms.price(drink, ms * MS) == price:
                cause = SAME_MS
            elif not missing or None in missing:
                cause = PRICED_NO_PRICE
            else:
                cause = OTHER_VERSION
            cases.add(cause, n, f"{where}: got {price}, oracle {sorted(missing.elements(), key=str)}")
        unmatched = sum(missing.values()) - sum(extra.values())
        if unmatched > 0:
            cases.add(STUCK, unmatched, where)
        elif unmatched < 0:
            cases.add(EXTRA, -unmatched, where)
    return cases


@dataclass
class Agreement:
    drinks: int
    drinks_equal: int
    shops: int
    shops_equal: int
    dlq_items: int
    oracle_unpriced: int
    per_drink: list[tuple[str, int, int | None]]  # drink, oracle cents, Kafka Streams' cents

    @property
    def exact(self) -> bool:
        return (self.drinks == self.drinks_equal and self.shops == self.shops_equal
                and self.dlq_items == self.oracle_unpriced)


def agreement(expected: Oracle, by_drink: dict[str, int], by_shop: dict[str, int], dlq_items: int) -> Agreement:
    drinks = sorted(set(expected.by_drink) | set(by_drink))
    shops = sorted(set(expected.by_shop) | set(by_shop))
    return Agreement(
        drinks=len(drinks), drinks_equal=sum(expected.by_drink.get(d) == by_drink.get(d) for d in drinks),
        shops=len(shops), shops_equal=sum(expected.by_shop.get(s) == by_shop.get(s) for s in shops),
        dlq_items=dlq_items, oracle_unpriced=expected.unpriced_items,
        per_drink=[(d, expected.by_drink.get(d, 0), by_drink.get(d)) for d in drinks])


# ------------------------------------------------------------------ the run


def run(conn: KafkaConnection, plan: Plan, settings: JoinSettings, partitions: int, work: Path,
        keep_topics: bool, feed_rate: int | None = None, app_id: str | None = None,
        kafka_streams: bool = True, ours: OursSettings | None = None) -> dict[str, Any]:
    """One run on fresh topics (under ``app_id``, also the application's id): Kafka Streams
    (unless not ``kafka_streams``), then brewstream with ``ours`` over the same topics as a
    catch-up, each read back and compared with the oracle under its own rule; the topics are
    deleted afterwards unless ``keep_topics``. With brewstream the input also ends with the
    closing menu record (``JoinSettings.close_menu``)."""
    if kafka_streams:
        kstreams.require()
    if not kafka_streams and feed_rate:
        raise BenchError("a live feed is fed to Kafka Streams; run it with Kafka Streams")
    if ours is not None:
        settings = replace(settings, close_menu=True)
    topics = RevenueTopics(app_id or f"bench-{time.strftime('%Y%m%d-%H%M%S')}-revenue")
    say(f"generating {plan.orders:,} orders and the menu history (seed {plan.seed})")
    data = generate(plan)
    expected = oracle(data)
    say(f"{len(data.menu):,} menu records, {len(data.orders):,} orders, {data.items:,} items; the oracle prices "
        f"{expected.priced_items:,} and finds {expected.unpriced_items:,} without a price "
        f"({expected.refused_orders:,} orders with one)")
    ks: dict[str, Any] | None = None
    ours_result: dict[str, Any] | None = None
    try:
        create_topics(conn, topics, partitions, settings.audit, brewstream=ours is not None)
        if feed_rate:
            ks = _kstreams_result(conn, topics, settings, data, expected,
                                  run_live(conn, topics, settings, data, partitions, work, feed_rate))
        else:
            fill_backlog(conn, topics, settings, data, partitions)
            if kafka_streams:
                ks = _kstreams_result(conn, topics, settings, data, expected,
                                      run_backlog(conn, topics, settings, data, work))
        if ours is not None:
            say(f"starting brewstream revenue --available-now over {topics.orders} and {topics.menu}")
            ours_result = revenue_ours.run(conn, topics.brewstream, expected, len(data.orders), settings.grace_ms,
                                           settings.retention_ms, ours, work / "brewstream")
    finally:
        kill_all()
        if not keep_topics:
            delete_containing(conn, topics.app_id)
    return {
        "plan": asdict(plan), "settings": asdict(settings), "partitions": partitions,
        "mode": f"live feed at {feed_rate:,} orders/s" if feed_rate else "backlog (catch-up)",
        "menu_records": len(data.menu), "orders": len(data.orders), "items": data.items,
        "oracle": {"priced_items": expected.priced_items, "unpriced_items": expected.unpriced_items,
                   "unpriced_by_drink": expected.unpriced, "refused_orders": expected.refused_orders,
                   "partly_priced_orders": expected.partly_priced_orders,
                   "whole_order_rule_cents": sum(expected.whole_order_by_drink.values()),
                   "item_rule_cents": sum(expected.by_drink.values())},
        "kstreams": ks, "brewstream": ours_result,
    }


def _kstreams_result(conn: KafkaConnection, topics: RevenueTopics, settings: JoinSettings, data: Dataset,
                     expected: Oracle, child: Child) -> dict[str, Any]:
    out = child.result()
    by_drink = latest_sums(conn, topics.by_drink)
    by_shop = latest_sums(conn, topics.by_shop)
    dlq = read_records(conn, topics.dlq)
    cases = classify(data, settings, read_records(conn, topics.audit)) if settings.audit else None
    agree = agreement(expected, by_drink, by_shop, len(dlq))
    first, done = float(out["first"]), float(out["done"])
    processing_s = done - first
    return {
        "processing_s": processing_s, "orders_per_s": len(data.orders) / processing_s,
        "startup_s": first - child.started, "wall_s": child.wall_s, "close_s": float(out["closed"]) - done,
        "peak_rss_bytes": child.rss.peak, "app": out,
        "agreement": asdict(agree) | {"exact": agree.exact},
        "cases": None if cases is None else {c: {"items": n, "example": cases.examples[c]}
                                             for c, n in cases.counts.most_common()},
    }


def exact(result: dict[str, Any]) -> bool:
    """Every system of the run agrees with the oracle under its own rule."""
    return all(result[s]["agreement"]["exact"] for s in ("kstreams", "brewstream") if result[s] is not None)


def say(text: str) -> None:
    print(f"[revenue] {text}", file=sys.stderr, flush=True)


def print_report(result: dict[str, Any]) -> None:
    print(f"{result['mode']}: orders {result['orders']:,} ({result['items']:,} items), "
          f"menu records {result['menu_records']:,}, grace {result['settings']['grace_ms']} ms, "
          f"history retention {result['settings']['retention_ms']} ms, flush: {result['settings']['flush']}"
          f"{', closing menu record' if result['settings']['close_menu'] else ''}")
    oracle_part = result["oracle"]
    print(f"oracle: {oracle_part['unpriced_items']:,} items without a price at their time, in "
          f"{oracle_part['refused_orders']:,} orders, {oracle_part['partly_priced_orders']:,} of them with some "
          f"items priced; the item rule (Kafka Streams) counts "
          f"{oracle_part['item_rule_cents'] - oracle_part['whole_order_rule_cents']:,} cents of theirs that the "
          "whole-order rule (brewstream) sends to the DLQ with their order")
    if result["kstreams"] is not None:
        _print_kstreams(result["kstreams"], result["items"])
    if result["brewstream"] is not None:
        revenue_ours.print_report(result["brewstream"])


def _print_kstreams(result: dict[str, Any], items: int) -> None:
    agree = result["agreement"]
    app = result["app"]
    print(f"Kafka Streams: processing {result['processing_s']:.2f} s (first order read -> every item summed): "
          f"{result['orders_per_s']:,.0f} orders/s; start-up {result['startup_s']:.2f} s, "
          f"wall {result['wall_s']:.2f} s, peak RSS {result['peak_rss_bytes'] / 2**20:,.0f} MiB")
    print(f"items out of the join {app['items_joined']:,} of {items:,} (priced {app['priced']:,}, "
          f"DLQ {app['unpriced']:,}){'; STALLED: the rest never left the join' if app['stalled'] else ''}")
    print(f"per drink: {agree['drinks_equal']}/{agree['drinks']} equal to the oracle's item rule; per shop: "
          f"{agree['shops_equal']}/{agree['shops']}; DLQ items {agree['dlq_items']:,} vs the oracle's "
          f"{agree['oracle_unpriced']:,}: {'EXACT' if agree['exact'] else 'DIFFERENT'}")
    print(f"{'drink':<24} {'oracle cents':>14} {'kstreams cents':>15} {'diff':>10}")
    for drink, want, got in agree["per_drink"]:
        diff = "" if got == want else f"{(got or 0) - want:+,}"
        print(f"{drink:<24} {want:>14,} {'-' if got is None else f'{got:,}':>15} {diff:>10}")
    if result["cases"] is not None:
        if not result["cases"]:
            print("audit: every item priced as the oracle prices it")
        for cause, entry in result["cases"].items():
            print(f"audit: {entry['items']:,} item(s): {cause}; e.g. {entry['example']}")


CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.command(context_settings=CONTEXT)
@click.option("--bootstrap", required=True, help="The broker (host:port) to create the topics on.")
@click.option("--orders", type=click.IntRange(min=100), default=200_000, show_default=True)
@click.option("--seed", type=int, default=7, show_default=True)
@click.option("--partitions", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--span-s", type=click.FloatRange(min=60), default=3600.0, show_default=True,
              help="Event time covered by the orders.")
@click.option("--menu-changes", type=click.IntRange(min=0), default=400, show_default=True)
@click.option("--late-fraction", type=click.FloatRange(0, 1), default=0.1, show_default=True,
              help="Share of the price changes that arrive late.")
@click.option("--late-max-ms", type=click.IntRange(min=1), default=None,
              help="How late at most, in event time.  [default: 80% of the grace]")
@click.option("--sub-ms-edges", type=click.IntRange(min=0), default=0, show_default=True,
              help="Orders with a price change of their drink later in the same millisecond.")
@click.option("--grace-ms", type=click.IntRange(min=0), default=10_000, show_default=True)
@click.option("--retention-ms", type=click.IntRange(min=1), default=86_400_000, show_default=True,
              help="History retention of the menu's versioned store.")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--audit/--no-audit", default=True, show_default=True,
              help="Also write every joined item, to find each one priced differently (slows the run).")
@click.option("--flush", type=click.Choice(FLUSH_MODES), default="order", show_default=True,
              help="End the input with an order (on every partition) or a menu record later than everything by "
                   "more than the grace, or with neither.")
@click.option("--feed-rate", type=click.IntRange(min=1), default=None,
              help="Feed orders at this rate with the menu interleaved, while the application runs, instead of "
                   "filling both topics first.")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path),
              default=REPO / ".sandbox" / "bench-revenue", show_default=True)
@click.option("--keep-work", is_flag=True, help="Keep the state dir and the application's log.")
@click.option("--keep-topics", is_flag=True)
@click.option("--brewstream/--no-brewstream", default=False, show_default=True,
              help="Then run `brewstream revenue --available-now` over the same topics (its default flags but "
                   "--grace and --retention), checked against the oracle's whole-order rule.")
@click.option("--kafka-streams/--no-kafka-streams", default=True, show_default=True,
              help="Run Kafka Streams (without it, only brewstream: the topics are filled first).")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the result as JSON here.")
def revenue(bootstrap: str, orders: int, seed: int, partitions: int, span_s: float, menu_changes: int,
         late_fraction: float, late_max_ms: int | None, sub_ms_edges: int, grace_ms: int, retention_ms: int,
         threads: int, audit: bool, flush: str, feed_rate: int | None, work_dir: Path, keep_work: bool,
         keep_topics: bool, brewstream: bool, kafka_streams: bool, output: Path | None) -> None:
    """Kafka Streams' versioned stream-table join of orders with the menu (and brewstream's revenue pipeline
    over the same topics), against the as-of oracle."""
    conn = KafkaConnection(bootstrap)
    require_broker(conn)
    plan = Plan(orders=orders, seed=seed, span_s=span_s, changes=menu_changes, late_fraction=late_fraction,
                late_max_ms=late_max_ms or max(1, grace_ms * 4 // 5), sub_ms_edges=sub_ms_edges)
    settings = JoinSettings(grace_ms, retention_ms, threads, audit, flush)
    work = work_dir / time.strftime("%Y%m%d-%H%M%S")
    work.mkdir(parents=True, exist_ok=True)
    try:
        result = run(conn, plan, settings, partitions, work, keep_topics, feed_rate,
                     kafka_streams=kafka_streams, ours=OursSettings() if brewstream else None)
    finally:
        if not keep_work:
            shutil.rmtree(work, ignore_errors=True)
    print_report(result)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    if not exact(result):
        sys.exit(2)


def main() -> None:
    """Exit 0 when every system run agrees with the oracle, 2 when one does not, 1 when the run failed."""
    try:
        revenue.main(standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except BrewError as exc:  # BenchError, or a shared helper's (a broker that does not answer)
        click.echo(f"revenue: FAILED: {exc}", err=True)
        sys.exit(1)
    finally:
        kill_all()


if __name__ == "__main__":
    main()
