"""The board's one JSON state document, rebuilt about once a second, and the hub that
hands each new version to the pages waiting on it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from service.instance.periodic import Every
from service.webboard import revenue_panel
from service.webboard.chart import read_chart, unavailable
from service.webboard.feed import FeedView
from service.webboard.revenue_panel import RevenuePanel
from topics.clock import utc_iso

if TYPE_CHECKING:
    from restorer.store import Store

log = logging.getLogger(__name__)

REFRESH_S = 1.0


class Hub:
    """The latest document as bytes, with a version number to wait on."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._version = 0
        self._body = b"{}"
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def publish(self, doc: dict[str, Any]) -> None:
        body = orjson.dumps(doc)
        with self._cond:
            self._version += 1
            self._body = body
            self._cond.notify_all()

    def latest(self) -> tuple[int, bytes]:
        with self._cond:
            return self._version, self._body

    def wait_newer(self, version: int, timeout: float) -> tuple[int, bytes] | None:
        """The document after ``version``, or None on timeout or once the hub is closed."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self._version > version, timeout)
            if self._closed or self._version <= version:
                return None
            return self._version, self._body

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


def state_doc(feed: FeedView, chart: dict[str, Any], topics: dict[str, str], now: datetime,
              revenue: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "now": utc_iso(now),
        "topics": topics,
        "snapshot": feed.snapshot,
        "recent_windows": feed.windows,
        "waiting_for": feed.waiting_for,
        "kafka_error": feed.error,
        "instances": feed.instances,
        "chart": chart,
        "revenue": revenue if revenue is not None else revenue_panel.unavailable("no revenue store is read"),
    }


class Refresher:
    """Every ``interval_s``: read the feed, the windows store and the revenue store, publish
    to the hub."""

    def __init__(self, hub: Hub, view: Callable[[], FeedView], windows_state_dir: Path, topics: dict[str, str],
                 interval_s: float = REFRESH_S, check: Callable[[Store], object] | None = None,
                 revenue: RevenuePanel | None = None) -> None:
        self.hub, self.view, self.windows_state_dir = hub, view, windows_state_dir
        self.topics, self.check = topics, check  # ``check``: see ``stores.read_store``
        self.revenue = revenue
        self._every = Every(interval_s, self.refresh, "board refresh")

    def start(self) -> None:
        self.refresh()  # the first page load already has data
        self._every.start()

    def stop(self) -> None:
        self._every.stop()

    def refresh(self) -> None:
        try:
            chart = read_chart(self.windows_state_dir, check=self.check)
        except Exception as exc:  # a broken store must not stop the ranking from updating
            log.exception("reading the windows store failed")
            chart = unavailable(f"cannot read the windows store: {exc}")
        revenue = None
        if self.revenue is not None:
            try:
                revenue = self.revenue.read()
            except Exception as exc:  # nor must a broken revenue store
                log.exception("reading the revenue store failed")
                revenue = revenue_panel.unavailable(f"cannot read the revenue store: {exc}")
        self.hub.publish(state_doc(self.view(), chart, self.topics, datetime.now(UTC), revenue))
