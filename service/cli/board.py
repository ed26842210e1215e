"""``brewstream board``: serve the live board until SIGINT/SIGTERM."""

from __future__ import annotations

from pathlib import Path

import click

from service import pipelines
from service.cli.common import CONTEXT, kafka_options, topic_prefix_option
from service.instance.signals import stop_on_signals
from service.webboard.feed import TopicFeed
from service.webboard.server import bind, page_bytes
from service.webboard.state import Hub, Refresher
from topics.catalog import Topics
from topics.kafka import KafkaConnection, require_broker


@click.command("board", context_settings=CONTEXT)
@kafka_options
@topic_prefix_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True,
              help="Port to listen on (0 picks a free one).")
@click.option("--windows-state-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("state/windows"),
              show_default=True, help="State dir of `brewstream windows`, read for the event/processing-time chart.")
def board_cmd(conn: KafkaConnection, topic_prefix: str, host: str, port: int, windows_state_dir: Path) -> int:
    """A live top-drinks board in the browser: ranking, recent windows, event vs processing time."""
    from restorer.restore import check_restored

    require_broker(conn)
    topics = Topics(topic_prefix)
    hub = Hub()
    server = bind(host, port, hub, page_bytes())
    feed = TopicFeed(conn, topics)
    changelog = pipelines.WINDOWS.changelog_topic(topics)
    refresher = Refresher(hub, feed.view, windows_state_dir, {"counts": topics.counts, "windows": topics.windows},
                          check=lambda store: check_restored(conn, store, changelog))
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
