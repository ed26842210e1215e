"""The ``brewstream`` command line. Commands are thin: parse flags, call a module, print."""

from __future__ import annotations

import atexit
import gc
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TextIO

import click

from service import pipelines
from service.cli.board import board_cmd
from service.cli.common import CONTEXT, DURATION, F, kafka_options, topic_prefix_option
from service.cli.sandbox import sandbox
from service.cli.spark_cluster import spark_cluster
from service.cli.spark_options import master_of, spark_options, spark_run_args
from service.drills.kinds import BROKER_PAUSE_S, KIND_NAMES
from service.engine.contract import Wing
from service.engine.defaults import (
    BATCH_MAX_DELAY_S,
    BATCH_MIN_RECORDS,
    CHANGELOG_CHECK_S,
    DEFAULT_MAX_OFFSETS_PER_TRIGGER,
    DEFAULT_TRIGGER_S,
)
from service.instance.lease import LEASE_INTERVAL_S, TAKEOVER_TIMEOUT_S
from service.instance.signals import Terminated, raised_by_signal, stop_on_signals, terminate_by_exception
from service.records.limits import MAX_NAME_BYTES
from topics.clock import format_duration, utc_iso
from topics.errors import BrewError, disk_problem, one_line
from topics.kafka import KafkaConnection, require_broker, show_client_logs
from topics.kafka_config import redact
from topics.orders_gen import MENU as MENU_DRINKS


@click.group(context_settings=CONTEXT)
@click.version_option(package_name="brewstream", prog_name="brewstream", message="%(prog)s %(version)s",
                      help="Print the version and exit.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True, help="Log level of brewstream's own messages.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: one JSON object per log line, batch figures as fields.")
def cli(log_level: str, log_format: str) -> None:
    """brewstream: exact stateful drink counts over Kafka with Spark and RocksDB."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        from pythonjsonlogger.json import JsonFormatter

        handler.setFormatter(JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s",
                                           rename_fields={"asctime": "time", "levelname": "level",
                                                          "name": "logger"}))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S"))
    logging.basicConfig(level=log_level.upper(), handlers=[handler], force=True)
    show_client_logs(log_level == "debug")


# ---------------------------------------------------------------- topics

@cli.group(context_settings=CONTEXT)
def topics() -> None:
    """Create, delete or describe every brewstream topic."""


@topics.command("create", context_settings=CONTEXT)
@kafka_options
@topic_prefix_option
@click.option("--partitions", type=click.IntRange(min=1), default=3, show_default=True,
              help="Partitions of each topic.")
@click.option("--tasks", type=click.IntRange(min=1), default=None,
              help="Tasks each pipeline's state is split into by key: the partitions of each changelog, fixed "
                   "once created.  [default: --partitions]")
@click.option("--replication-factor", type=click.IntRange(min=1), default=None,
              help="Replicas of each partition.  [default: 3 on a cluster of three or more brokers, else 1]")
def topics_create(conn: KafkaConnection, topic_prefix: str, partitions: int, tasks: int | None,
                  replication_factor: int | None) -> None:
    """Create all topics; one that already exists is fine, unless --tasks names another count than its
    changelog has. The changelogs are compacted."""
    from topics.admin import TaskCountChanged, create_topics, default_replication_factor
    from topics.catalog import Topics

    if replication_factor is None:
        replication_factor, brokers = default_replication_factor(conn)
        click.echo(f"topics: replication factor {replication_factor} (the cluster has {brokers} "
                   f"broker{'s' * (brokers != 1)})", err=True)
    try:
        outcomes = create_topics(conn, partitions, replication_factor, Topics(topic_prefix), tasks)
    except TaskCountChanged as exc:
        wing = pipelines.of_store(exc.topic)
        raise BrewError(exc.message(wing.name if wing else None)) from None
    for name, outcome in outcomes:
        click.echo(f"{outcome:8} {name}")


@topics.command("delete", context_settings=CONTEXT)
@kafka_options
@topic_prefix_option
def topics_delete(conn: KafkaConnection, topic_prefix: str) -> None:
    """Delete all topics (their data is gone)."""
    from topics.admin import delete_topics
    from topics.catalog import Topics

    for name, outcome in delete_topics(conn, Topics(topic_prefix)):
        click.echo(f"{outcome:8} {name}")


@topics.command("describe", context_settings=CONTEXT)
@kafka_options
@topic_prefix_option
def topics_describe(conn: KafkaConnection, topic_prefix: str) -> None:
    """Partitions, replication factor and non-default configs of each topic."""
    from topics.admin import describe_topics
    from topics.catalog import Topics

    for item in describe_topics(conn, Topics(topic_prefix)):
        if isinstance(item, str):
            click.echo(f"{item}  absent")
            continue
        configs = " ".join(f"{k}={v}" for k, v in sorted(item.config.items()))
        click.echo(f"{item.name}  partitions={item.partitions} replication={item.replication_factor}"
                   + (f"  {configs}" if configs else ""))


# ---------------------------------------------------------------- seed-orders, seed-menu

class Since(click.ParamType):
    """A moment, as unix ms: a duration back from now (30m, 2h) or an ISO 8601 time with its zone."""

    name = "when"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        import time

        from service.dlq.read import parse_since

        if isinstance(value, int):
            return value
        try:
            return parse_since(str(value), time.time())
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


@cli.command("seed-orders", context_settings=CONTEXT)
@kafka_options
@topic_prefix_option
@click.option("--count", type=click.IntRange(min=0), default=None,
              help="Stop after this many orders.  [default: run until Ctrl+C]")
@click.option("--rate", type=DURATION, default="1s", show_default=True,
              help="Interval between bursts of --burst orders; 0 sends as fast as possible.")
@click.option("--burst", type=click.IntRange(min=1), default=12, show_default=True,
              help="Orders sent at each tick of --rate.")
@click.option("--file", "file_", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="Produce this JSON-lines file verbatim, one record a line.")
@click.option("--seed", type=int, default=None, help="Random seed, for a reproducible stream.")
@click.option("--past", type=DURATION, default=None,
              help="Stamp each order with an event-time header, the first this long before now and each "
                   "later one higher (for a join at past times, e.g. with seed-menu --start).  "
                   "[default: no header; an order's time is its Kafka timestamp]")
@click.option("--event-time-step", type=DURATION, default=None,
              help="With --past: event time between one order and the next.  [default: the time between "
                   "their sends, so the orders keep the --past lag]")
def seed_orders(conn: KafkaConnection, topic_prefix: str, count: int | None, rate: float, burst: int,
                file_: Path | None, seed: int | None, past: float | None, event_time_step: float | None) -> int:
    """Produce Brew orders to brew.orders.v1 (keyed by shop_id)."""
    import time

    from topics.catalog import Topics
    from topics.feed import file_records, generated_records, order_event_times, produce

    if file_ is not None and past is not None:
        raise click.UsageError("--past stamps generated orders; the records of --file are sent as they are")
    if event_time_step is not None and past is None:
        raise click.UsageError("--event-time-step needs --past (when the first order happened)")
    if event_time_step == 0:
        raise click.BadParameter("must be above 0", param_hint="--event-time-step")
    orders_topic = Topics(topic_prefix).orders
    require_broker(conn)
    times = None
    if past is not None:
        times = order_event_times(time.time_ns() - int(past * 1e9),
                                  int(event_time_step * 1e9) if event_time_step is not None else None)
    records = file_records(file_) if file_ else generated_records(seed, times)
    if file_ is None:
        pace = f"{burst} orders every {format_duration(rate)}" if rate else "as fast as possible"
        stamp = "" if past is None else f", event time from {format_duration(past)} ago" + (
            f" in steps of {format_duration(event_time_step)}" if event_time_step is not None else "")
        click.echo(f"seed-orders: {pace} to {orders_topic}" + stamp
                   + (f", {count} in all" if count is not None else " until Ctrl+C"), err=True)
    with stop_on_signals() as stop:
        result = produce(conn, records, topic=orders_topic, count=count, interval_s=rate, per_tick=burst, stop=stop)
    click.echo(f"seed-orders: sent {result.sent} records to {orders_topic}"
               + (f", {result.failed} failed ({result.first_error})" if result.failed else ""))
    return 1 if result.failed else 0


def _currency(code: str) -> str:
    from topics.menu_gen import check_currency

    try:
        return check_currency(code)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--currency") from None


@cli.command("seed-menu", context_settings=CONTEXT)
@kafka_options
@topic_prefix_option
@click.option("--count", type=click.IntRange(min=0), default=None,
              help="Stop after this many records.  [default: the opening price list, then changes until Ctrl+C]")
@click.option("--rate", type=DURATION, default="1s", show_default=True,
              help="Interval between bursts of --burst records; 0 sends as fast as possible.")
@click.option("--burst", type=click.IntRange(min=1), default=len(MENU_DRINKS), show_default=True,
              help="Records sent at each tick of --rate, in one transaction (the default sends the opening "
                   "price list whole).")
@click.option("--seed", type=int, default=None, help="Random seed, for a reproducible stream.")
@click.option("--currency", default="EUR", show_default=True, callback=lambda _c, _p, v: _currency(v),
              help="ISO 4217 code of every price.")
@click.option("--start", "start_ms", type=Since(), default=None,
              help="Event time of the opening price list: a duration back from now (2h) or a time such as "
                   "2026-11-23T10:00:00Z.  [default: now]")
@click.option("--step", type=DURATION, default="1m", show_default=True,
              help="Event time between one step of price changes and the next (a few drinks each); never "
                   "past the clock: a menu sent faster than its steps is stamped at most now.")
@click.option("--late-fraction", type=click.FloatRange(0, 1), default=0.1, show_default=True,
              help="Share of price changes sent out of order, stamped before changes already sent.")
@click.option("--max-late", type=DURATION, default="5s", show_default=True,
              help="How far before the latest event time sent an out-of-order change may be stamped; below "
                   "`brewstream revenue --grace` (10s), every late change still prices the orders after it.")
@click.option("--withdraw-fraction", type=click.FloatRange(0, 1), default=0.05, show_default=True,
              help="Share of changes that withdraw a drink (an empty value); it is listed again at a later step.")
def seed_menu(conn: KafkaConnection, topic_prefix: str, count: int | None, rate: float, burst: int, seed: int | None,
              currency: str, start_ms: int | None, step: float, late_fraction: float, max_late: float,
              withdraw_fraction: float) -> int:
    """Produce a versioned menu to brew.menu.v1: a price for every drink at --start, then price changes.

    Each record is keyed by the drink, valued {"drink", "price_cents", "currency"} (empty:
    withdrawn) and valid from the time in its event-time header.
    """
    import time

    from topics.catalog import Topics
    from topics.feed import produce
    from topics.menu_gen import MenuConfig, MenuGenerator

    if step <= 0:
        raise click.BadParameter("must be above 0", param_hint="--step")
    start_ns = time.time_ns() if start_ms is None else start_ms * 10**6
    if start_ns < 0:
        raise click.BadParameter("must be 1970 or later (unix time)", param_hint="--start")
    try:
        cfg = MenuConfig(start_ns, int(step * 1e9), currency, late_fraction, int(max_late * 1e9), withdraw_fraction)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    topic = Topics(topic_prefix).menu
    require_broker(conn)
    menu = MenuGenerator(cfg, seed, clock_ns=time.time_ns)
    pace = f"{burst} records every {format_duration(rate)}" if rate else "as fast as possible"
    click.echo(f"seed-menu: {pace} to {topic}, prices from {utc_iso(start_ns / 1e9)} in steps of "
               f"{format_duration(step)}" + (f", {count} records in all" if count is not None else " until Ctrl+C"),
               err=True)
    shown = 0

    def progress(sent: int) -> None:
        nonlocal shown
        if sent // 100 > shown // 100:
            t = menu.tally
            click.echo(f"sent={sent} late={t.late} withdrawals={t.withdrawals} relistings={t.relistings}")
        shown = sent

    with stop_on_signals() as stop:
        result = produce(conn, menu, topic=topic, count=count, interval_s=rate, per_tick=burst, stop=stop,
                         on_progress=progress)
    t = menu.tally
    click.echo(f"seed-menu: sent {result.sent} records to {topic} ({t.prices} prices, {t.late} of them late, "
               f"{t.withdrawals} withdrawals, {t.relistings} relistings)"
               + (f", {result.failed} failed ({result.first_error})" if result.failed else ""))
    return 1 if result.failed else 0


# ---------------------------------------------------------------- drink-count

def state_dir_option(default: str | None) -> Callable[[F], F]:
    return click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path),
                        default=Path(default) if default else None, show_default=True,
                        help="Folder of the RocksDB store and its lock."
                             + ("" if default else "  [default: state/<store>]"))


def store_option(help_text: str) -> Callable[[F], F]:
    """--store: a pipeline's name from the registry; the command receives its ``Wing``."""
    def to_wing(_ctx: click.Context, _param: click.Parameter, name: str) -> Wing:
        return pipelines.wing(name)

    return click.option("--store", "wing", type=click.Choice(pipelines.names()), default=pipelines.names()[0],
                        show_default=True, callback=to_wing, help=help_text)


def pipeline_options(wing: Wing) -> Callable[[F], F]:
    """The flags every pipeline shares; the pipeline picks the default folders."""
    def decorate(fn: F) -> F:
        for opt in reversed([
            kafka_options,
            topic_prefix_option,
            state_dir_option(str(wing.default_state_dir)),
            click.option("--checkpoint-dir", type=click.Path(file_okay=False, path_type=Path),
                         default=wing.default_checkpoint_dir, show_default=True,
                         help="Spark's checkpoint folder for the query."),
            click.option("--trigger", "trigger_s", type=DURATION, default=f"{round(DEFAULT_TRIGGER_S * 1000)}ms",
                         show_default=True,
                         help="Micro-batch interval. 0ms: each batch starts once the one before it has "
                              f"committed and {BATCH_MIN_RECORDS} records wait, or "
                              f"{round(BATCH_MAX_DELAY_S * 1000)} ms after the one before it started."),
            click.option("--max-offsets-per-trigger", type=click.IntRange(min=1),
                         default=DEFAULT_MAX_OFFSETS_PER_TRIGGER, show_default=True,
                         help="Cap on records per micro-batch (backpressure; bounds the driver's memory)."),
            click.option("--available-now", is_flag=True,
                         help="Process the backlog present at start, print a final report and exit 0."),
            spark_options,
            click.option("--auto-restore/--no-auto-restore", default=True, show_default=True,
                         help="Rebuild an empty or missing store from the changelog before starting."),
            click.option("--instance", default=None,
                         help="Name this instance announces in its lease (logs, status).  "
                              "[default: host:state dir name]"),
            click.option("--max-name-bytes", type=click.IntRange(1, 65_535), default=MAX_NAME_BYTES,
                         show_default=True,
                         help="Longest drink name or shop id (UTF-8 bytes); longer ones make a record bad."),
            click.option("--accept-changelog-loss", is_flag=True,
                         help="Restore from a changelog that lost its oldest records (or publish the store to "
                              "one that lost records it had not applied) instead of refusing to start."),
            click.option("--accept-input-loss", is_flag=True,
                         help="Skip input the topic no longer holds (deleted, or the topic re-created) instead "
                              "of refusing to start; logged and counted."),
            click.option("--standby", is_flag=True,
                         help="Run as a hot standby: restore the store, follow the changelog and take over when "
                              "the active instance's lease lapses; a fenced active goes back to standby."),
            click.option("--lease-interval", "lease_interval_s", type=DURATION,
                         default=format_duration(LEASE_INTERVAL_S),
                         show_default=True, help="How often the active instance announces itself on Kafka."),
            click.option("--takeover-timeout", "takeover_timeout_s", type=DURATION,
                         default=format_duration(TAKEOVER_TIMEOUT_S), show_default=True,
                         help="Silence after which another instance's lease counts as lapsed."),
            click.option("--http-port", "--metrics-port", "metrics_port", type=click.IntRange(1, 65535),
                         default=None, help="Serve /metrics, /healthz, /readyz and the store's JSON API (/api/…) "
                                            "on this port.  [default: off]"),
            click.option("--http-host", "--metrics-host", "metrics_host", default="127.0.0.1", show_default=True,
                         help="Address the HTTP server binds to; beyond loopback it needs --http-token-file "
                              "or --http-insecure."),
            click.option("--http-token-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                         default=None, help="File holding a bearer token that /metrics and /api/… ask for "
                                            "(the probes stay open).  [default: no token]"),
            click.option("--http-insecure", is_flag=True,
                         help="Serve beyond loopback without a token."),
            click.option("--http-advertise", default=None, metavar="HOST:PORT",
                         help="Where other instances of the pipeline reach this one's HTTP API: a standby "
                              "forwards data queries to the active there.  [default: the --http-host and "
                              "--http-port it binds; this host's name for a wildcard bind]"),
            click.option("--changelog-check-interval", "changelog_check_s", type=DURATION,
                         default=format_duration(CHANGELOG_CHECK_S), show_default=True,
                         help="How often the changelog's topic settings are asked; a changelog that stops "
                              "being compacted is said within this."),
        ]):
            fn = opt(fn)
        return fn
    return decorate


def run_config(conn: KafkaConnection, topic_prefix: str, state_dir: Path, checkpoint_dir: Path, trigger_s: float,
               max_offsets_per_trigger: int | None, available_now: bool, master: str | None, auto_restore: bool,
               instance: str | None, metrics_port: int | None, metrics_host: str, http_token_file: Path | None,
               http_insecure: bool, max_name_bytes: int, accept_changelog_loss: bool, accept_input_loss: bool,
               standby: bool, lease_interval_s: float, takeover_timeout_s: float, spark_conf: dict[str, str],
               min_partitions: int | None, changelog_check_s: float, http_advertise: str | None) -> Any:
    from service.engine.runner import RunConfig
    from service.ops.forward import BadAddress, parse_address
    from service.ops.http_api import bind_problem
    from topics.catalog import Topics

    if lease_interval_s <= 0 or takeover_timeout_s <= lease_interval_s:
        raise click.BadParameter("--takeover-timeout must be longer than --lease-interval, and both above 0")
    if changelog_check_s <= 0:
        raise click.BadParameter("--changelog-check-interval must be above 0")
    problem = bind_problem(metrics_host, http_token_file is not None, http_insecure)
    if metrics_port is not None and problem:
        raise click.BadParameter(problem)
    if http_advertise is not None:
        try:
            parse_address(http_advertise)
        except BadAddress as exc:
            raise click.BadParameter(f"--http-advertise: {exc}") from None
    return RunConfig(conn, state_dir, checkpoint_dir, trigger_s, max_offsets_per_trigger, available_now,
                     master_of(master, spark_conf), auto_restore, instance, Topics(topic_prefix), metrics_host,
                     metrics_port, max_name_bytes=max_name_bytes, accept_changelog_loss=accept_changelog_loss,
                     accept_input_loss=accept_input_loss, lease_interval_s=lease_interval_s,
                     takeover_timeout_s=takeover_timeout_s, standby=standby, http_token_file=http_token_file,
                     http_insecure=http_insecure, spark_conf=spark_conf, min_partitions=min_partitions,
                     changelog_check_s=changelog_check_s, http_advertise=http_advertise)


@cli.command("run", context_settings=CONTEXT)
@pipeline_options(pipelines.DRINK_COUNT)
@click.option("--flush", "flush_s", type=DURATION, default="5s", show_default=True,
              help="Interval of the top-N board (stdout and brew.drink-counts).")
@click.option("--top-n", type=click.IntRange(min=1), default=10, show_default=True, help="Rows on the board.")
@click.option("--shuffle", is_flag=True,
              help="Count through the repartition topic (brew.drink-count-repartition): an input stage hands each "
                   "task its drinks, and the tasks add them up. A store counted without it is taken over as it is; "
                   "one counted with it needs it from then on.")
def run_cmd(flush_s: float, top_n: int, shuffle: bool, **common: Any) -> int:
    """The drink-count daemon: brew.orders.v1 -> exact counts in RocksDB + changelog, top-N board."""
    from dataclasses import replace

    from service.drink_count.pipeline import BoardConfig, run

    if flush_s <= 0:
        raise click.BadParameter("--flush must be above 0")
    return run(replace(run_config(**common), shuffle=shuffle), BoardConfig(flush_s, top_n))


@cli.command("windows", context_settings=CONTEXT)
@pipeline_options(pipelines.WINDOWS)
@click.option("--window", "window_s", type=DURATION, default="1m", show_default=True,
              help="Window size (tumbling, or hopping with --hop); also the printed table's window.")
@click.option("--hop", "hop_s", type=DURATION, default=None, help="Hop of hopping windows (at most --window).")
@click.option("--session-gap", "gap_s", type=DURATION, default=None,
              help="Session windows per shop, closed after this much event time without events.")
@click.option("--watermark-delay", "delay_s", type=DURATION, default="1m", show_default=True,
              help="Watermark = max event time per partition minus this, min over partitions.")
@click.option("--idle-timeout", "idle_s", type=DURATION, default="30s", show_default=True,
              help="A partition without data this long stops holding the watermark back.")
@click.option("--allowed-lateness", "allowed_s", type=DURATION, default="0", show_default=True,
              help="Windows stay open this long after the watermark passes their end.")
@click.option("--emit", type=click.Choice(["final", "early"]), default="final", show_default=True,
              help="final: one result per window; early: also a provisional one and revisions.")
@click.option("--print", "print_s", type=DURATION, default="5s", show_default=True, help="Table interval.")
@click.option("--print-windows", type=click.IntRange(min=1), default=8, show_default=True,
              help="Windows shown in the table.")
@click.option("--from", "start_from", type=click.Choice(["latest", "earliest"]), default="latest",
              show_default=True, help="Where a brand-new store starts reading the events.")
@click.option("--max-event-time-ahead", "max_ahead_s", type=DURATION, default="1m", show_default=True,
              help="An event time further ahead of its record's Kafka timestamp than this (a till with a clock "
                   "far ahead) is a bad record: the DLQ with its reason, and the watermark never sees it. "
                   "Behind is fine, however far: that is a late event. At most ten years.")
@click.option("--reset-watermark", is_flag=True,
              help="Repair a watermark that an event far ahead poisoned (the daemon refuses to start on one "
                   "and says so), then run as usual: poisoned partition clocks go back to the latest event "
                   "time the bound accepts among the input they counted, the watermark to the end of the "
                   "window holding it, and open windows beyond the bound are dropped; one committed batch. "
                   "Results already emitted and events already on the late topic stay (docs: event-time "
                   "windows, A poisoned watermark). A healthy store is left alone.")
def windows_cmd(window_s: float, hop_s: float | None, gap_s: float | None, delay_s: float, idle_s: float,
                allowed_s: float, emit: str, print_s: float, print_windows: int, start_from: str,
                max_ahead_s: float, reset_watermark: bool, **common: Any) -> int:
    """Event-time windows over brew.order-events.v1 with a watermark, allowed lateness and a late output."""
    from service.windows.pipeline import TableConfig, run, windows_config

    if print_s <= 0:
        raise click.BadParameter("--print must be above 0")
    try:
        cfg = windows_config(window_s, hop_s, gap_s, delay_s, idle_s, allowed_s, emit == "early", print_windows,
                             max_ahead_s)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    return run(run_config(**common), cfg, TableConfig(print_s, print_windows), start_from,
               reset_watermark=reset_watermark)


@cli.command("revenue", context_settings=CONTEXT)
@pipeline_options(pipelines.REVENUE)
@click.option("--grace", "grace_s", type=DURATION, default="10s", show_default=True,
              help="An order waits until the latest event time read on either side (orders or menu) passes "
                   "its own time by this much, so a price change that arrives this late still prices it.")
@click.option("--retention", "retention_s", type=DURATION, default="1d", show_default=True,
              help="Menu history kept behind the latest order time read; an order older than the history "
                   "already cut is too late (the DLQ, whole, with the reason). At least --grace.")
@click.option("--window", "window_s", type=DURATION, default="1h", show_default=True,
              help="Revenue is also summed in tumbling windows of this size, by order time.")
@click.option("--currency", default="EUR", show_default=True,
              help="The menu's currency; a menu record in another is refused (the DLQ).")
@click.option("--max-event-time-ahead", "max_ahead_s", type=DURATION, default="1m", show_default=True,
              help="An order or menu record stamped further ahead of its Kafka timestamp than this is refused "
                   "(the DLQ): one clock a year ahead would otherwise release every waiting order.")
@click.option("--menu-interval", "tick_s", type=DURATION, default="1s", show_default=True,
              help="How often the menu is read between batches.")
@click.option("--print", "print_s", type=DURATION, default="5s", show_default=True,
              help="Table interval; 0 prints only at the end.")
@click.option("--from", "start_from", type=click.Choice(["earliest", "latest"]), default="earliest",
              show_default=True, help="Where a brand-new store starts reading the orders (the menu is always "
                                      "read whole).")
def revenue_cmd(grace_s: float, retention_s: float, window_s: float, currency: str, max_ahead_s: float,
                tick_s: float, print_s: float, start_from: str, **common: Any) -> int:
    """Price each order of brew.orders.v1 with the menu version (brew.menu.v1) that held at its time, and sum
    revenue per drink, per shop and per window; orders without a price go whole to brew.revenue.dlq."""
    from service.revenue.pipeline import TableConfig, revenue_config, run

    try:
        cfg = revenue_config(grace_s, retention_s, window_s, currency, max_ahead_s, tick_s)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    return run(run_config(**common), cfg, TableConfig(print_s), start_from)


@cli.command("events", context_settings=CONTEXT)
@kafka_options
@topic_prefix_option
@click.option("--rate", type=DURATION, default="50ms", show_default=True, help="Interval between events.")
@click.option("--count", type=click.IntRange(min=0), default=None, help="Stop after this many events.")
@click.option("--seed", type=int, default=None, help="Random seed, for a reproducible stream.")
@click.option("--shops", type=click.IntRange(min=1), default=80, show_default=True, help="Shops (record keys).")
@click.option("--event-lag-max", type=DURATION, default="60s", show_default=True,
              help="Event time lags processing time by up to this much.")
@click.option("--late-prob", type=click.FloatRange(0, 1), default=0.10, show_default=True,
              help="Share of events from an offline till, lagging much more.")
@click.option("--late-lag-min", type=DURATION, default="90s", show_default=True, help="Least lag of those.")
@click.option("--late-lag-max", type=DURATION, default="240s", show_default=True, help="Most lag of those.")
def events_cmd(conn: KafkaConnection, topic_prefix: str, rate: float, count: int | None, seed: int | None, shops: int,
               event_lag_max: float, late_prob: float, late_lag_min: float, late_lag_max: float) -> int:
    """Produce order events with an event-time header to brew.order-events.v1 (seed 01's generator)."""
    from topics.catalog import Topics
    from topics.events_gen import EventGenerator, EventsConfig, EventStream
    from topics.feed import produce

    require_broker(conn)
    topic = Topics(topic_prefix).events
    ns = 10**9
    events = EventStream(EventGenerator(EventsConfig(shops, int(event_lag_max * ns), late_prob,
                                                     int(late_lag_min * ns), int(late_lag_max * ns)), seed))

    def progress(sent: int) -> None:
        if sent % 50 == 0:
            click.echo(f"sent={sent} late={events.late}")

    with stop_on_signals() as stop:
        result = produce(conn, events, topic=topic, count=count, interval_s=rate, per_tick=1, stop=stop,
                         on_progress=progress)
    click.echo(f"events: sent {result.sent} events to {topic} ({events.late} late)"
               + (f", {result.failed} failed ({result.first_error})" if result.failed else ""))
    return 1 if result.failed else 0


@cli.command("restore", context_settings=CONTEXT)
@kafka_options
@topic_prefix_option
@store_option("Which store to rebuild (its changelog and default state dir).")
@state_dir_option(None)
@click.option("--clean", is_flag=True, help="Delete the existing store first.")
@click.option("--accept-changelog-loss", is_flag=True,
              help="Restore what is left of a changelog that lost its oldest records instead of refusing.")
def restore_cmd(conn: KafkaConnection, topic_prefix: str, wing: Wing, state_dir: Path | None, clean: bool,
                accept_changelog_loss: bool) -> None:
    """Rebuild a store from its changelog, up to the end offsets."""
    from restorer.restore import restore_store
    from topics.catalog import Topics

    require_broker(conn)
    result = restore_store(conn, wing.changelog_topic(Topics(topic_prefix)), state_dir or wing.default_state_dir,
                           clean, accept_changelog_loss, wing.check_value)
    click.echo(result.summary())


@cli.command("republish-changelog", context_settings=CONTEXT)
@kafka_options
@topic_prefix_option
@store_option("Which store's changelog to rebuild.")
@state_dir_option(None)
@click.option("--partitions", type=click.IntRange(min=1), required=True,
              help="Partitions of the new changelog.")
@click.option("--replication-factor", type=click.IntRange(min=1), default=None,
              help="Replicas of each partition of the new changelog.  [default: the current changelog's; with "
                   "none, 3 on a cluster of three or more brokers, else 1]")
def republish_cmd(conn: KafkaConnection, topic_prefix: str, wing: Wing, state_dir: Path | None,
                  partitions: int, replication_factor: int | None) -> None:
    """Move a store to a changelog with another partition count: re-create the changelog and
    publish the whole store to it (restoring the store from the old changelog first if it
    is gone). Stop every instance of the pipeline first: one that announced itself within
    the last 30 s is named, and nothing is deleted."""
    from restorer.restore import republish_changelog
    from topics.admin import kept_settings
    from topics.catalog import Topics

    require_broker(conn)
    topics = Topics(topic_prefix)
    changelog = wing.changelog_topic(topics)
    _refuse_while_live(conn, topics.instances, changelog)
    kept_factor, config = kept_settings(conn, topics, changelog)
    click.echo(republish_changelog(conn, changelog, config, state_dir or wing.default_state_dir, partitions,
                                   replication_factor or kept_factor, wing.check_value, wing.routing))


# An instance silent for longer counts as gone (its lease lapsed long before, at
# --takeover-timeout); one that stopped or was fenced said so in its last announcement.
LIVE_S = 30.0


def _refuse_while_live(conn: KafkaConnection, instances_topic: str, changelog: str) -> None:
    """Re-creating a changelog another instance writes or follows would delete it under that
    instance: refused in one line naming it."""
    from service.ops.status import read_instances
    from service.records.limits import printable

    live = [v for v in read_instances(conn, instances_topic, changelog)
            if v.age_s < LIVE_S and v.what.role not in ("stopped", "fenced")]
    if live:
        a, age = live[0].what, live[0].age_s
        raise BrewError(f"changelog {changelog} is in use by instance {printable(a.instance)} ({printable(a.role)}, "
                        f"pid {a.pid} on {printable(a.host)}, state dir {printable(a.state_dir)}, announced "
                        f"{age:.1f}s ago); stop every instance of this pipeline first (one silent for "
                        f"{LIVE_S:.0f}s counts as gone)")


@cli.command("counts", context_settings=CONTEXT)
@kafka_options
@topic_prefix_option
@state_dir_option(str(pipelines.DRINK_COUNT.default_state_dir))
@click.option("--json", "as_json", is_flag=True, help="Print {\"counts\": …, \"offsets\": …} as JSON.")
@click.option("--top-n", type=click.IntRange(min=1), default=None, help="Only the top N drinks (text output).")
def counts_cmd(conn: KafkaConnection, topic_prefix: str, state_dir: Path, as_json: bool, top_n: int | None) -> None:
    """Print the store: counts per drink (revenue per drink and shop for a revenue store) and the next
    input offset per partition. Works beside a running daemon. An empty store is checked against its
    changelog (the only time Kafka is asked): one whose restore has not finished is refused, not
    printed as zero."""
    import orjson

    from restorer.codec import CHANGELOG_TOPIC
    from restorer.restore import check_restored
    from restorer.store import StateDir, Store
    from topics.catalog import Topics

    topics = Topics(topic_prefix)
    with Store(StateDir(state_dir).store_path, read_only=True) as store:
        built_for = store.local(CHANGELOG_TOPIC)
        changelog = built_for.decode(errors="replace") if built_for else None
        wing = (pipelines.of_store(changelog) if changelog else None) or pipelines.DRINK_COUNT
        if wing.counts is None:
            raise click.ClickException(f"{state_dir} holds a {wing.name} store; `brewstream counts` reads "
                                       f"{' and '.join(w.name for w in pipelines.WINGS.values() if w.counts)} "
                                       "stores (see the HTTP API of its pipeline)")
        check_restored(conn, store, changelog or wing.changelog_topic(topics))
        view = wing.counts(store.items())
    click.echo(orjson.dumps(view.as_json()).decode() if as_json else view.text(top_n))


@cli.command("status", context_settings=CONTEXT)
@kafka_options
@topic_prefix_option
@store_option("Which pipeline's store to look at.")
@state_dir_option(None)
@click.option("--max-lag", type=click.IntRange(min=0), default=None,
              help="Exit 3 when the total input lag is above this (a health check).")
@click.option("--max-batch-age", type=DURATION, default=None,
              help="Exit 3 when the last committed batch is older than this.")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status_cmd(conn: KafkaConnection, topic_prefix: str, wing: Wing, state_dir: Path | None, max_lag: int | None,
               max_batch_age: float | None, as_json: bool) -> int:
    """Stored offsets, end offsets and lag of a store; exit 3 past --max-lag or --max-batch-age."""
    import time

    import orjson

    from service.ops.status import health_problems, read_status, status_text
    from topics.catalog import Topics

    require_broker(conn)
    topics = Topics(topic_prefix)
    status = read_status(conn, state_dir or wing.default_state_dir, wing.input_topic(topics), topics.instances,
                         wing.changelog_topic(topics), wing.side_inputs(topics))
    now = time.time()
    click.echo(orjson.dumps(status.as_json(now)).decode() if as_json else status_text(status, now))
    problems = health_problems(status, now, max_lag, max_batch_age)
    for problem in problems:
        click.echo(f"unhealthy: {problem}", err=True)
    return 3 if problems else 0


# ---------------------------------------------------------------- drills

@cli.group(context_settings=CONTEXT)
def drill() -> None:
    """Recovery drills: kill the daemon (and lose its disk), or fault the Kafka cluster under it,
    and compare with an oracle."""


shuffle_option = click.option("--shuffle", is_flag=True,
                              help="Run every daemon of the drill with `run --shuffle`.")


def drill_run_args(master: str | None, spark_conf: dict[str, str], min_partitions: int | None,
                   shuffle: bool) -> tuple[str, ...]:
    """The `brewstream run` flags a drill gives each daemon beside its own."""
    return (*spark_run_args(master, spark_conf, min_partitions), *(("--shuffle",) if shuffle else ()))


def drill_options(fn: F) -> F:
    for opt in reversed([
        kafka_options,
        click.option("--orders", type=click.IntRange(min=100), default=20_000, show_default=True,
                     help="Orders to feed (about 1% of them malformed)."),
        click.option("--kills", type=click.IntRange(min=1), default=5, show_default=True,
                     help="How many times the daemon is killed."),
        click.option("--seed", type=int, default=1, show_default=True, help="Seed of the orders and the kills."),
        click.option("--max-kill-delay", type=DURATION, default="10s", show_default=True,
                     help="Random kills land up to this long after the first batch of a run."),
        click.option("--feed-time", type=DURATION, default=None,
                     help="Spread the feed over this long.  [default: 25s per kill]"),
        click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path),
                     default=Path("state/drills"), show_default=True,
                     help="Where each drill keeps its state dir, checkpoint and daemon logs."),
        click.option("--keep-topics", is_flag=True, help="Keep the drill's topics afterwards."),
        shuffle_option,
        spark_options,
    ]):
        fn = opt(fn)
    return fn


def _drill(mode: str, conn: KafkaConnection, orders: int, kills: int, seed: int, max_kill_delay: float,
           feed_time: float | None, work_dir: Path, keep_topics: bool, shuffle: bool, master: str | None,
           spark_conf: dict[str, str], min_partitions: int | None) -> int:
    from service.drills.recovery import DrillConfig, run_drill

    result = run_drill(DrillConfig(conn, mode, orders, kills, seed, work_dir, max_kill_delay,
                                   feed_time, keep_topics=keep_topics,
                                   run_args=drill_run_args(master, spark_conf, min_partitions, shuffle)))
    return 0 if result.exact else 3


@drill.command("kill9", context_settings=CONTEXT)
@drill_options
def drill_kill9(**kw: Any) -> int:
    """SIGKILL the daemon at random moments and at each fault point; exit 3 unless exact."""
    return _drill("kill9", **kw)


@drill.command("failover", context_settings=CONTEXT)
@kafka_options
@click.option("--orders", type=click.IntRange(min=100), default=20_000, show_default=True,
              help="Orders to feed (about 1% of them malformed).")
@click.option("--kills", type=click.IntRange(min=1), default=10, show_default=True,
              help="How many times the active is killed (each a failover).")
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of the orders and the kills.")
@click.option("--max-kill-delay", type=DURATION, default="5s", show_default=True,
              help="Random kills land up to this long after the active is ready.")
@click.option("--feed-time", type=DURATION, default=None,
              help="Spread the feed over this long.  [default: 25s per kill]")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("state/drills"),
              show_default=True, help="Where the drill keeps both instances' state dirs, checkpoints and logs.")
@click.option("--keep-topics", is_flag=True, help="Keep the drill's topics afterwards.")
@shuffle_option
@spark_options
def drill_failover(conn: KafkaConnection, orders: int, kills: int, seed: int, max_kill_delay: float,
                   feed_time: float | None, work_dir: Path, keep_topics: bool, shuffle: bool, master: str | None,
                   spark_conf: dict[str, str], min_partitions: int | None) -> int:
    """An active and a standby; kill the active again and again (random moments and fault points),
    time each failover; exit 3 unless exact."""
    from service.drills.failover import run_failover_drill
    from service.drills.recovery import DrillConfig

    result = run_failover_drill(DrillConfig(conn, "failover", orders, kills, seed, work_dir, max_kill_delay,
                                            feed_time, keep_topics=keep_topics,
                                            run_args=drill_run_args(master, spark_conf, min_partitions, shuffle)))
    return 0 if result.exact else 3


@drill.command("broker-faults", context_settings=CONTEXT)
@kafka_options
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=Path(".sandbox/kafka"),
              show_default=True, help="The sandbox cluster to drill (started, with its fault proxy, if it is not "
                                      "up); not used with --node-command.")
@click.option("--port", type=click.IntRange(1, 65535), default=19092, show_default=True,
              help="Client port of the sandbox cluster's node 1 when the drill creates it (node N: PORT+N-1).")
@click.option("--node-command", "node_commands", multiple=True, metavar="ACTION=COMMAND",
              help="Drill your own cluster at --bootstrap instead of the sandbox: the shell command that does "
                   "ACTION (kill, stop, start, pause or resume) to one broker, with {node} (its node id), {host} "
                   "and {port} (its address) filled in; repeatable, kill and start required. Kinds whose actions "
                   "are missing are skipped, and so are the network faults (they need the sandbox's proxy). "
                   "Example: --node-command 'kill=ssh {host} sudo systemctl kill -s KILL kafka' "
                   "--node-command 'start=ssh {host} sudo systemctl start kafka'.")
@click.option("--node-commands", "node_commands_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="The same as --node-command, from a file: one ACTION=COMMAND a line, # comments.")
@click.option("--daemon-bootstrap", default=None,
              help="With --node-command: where the daemons under test bootstrap.  [default: --bootstrap; on the "
                   "sandbox, its fault proxy]")
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True,
              help="How many times each fault kind is injected per pass.")
@click.option("--passes", "passes", type=click.Choice(["both", "alone", "standby"]), default="both",
              show_default=True, help="The daemon alone, an active with a hot standby, or both passes.")
@click.option("--kinds", default=None, metavar="KIND,…",
              help="Only these fault kinds: " + ", ".join(KIND_NAMES) + ".  [default: all the cluster allows]")
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of the orders, the faults and the pauses.")
@click.option("--rate", type=click.IntRange(min=10), default=50, show_default=True,
              help="Orders fed a second, all through the drill (about 1% malformed).")
@click.option("--pause", "pause_s", type=DURATION, default=format_duration(BROKER_PAUSE_S), show_default=True,
              help="How long input-leader-pause keeps a broker SIGSTOPped (past the client timeouts).")
@click.option("--outage", "outage_s", type=DURATION, default="15s", show_default=True,
              help="How long two-brokers-kill keeps both brokers down.")
@click.option("--max-gap", "max_gap_s", type=DURATION, default="5s", show_default=True,
              help="Random pause before each fault, from 1s up to this.")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("state/drills"),
              show_default=True, help="Where the drill keeps the daemons' state dirs, checkpoints and logs.")
@click.option("--keep-topics", is_flag=True, help="Keep the drill's topics afterwards.")
@shuffle_option
@spark_options
def drill_broker_faults(conn: KafkaConnection, data_dir: Path, port: int, node_commands: tuple[str, ...],
                        node_commands_file: Path | None, daemon_bootstrap: str | None, rounds: int, passes: str,
                        kinds: str | None, seed: int, rate: int, pause_s: float, outage_s: float, max_gap_s: float,
                        work_dir: Path, keep_topics: bool, shuffle: bool, master: str | None,
                        spark_conf: dict[str, str], min_partitions: int | None) -> int:
    """Kafka's own failures while the daemon counts, alone and with a hot standby: broker,
    coordinator and controller SIGKILLs, a paused leader, a rolling restart, two brokers down
    (below min.insync.replicas), the active daemon killed during a broker fault, and network
    faults through the sandbox's proxy; prints each fault kind's longest and median stall.
    Exit 3 unless the counts, the DLQ and a fresh restore equal the oracle, every fault
    recovered, no daemon exited or printed a traceback and no transaction is left open."""
    from sandbox.cluster_layout import KafkaCluster
    from service.drills.broker_faults import PASSES, BrokerDrillConfig, run_broker_drill
    from service.drills.cluster_control import ClusterControl, CommandControl, SandboxControl, parse_node_commands

    chosen = tuple(KIND_NAMES)
    if kinds is not None:
        chosen = tuple(k.strip() for k in kinds.split(",") if k.strip())
        unknown = [k for k in chosen if k not in KIND_NAMES]
        if unknown or not chosen:
            raise click.BadParameter(f"unknown kind(s) {', '.join(unknown) or '(none)'}; the kinds are "
                                     f"{', '.join(KIND_NAMES)}", param_hint="'--kinds'")
    control: ClusterControl
    if node_commands or node_commands_file:
        lines = list(node_commands)
        commands = parse_node_commands(lines)
        if node_commands_file is not None:
            from_file = parse_node_commands(node_commands_file.read_text().splitlines(), str(node_commands_file))
            twice = sorted(set(from_file) & set(commands))
            if twice:
                raise click.BadParameter(f"{', '.join(twice)} given both here and in {node_commands_file}",
                                         param_hint="'--node-command'")
            commands.update(from_file)
        require_broker(conn)
        daemon = KafkaConnection(daemon_bootstrap, conn.properties, conn.config_file) if daemon_bootstrap else conn
        control = CommandControl.start(conn, daemon, commands)
    else:
        if daemon_bootstrap is not None:
            raise click.BadParameter("goes with --node-command (on the sandbox the daemons use its fault proxy)",
                                     param_hint="'--daemon-bootstrap'")
        control = SandboxControl.start(KafkaCluster(data_dir), port)
    cfg = BrokerDrillConfig(control, rounds=rounds, seed=seed, rate=rate,
                            passes=PASSES if passes == "both" else (passes,), kinds=chosen, pause_s=pause_s,
                            outage_s=outage_s, max_gap_s=max_gap_s, work_dir=work_dir, keep_topics=keep_topics,
                            run_args=drill_run_args(master, spark_conf, min_partitions, shuffle))
    return 0 if run_broker_drill(cfg).passed else 3


@drill.command("disk-loss", context_settings=CONTEXT)
@drill_options
def drill_disk_loss(**kw: Any) -> int:
    """Like kill9, and delete the state dir and/or checkpoint before restarts; exit 3 unless exact."""
    return _drill("disk-loss", **kw)


# ---------------------------------------------------------------- dlq

@cli.group(context_settings=CONTEXT)
def dlq() -> None:
    """Work a dead-letter queue (brew.orders.dlq; a pipeline's own with --store): inspect,
    export for repair, replay."""


def dlq_options(fn: F) -> F:
    for opt in reversed([
        kafka_options,
        topic_prefix_option,
        store_option("Whose dead-letter queue (the revenue pipeline's is brew.revenue.dlq; the others share "
                     "brew.orders.dlq)."),
        click.option("--reason", default=None,
                     help="Only records whose reason contains this text (any case).  [default: all]"),
        click.option("--since", "since_ms", type=Since(), default=None,
                     help="Only records from this time on: a duration back from now (30m, 2h) or a time such "
                          "as 2026-11-23T10:00:00Z.  [default: all]"),
    ]):
        fn = opt(fn)
    return fn


@dlq.command("show", context_settings=CONTEXT)
@dlq_options
@click.option("--samples", type=click.IntRange(min=0), default=3, show_default=True,
              help="Records shown per reason.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def dlq_show(conn: KafkaConnection, topic_prefix: str, wing: Wing, reason: str | None, since_ms: int | None,
             samples: int, as_json: bool) -> None:
    """DLQ records grouped by reason: counts, time span, how many were replayed, samples."""
    import orjson

    from service.dlq.read import Selection, read_dlq
    from service.dlq.replay import read_ledger
    from service.dlq.show import summarize, summary_json, summary_text
    from topics.catalog import Topics

    require_broker(conn)
    t, selection = Topics(topic_prefix), Selection(reason, since_ms)
    dlq_topic = wing.dlq_topic(t)
    records = (r for r in read_dlq(conn, dlq_topic, selection.since_ms) if selection.wants(r))
    summary = summarize(dlq_topic, records, read_ledger(conn, t.dlq_replays, missing_ok=True), samples)
    click.echo(orjson.dumps(summary_json(summary)).decode() if as_json else summary_text(summary))


@dlq.command("export", context_settings=CONTEXT)
@dlq_options
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the JSON lines to this file.  [default: stdout]")
def dlq_export(conn: KafkaConnection, topic_prefix: str, wing: Wing, reason: str | None, since_ms: int | None,
               out: Path | None) -> None:
    """DLQ records as JSON lines (source topic, partition and offset, reason, key, value) to repair
    with any tool; feed a repaired file back with `seed-orders --file`."""
    from service.dlq.export import export
    from service.dlq.read import Selection
    from topics.catalog import Topics

    require_broker(conn)
    dlq_topic = wing.dlq_topic(Topics(topic_prefix))
    if out is None:
        result = export(conn, dlq_topic, Selection(reason, since_ms), sys.stdout.buffer.write)
        sys.stdout.flush()
    else:
        with open(out, "wb") as fh:
            result = export(conn, dlq_topic, Selection(reason, since_ms), fh.write)
    click.echo(result.summary(str(out) if out else "stdout"), err=True)


@dlq.command("replay", context_settings=CONTEXT)
@dlq_options
@click.option("--dry-run", is_flag=True, help="List what would be replayed; send nothing.")
@click.option("--batch", type=click.IntRange(1, 100_000), default=500, show_default=True,
              help="Records per Kafka transaction.")
def dlq_replay(conn: KafkaConnection, topic_prefix: str, wing: Wing, reason: str | None, since_ms: int | None,
               dry_run: bool, batch: int) -> None:
    """Send selected DLQ records back to their input topic (bytes and key untouched), each exactly
    once even if interrupted and run again: for failures that were a rule or an upstream bug
    since fixed. A record still bad lands in the DLQ again."""
    from restorer.faults import FaultPlan, kill_process_and
    from service.dlq.read import Selection
    from service.dlq.replay import POINTS, replay
    from topics.catalog import Topics

    if wing.no_replay is not None:
        raise BrewError(wing.no_replay)
    require_broker(conn)
    faults = FaultPlan.from_env(kill_process_and(None), POINTS)
    result = replay(conn, Topics(topic_prefix), Selection(reason, since_ms), dry_run, batch, faults)
    for line in result.planned:
        click.echo(f"  {line}")
    click.echo(result.summary(dry_run))


# ---------------------------------------------------------------- board

cli.add_command(board_cmd)
cli.add_command(spark_cluster)
cli.add_command(sandbox)


# ---------------------------------------------------------------- entry point

class _Redacting:
    """A text stream that shows no value of the Kafka config file (``topics.kafka_config.redact``),
    whatever printed it: a command's output, a log line, a library's message."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner

    def write(self, text: str) -> int:
        self._inner.write(redact(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def stopped_by_sigterm() -> NoReturn:
    click.echo("brewstream: stopped by SIGTERM", err=True)
    sys.exit(128 + signal.SIGTERM)


def interrupted() -> NoReturn:
    click.echo("brewstream: interrupted", err=True)
    sys.exit(130)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; every failure is one line on stderr and a non-zero exit."""
    sys.stdout, sys.stderr = _Redacting(sys.stdout), _Redacting(sys.stderr)
    terminate_by_exception()
    # What is alive at exit is never collected but traversed by the interpreter's last
    # collections: after a run, pyspark's, pyarrow's and pandas' objects, a noticeable part
    # of every daemon's exit (docs/performance-notes.md). Everything brewstream holds is
    # closed by then; the process's end frees it.
    atexit.register(gc.freeze)
    try:
        code = cli.main(args=argv, prog_name="brewstream", standalone_mode=False)
    except click.exceptions.Abort:
        interrupted()
    except click.ClickException as exc:
        hint = f" (see `{exc.ctx.command_path} --help`)" if isinstance(exc, click.UsageError) and exc.ctx else ""
        click.echo(f"brewstream: error: {exc.format_message()}{hint}", err=True)
        sys.exit(exc.exit_code)
    except BrewError as exc:
        click.echo(f"brewstream: error: {exc}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        interrupted()
    except Terminated:
        stopped_by_sigterm()
    except Exception as exc:
        by_signal = raised_by_signal(exc)
        if isinstance(by_signal, Terminated):
            stopped_by_sigterm()
        if isinstance(by_signal, KeyboardInterrupt):
            interrupted()
        # Nothing the user can act on reached us as a BrewError: still one line, the
        # traceback only at debug level.
        logging.getLogger("brewstream").debug("unexpected failure", exc_info=True)
        problem = disk_problem(str(exc))
        click.echo(f"brewstream: error: {one_line(exc)}" + (f"; {problem}" if problem else
                   "; run with --log-level debug for the details"), err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
