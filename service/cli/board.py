"""``brewstream board``: serve the live board until SIGINT/SIGTERM."""

from __future__ import annotations

from pathlib import Path

import click

from service import pipelines
from service.cli.common import CONTEXT, kafka_options, topic_prefix_option
from service.instance.signals import stop_on_signals
from service.webboard.feed import TopicFeed
from service.webboard.revenue_panel import RevenuePanel
from service.webboard.server import bind, page_bytes
from service.webboard.state import Hub, Refresher
from topics.catalog import Topics
from topics.kafka import KafkaConnection, require_broker
from topics.menu_gen import check_currency


@click.command("board", context_settings=CONTEXT)
@kafka_options
@topic_prefix_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True,
              help="Port to listen on (0 picks a free one).")
@click.option("--windows-state-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("state/windows"),
              show_default=True, help="State dir of `brewstream windows`, read for the event/processing-time chart.")
@click.option("--revenue-state-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("state/revenue"),
              show_default=True, help="State dir of `brewstream revenue`, read for the revenue panel.")
@click.option("--currency", default="EUR", show_default=True,
              help="The currency the revenue panel shows its sums in: the menu's (`brewstream revenue --currency`).")
def board_cmd(conn: KafkaConnection, topic_prefix: str, host: str, port: int, windows_state_dir: Path,
              revenue_state_dir: Path, currency: str) -> int:
    """A live top-drinks board in the browser: ranking, recent windows, event vs processing time, revenue."""
    from restorer.restore import check_restored

    try:
        check_currency(currency)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--currency") from None
    require_broker(conn)
    topics = Topics(topic_prefix)
    hub = Hub()
    server = bind(host, port, hub, page_bytes())
    feed = TopicFeed(conn, topics)
    changelog = pipelines.WINDOWS.changelog_topic(topics)
    revenue_changelog = pipelines.REVENUE.changelog_topic(topics)
    revenue = RevenuePanel(revenue_state_dir, currency,
                           check=lambda store: check_restored(conn, store, revenue_changelog))
    refresher = Refresher(hub, feed.view, windows_state_dir, {"counts": topics.counts, "windows": topics.windows},
                          check=lambda store: check_restored(conn, store, changelog), revenue=revenue)
    with stop_on_signals() as stop:
        feed.start()
        refresher.start()
        server.start()
        shown = f"[{host}]" if ":" in host else host
        click.echo(f"board: serving http://{shown}:{server.port}/ (Ctrl+C stops)")
        try:
            stop.wait()
        finally:
            hub.close()  # ends every open event stream
            server.stop()
            refresher.stop()
            feed.stop()
    return 0
