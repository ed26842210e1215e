"""The ``brewstream`` command line. Commands are thin: parse flags, call a module, print."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from service.durations import DURATION, format_duration
from service.errors import BrewError
from service.kafka import DEFAULT_BOOTSTRAP, KafkaConnection, require_broker

F = TypeVar("F", bound=Callable[..., Any])

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def bootstrap_option(fn: F) -> F:
    return click.option(
        "--bootstrap", envvar="KAFKA_BOOTSTRAP", default=DEFAULT_BOOTSTRAP, show_default=True,
        show_envvar=True, help="Kafka bootstrap servers (host:port[,host:port…]).",
    )(fn)


def topic_prefix_option(fn: F) -> F:
    return click.option(
        "--topic-prefix", default="", show_default=True, envvar="BREWSTREAM_TOPIC_PREFIX", show_envvar=True,
        help="Prefix for every topic name, to run a separate pipeline on the same cluster.",
    )(fn)


def connection(bootstrap: str) -> KafkaConnection:
    return KafkaConnection(bootstrap)


@click.group(context_settings=CONTEXT)
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True, help="Log level of brewstream's own messages.")
def cli(log_level: str) -> None:
    """brewstream: exact stateful drink counts over Kafka with Spark and RocksDB."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S", stream=sys.stderr)


# ---------------------------------------------------------------- sandbox

@cli.group(context_settings=CONTEXT)
def sandbox() -> None:
    """A local single-node KRaft Kafka broker on 127.0.0.1 (jars from Maven)."""


def sandbox_options(fn: F) -> F:
    fn = click.option("--data-dir", type=click.Path(path_type=Path), default=Path(".sandbox/kafka"),
                      show_default=True, help="Where the broker keeps its config, logs and pid.")(fn)
    return click.option("--port", type=click.IntRange(1, 65535), default=19092, show_default=True,
                        help="Client port on 127.0.0.1.")(fn)


@sandbox.command("up", context_settings=CONTEXT)
@sandbox_options
def sandbox_up(port: int, data_dir: Path) -> None:
    """Start the broker in the background and wait until it serves (idempotent)."""
    from sandbox.broker import Sandbox, up

    click.echo(up(Sandbox(port, data_dir)))


@sandbox.command("down", context_settings=CONTEXT)
@sandbox_options
def sandbox_down(port: int, data_dir: Path) -> None:
    """Stop the broker cleanly."""
    from sandbox.broker import Sandbox, down

    click.echo(down(Sandbox(port, data_dir)))


@sandbox.command("status", context_settings=CONTEXT)
@sandbox_options
def sandbox_status(port: int, data_dir: Path) -> int:
    """Say whether the broker serves; exit 1 when it does not."""
    from sandbox.broker import Sandbox, status

    serving, text = status(Sandbox(port, data_dir))
    click.echo(text)
    return 0 if serving else 1


# ---------------------------------------------------------------- topics

@cli.group(context_settings=CONTEXT)
def topics() -> None:
    """Create, delete or describe every brewstream topic."""


@topics.command("create", context_settings=CONTEXT)
@bootstrap_option
@topic_prefix_option
@click.option("--partitions", type=click.IntRange(min=1), default=3, show_default=True,
              help="Partitions of each topic.")
@click.option("--replication-factor", type=click.IntRange(min=1), default=1, show_default=True,
              help="Replicas of each partition.")
def topics_create(bootstrap: str, topic_prefix: str, partitions: int, replication_factor: int) -> None:
    """Create all topics; one that already exists is fine. The changelog is compacted."""
    from topics.admin import create_topics
    from topics.catalog import Topics

    for name, outcome in create_topics(connection(bootstrap), partitions, replication_factor,
                                       Topics(topic_prefix)):
        click.echo(f"{outcome:8} {name}")


@topics.command("delete", context_settings=CONTEXT)
@bootstrap_option
@topic_prefix_option
def topics_delete(bootstrap: str, topic_prefix: str) -> None:
    """Delete all topics (their data is gone)."""
    from topics.admin import delete_topics
    from topics.catalog import Topics

    for name, outcome in delete_topics(connection(bootstrap), Topics(topic_prefix)):
        click.echo(f"{outcome:8} {name}")


@topics.command("describe", context_settings=CONTEXT)
@bootstrap_option
@topic_prefix_option
def topics_describe(bootstrap: str, topic_prefix: str) -> None:
    """Partitions, replication factor and non-default configs of each topic."""
    from topics.admin import describe_topics
    from topics.catalog import Topics

    for item in describe_topics(connection(bootstrap), Topics(topic_prefix)):
        if isinstance(item, str):
            click.echo(f"{item}  absent")
            continue
        configs = " ".join(f"{k}={v}" for k, v in sorted(item.config.items()))
        click.echo(f"{item.name}  partitions={item.partitions} replication={item.replication_factor}"
                   + (f"  {configs}" if configs else ""))


# ---------------------------------------------------------------- seed-orders

@cli.command("seed-orders", context_settings=CONTEXT)
@bootstrap_option
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
def seed_orders(bootstrap: str, topic_prefix: str, count: int | None, rate: float, burst: int,
                file_: Path | None, seed: int | None) -> int:
    """Produce Brew orders to brew.orders.v1 (keyed by shop_id)."""
    from topics.catalog import Topics
    from topics.feed import file_records, generated_records, produce

    orders_topic = Topics(topic_prefix).orders
    conn = connection(bootstrap)
    require_broker(conn)
    records = file_records(file_) if file_ else generated_records(seed)
    stop = _stop_on_signals()
    if file_ is None:
        pace = f"{burst} orders every {format_duration(rate)}" if rate else "as fast as possible"
        click.echo(f"seed-orders: {pace} to {orders_topic}"
                   + (f", {count} in all" if count is not None else " until Ctrl+C"), err=True)
    result = produce(conn, records, topic=orders_topic, count=count, interval_s=rate,
                     per_tick=burst, stop=stop)
    click.echo(f"seed-orders: sent {result.sent} records to {orders_topic}"
               + (f", {result.failed} failed ({result.first_error})" if result.failed else ""))
    return 1 if result.failed else 0


def _stop_on_signals() -> threading.Event:
    """An event set by SIGINT/SIGTERM, so long loops end cleanly instead of dying."""
    stop = threading.Event()

    def handler(signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return stop


# ---------------------------------------------------------------- drink-count

def state_dir_option(default: str) -> Callable[[F], F]:
    return click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), default=Path(default),
                        show_default=True, help="Folder of the RocksDB store and its lock.")


@cli.command("run", context_settings=CONTEXT)
@bootstrap_option
@topic_prefix_option
@state_dir_option("state/drink-count")
@click.option("--checkpoint-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("state/checkpoints/drink-count"), show_default=True,
              help="Spark's checkpoint folder for the query.")
@click.option("--flush", "flush_s", type=DURATION, default="5s", show_default=True,
              help="Interval of the top-N board (stdout and brew.drink-counts).")
@click.option("--top-n", type=click.IntRange(min=1), default=10, show_default=True, help="Rows on the board.")
@click.option("--trigger", "trigger_s", type=DURATION, default="1s", show_default=True,
              help="Micro-batch interval.")
@click.option("--max-offsets-per-trigger", type=click.IntRange(min=1), default=None,
              help="Cap on records per micro-batch (backpressure).  [default: no cap]")
@click.option("--available-now", is_flag=True,
              help="Process the backlog present at start, flush a final board and exit 0.")
@click.option("--master", default="local[*]", show_default=True, help="Spark master URL.")
@click.option("--auto-restore/--no-auto-restore", default=True, show_default=True,
              help="Rebuild an empty or missing store from the changelog before starting.")
@click.option("--instance", default=None,
              help="Instance name in the changelog's transactional.id.  [default: state dir name + path hash]")
def run_cmd(bootstrap: str, topic_prefix: str, state_dir: Path, checkpoint_dir: Path, flush_s: float, top_n: int,
            trigger_s: float, max_offsets_per_trigger: int | None, available_now: bool, master: str,
            auto_restore: bool, instance: str | None) -> int:
    """The drink-count daemon: brew.orders.v1 -> exact counts in RocksDB + changelog, top-N board."""
    from service.daemon import RunConfig, run
    from topics.catalog import Topics

    if flush_s <= 0 or trigger_s < 0:
        raise click.BadParameter("--flush must be above 0 and --trigger not below 0")
    return run(RunConfig(connection(bootstrap), state_dir, checkpoint_dir, flush_s, top_n, trigger_s,
                         max_offsets_per_trigger, available_now, master, auto_restore, instance,
                         Topics(topic_prefix)))


@cli.command("restore", context_settings=CONTEXT)
@bootstrap_option
@topic_prefix_option
@state_dir_option("state/drink-count")
@click.option("--clean", is_flag=True, help="Delete the existing store first.")
def restore_cmd(bootstrap: str, topic_prefix: str, state_dir: Path, clean: bool) -> None:
    """Rebuild the store from brew.drink-count-changelog, up to its end offsets."""
    from restorer.progress import RestoreProgress
    from restorer.reader import apply_changelog
    from service.store import StateDir, Store
    from topics.catalog import Topics

    conn = connection(bootstrap)
    require_broker(conn)
    with StateDir(state_dir) as sd:
        if clean:
            sd.remove_store()
        with Store(sd.store_path) as store:
            if not store.is_empty():
                raise BrewError(f"the store in {sd.store_path} is not empty; pass --clean to rebuild it "
                                "from the changelog")
            with RestoreProgress("restore") as progress:
                result = apply_changelog(conn, Topics(topic_prefix).changelog, store, on_progress=progress.update)
    click.echo(result.summary())


@cli.command("counts", context_settings=CONTEXT)
@state_dir_option("state/drink-count")
@click.option("--json", "as_json", is_flag=True, help="Print {\"counts\": …, \"offsets\": …} as JSON.")
@click.option("--top-n", type=click.IntRange(min=1), default=None, help="Only the top N drinks (text output).")
def counts_cmd(state_dir: Path, as_json: bool, top_n: int | None) -> None:
    """Print the store: counts per drink and the next input offset per partition."""
    import orjson

    from service.store import StateDir, Store
    from service.topn import top_n as rank

    with Store(StateDir(state_dir).store_path, read_only=True) as store:
        state = store.read_all()
    if as_json:
        click.echo(orjson.dumps(state.as_json()).decode())
        return
    ranked = rank(state.counts, top_n or len(state.counts))
    width = max((len(r.drink) for r in ranked), default=5)
    for r in ranked:
        click.echo(f"{r.drink:<{width}}  {r.count}")
    offsets = " ".join(f"{t}[{p}]={o}" for t, ps in sorted(state.offsets.items()) for p, o in sorted(ps.items()))
    click.echo(f"processed_orders={state.processed_orders} bad_orders={state.meta.get('bad_orders', 0)} "
               f"next offsets: {offsets or '(none)'}")


# ---------------------------------------------------------------- drills

@cli.group(context_settings=CONTEXT)
def drill() -> None:
    """Recovery drills: kill the daemon (and lose its disk) and compare with an oracle."""


def drill_options(fn: F) -> F:
    for opt in reversed([
        bootstrap_option,
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
    ]):
        fn = opt(fn)
    return fn


def _drill(mode: str, bootstrap: str, orders: int, kills: int, seed: int, max_kill_delay: float,
           feed_time: float | None, work_dir: Path, keep_topics: bool) -> int:
    from service.drill import DrillConfig, run_drill

    result = run_drill(DrillConfig(connection(bootstrap), mode, orders, kills, seed, work_dir, max_kill_delay,
                                   feed_time, keep_topics=keep_topics))
    return 0 if result.exact else 3


@drill.command("kill9", context_settings=CONTEXT)
@drill_options
def drill_kill9(**kw: Any) -> int:
    """SIGKILL the daemon at random moments and at each fault point; exit 3 unless exact."""
    return _drill("kill9", **kw)


@drill.command("disk-loss", context_settings=CONTEXT)
@drill_options
def drill_disk_loss(**kw: Any) -> int:
    """Like kill9, and delete the state dir and/or checkpoint before restarts; exit 3 unless exact."""
    return _drill("disk-loss", **kw)


# ---------------------------------------------------------------- entry point

def main(argv: list[str] | None = None) -> None:
    """Run the CLI; every failure is one line on stderr and a non-zero exit."""
    try:
        code = cli.main(args=argv, prog_name="brewstream", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("brewstream: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        hint = f" (see `{exc.ctx.command_path} --help`)" if isinstance(exc, click.UsageError) and exc.ctx else ""
        click.echo(f"brewstream: error: {exc.format_message()}{hint}", err=True)
        sys.exit(exc.exit_code)
    except BrewError as exc:
        click.echo(f"brewstream: error: {exc}", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
