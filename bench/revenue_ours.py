"""brewstream's revenue pipeline over the revenue benchmark's topics, against the as-of oracle.

``brewstream revenue --available-now`` from an empty state dir reads the very topics Kafka
Streams read (``<app id>.brew.orders.v1`` and ``<app id>.brew.menu.v1``: the prefix is the
application id and a dot), then ``brewstream counts --json`` reads its store back and the
harness reads its DLQ (``<app id>.brew.revenue.dlq``), each record's ``error`` header the
reason.

Its rule for an item without a price differs from Kafka Streams': the whole order goes to
the DLQ and none of its items counts, so it is checked against the oracle's whole-order
variant (``Oracle.whole_order_*``, ``refused_orders``). What ends its input: its join's
clock is the latest event time read on either side, so the closing menu record the runner
writes (later than the flush order by more than the grace) releases every order, the flush
order too; that one has no price (its drinks are on no menu) and is the one DLQ record
beyond the oracle's.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench.errors import BenchError
from bench.kafka_topics import committed_messages
from bench.procs import Child, run_to_end
from bench.revenue_data import Oracle
from service.revenue.pipeline import BATCH_PATTERN
from topics.catalog import Topics
from topics.clock import format_duration
from topics.kafka import KafkaConnection

BREW = str(Path(sys.executable).parent / "brewstream")
TIMEOUT_S = 3600.0
COUNTS_TIMEOUT_S = 120.0
FLUSH_REASON = "'~flush-"  # in the reason of the flush order: its first drink without a price


@dataclass(frozen=True)
class OursSettings:
    master: str = "local[*]"
    max_offsets_per_trigger: int | None = None

    @property
    def label(self) -> str:
        return f"master={self.master} max-offsets-per-trigger={self.max_offsets_per_trigger or 'none'}"


@dataclass(frozen=True)
class RevenueBatch:
    t: float  # when its line arrived: just after the store commit
    batch_id: int | None  # None: a menu read between batches
    orders: int
    menu: int
    priced: int
    no_price: int
    too_late: int
    bad: int
    waiting: int
    seconds: float  # aggregate + changelog + store


@dataclass
class Dlq:
    """The revenue DLQ by cause: refused orders (no price, too late), the flush order, and
    anything else (a bad order or menu record: the bench data has none)."""

    no_price: int = 0
    too_late: int = 0
    flush: int = 0
    other: dict[str, int] = field(default_factory=dict)


def args(conn: KafkaConnection, topics: Topics, work: Path, grace_ms: int, retention_ms: int,
         settings: OursSettings) -> list[str]:
    out = [BREW, "revenue", "--bootstrap", conn.bootstrap, "--topic-prefix", topics.prefix,
           "--state-dir", str(work / "state"), "--checkpoint-dir", str(work / "checkpoint"), "--available-now",
           "--grace", format_duration(grace_ms / 1000), "--retention", format_duration(retention_ms / 1000),
           "--master", settings.master, "--print", "0"]
    if settings.max_offsets_per_trigger:
        out += ["--max-offsets-per-trigger", str(settings.max_offsets_per_trigger)]
    return out


def batches(child: Child) -> list[RevenueBatch]:
    out = []
    for line in child.lines:
        m = BATCH_PATTERN.search(line.text)
        if m:
            out.append(RevenueBatch(
                line.t, int(m["batch_id"]) if m["batch_id"] is not None else None, int(m["orders"]), int(m["menu"]),
                int(m["priced"]), int(m["no_price"]), int(m["too_late"]), int(m["bad"]), int(m["waiting"]),
                float(m["aggregate_s"]) + float(m["changelog_s"]) + float(m["store_s"])))
    return out


def counts(conn: KafkaConnection, topics: Topics, state: Path) -> dict[str, Any]:
    """``brewstream counts --json`` of the state dir: ``{"revenue", "by_shop", "offsets"}``."""
    proc = subprocess.run([BREW, "counts", "--bootstrap", conn.bootstrap, "--topic-prefix", topics.prefix,
                           "--state-dir", str(state), "--json"], capture_output=True, text=True,
                          timeout=COUNTS_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        raise BenchError(f"brewstream counts exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    out = orjson.loads(proc.stdout)
    if not isinstance(out, dict):
        raise BenchError(f"brewstream counts printed no JSON object: {proc.stdout[:200]!r}")
    return out


def read_dlq(conn: KafkaConnection, topic: str, timeout: float = 120.0) -> Dlq:
    """Every committed record of the DLQ, sorted by its ``error`` header."""
    dlq = Dlq()
    for msg in committed_messages(conn, topic, timeout):
        reason = _error_header(msg.headers() or [])
        if reason.startswith("no price") and FLUSH_REASON in reason:
            dlq.flush += 1
        elif reason.startswith("no price"):
            dlq.no_price += 1
        elif reason.startswith("too late"):
            dlq.too_late += 1
        else:
            cause = reason.split(":", 1)[0]
            dlq.other[cause] = dlq.other.get(cause, 0) + 1
    return dlq


def _error_header(headers: object) -> str:
    # A consumed record's headers: a list of (key, value) pairs, the value bytes or None.
    for key, value in headers if isinstance(headers, list) else []:
        if key == "error" and isinstance(value, bytes):
            return value.decode(errors="replace")
    return ""


@dataclass(frozen=True)
class OursAgreement:
    """brewstream's result against the oracle's whole-order rule."""

    drinks: int
    drinks_equal: int
    shops: int
    shops_equal: int
    refused_orders: int  # in its DLQ as "no price", the flush order aside
    oracle_refused_orders: int
    too_late: int
    flush_refused: int
    other_dlq: dict[str, int]
    waiting: int  # orders still waiting in its join at the end (the last batch line says)
    per_drink: list[tuple[str, int, int | None]]  # drink, oracle cents, brewstream's cents
    per_shop_diff: list[tuple[str, int, int | None]]  # only the shops that differ

    @property
    def exact(self) -> bool:
        return (self.drinks == self.drinks_equal and self.shops == self.shops_equal
                and self.refused_orders == self.oracle_refused_orders and self.too_late == 0
                and self.flush_refused == 1 and not self.other_dlq and self.waiting == 0)


def agreement(expected: Oracle, revenue: dict[str, int], by_shop: dict[str, int], dlq: Dlq,
              waiting: int) -> OursAgreement:
    want_drink, want_shop = expected.whole_order_by_drink, expected.whole_order_by_shop
    drinks = sorted(set(want_drink) | set(revenue))
    shops = sorted(set(want_shop) | set(by_shop))
    return OursAgreement(
        drinks=len(drinks), drinks_equal=sum(want_drink.get(d) == revenue.get(d) for d in drinks),
        shops=len(shops), shops_equal=sum(want_shop.get(s) == by_shop.get(s) for s in shops),
        refused_orders=dlq.no_price, oracle_refused_orders=expected.refused_orders, too_late=dlq.too_late,
        flush_refused=dlq.flush, other_dlq=dict(dlq.other), waiting=waiting,
        per_drink=[(d, want_drink.get(d, 0), revenue.get(d)) for d in drinks],
        per_shop_diff=[(s, want_shop.get(s, 0), by_shop.get(s)) for s in shops if want_shop.get(s) != by_shop.get(s)])


def run(conn: KafkaConnection, topics: Topics, expected: Oracle, orders: int, grace_ms: int, retention_ms: int,
        settings: OursSettings, work: Path) -> dict[str, Any]:
    """One catch-up over the topics as they are, read back and compared with the oracle.
    ``orders``: the orders of the data (the flush order aside), the rate's numerator as for
    Kafka Streams. Processing time runs from the start of the first batch that read orders
    to the commit of the last batch, as in the ingest scenario."""
    work.mkdir(parents=True, exist_ok=True)
    child = run_to_end("ours-revenue", args(conn, topics, work, grace_ms, retention_ms, settings),
                       work / "ours-revenue.log", TIMEOUT_S)
    done = batches(child)
    reading = [b for b in done if b.orders]
    if not reading:
        raise BenchError(f"brewstream revenue committed no batch of orders; see {child.log_path}")
    first = reading[0].t - reading[0].seconds
    last = done[-1].t
    got = counts(conn, topics, work / "state")
    revenue = {str(k): int(v) for k, v in got.get("revenue", {}).items()}
    by_shop = {str(k): int(v) for k, v in got.get("by_shop", {}).items()}
    dlq = read_dlq(conn, topics.revenue_dlq)
    agree = agreement(expected, revenue, by_shop, dlq, done[-1].waiting)
    processing_s = last - first
    return {
        "settings": settings.label, "orders": orders, "orders_read": sum(b.orders for b in done),
        "processing_s": processing_s, "orders_per_s": orders / processing_s, "startup_s": first - child.started,
        "wall_s": child.wall_s, "peak_rss_bytes": child.rss.peak, "batches": len([b for b in done if b.batch_id
                                                                                  is not None]),
        "menu_reads": len([b for b in done if b.batch_id is None]),
        "first_batch_orders": reading[0].orders, "largest_batch_s": max(b.seconds for b in done),
        "agreement": asdict(agree) | {"exact": agree.exact},
    }


def print_report(result: dict[str, Any]) -> None:
    agree = result["agreement"]
    print(f"brewstream ({result['settings']}): processing {result['processing_s']:.2f} s, "
          f"{result['orders_per_s']:,.0f} orders/s; start-up {result['startup_s']:.2f} s, wall "
          f"{result['wall_s']:.2f} s, peak RSS {result['peak_rss_bytes'] / 2**20:,.0f} MiB; {result['batches']} "
          f"batch(es), {result['menu_reads']} menu read(s) between them")
    print(f"per drink: {agree['drinks_equal']}/{agree['drinks']} equal to the oracle's whole-order rule; per shop: "
          f"{agree['shops_equal']}/{agree['shops']}; orders refused for no price {agree['refused_orders']:,} vs the "
          f"oracle's {agree['oracle_refused_orders']:,}; too late {agree['too_late']:,}; the flush order refused "
          f"{agree['flush_refused']}x; other DLQ {agree['other_dlq'] or 'none'}; waiting at the end "
          f"{agree['waiting']:,}: {'EXACT' if agree['exact'] else 'DIFFERENT'}")
    print(f"{'drink':<24} {'oracle cents':>14} {'brewstream cents':>17} {'diff':>10}")
    for drink, want, got in agree["per_drink"]:
        diff = "" if got == want else f"{(got or 0) - want:+,}"
        print(f"{drink:<24} {want:>14,} {'-' if got is None else f'{got:,}':>17} {diff:>10}")
    for shop, want, got in agree["per_shop_diff"][:10]:
        print(f"shop {shop}: oracle {want:,}, brewstream {'-' if got is None else f'{got:,}'}")
