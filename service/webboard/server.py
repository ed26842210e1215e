"""The HTTP side: the page, the state as JSON, and the same state as server-sent events.

On ``ops.httpd``'s server (one event loop; a crowd waits in a deep backlog, a slow client is
let go, past the bounds a request is answered 503 with Retry-After): the page and the state
are bytes in memory, answered on the loop itself. Every open page holds an event stream; one
relay thread waits on the hub and hands each new version to all of them at once, so a
thousand pages cost a thousand sockets, not a thousand threads. A page that stops reading
(a frozen tab) is let go once MAX_STREAM_BUFFER bytes wait for it; its browser reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import threading
import time
from http import HTTPStatus
from importlib import resources

from service.ops.httpd import HttpServer, Request, Response, Stream
from service.webboard.state import Hub
from topics.errors import BrewError

log = logging.getLogger(__name__)

# A comment line now and then lets both ends notice a connection that died quietly.
KEEPALIVE_S = 15.0
RECONNECT_MS = 2000
MAX_STREAM_BUFFER = 1 << 20
# How often the relay looks up from the hub (to notice a stop).
_RELAY_WAIT_S = 1.0


def page_bytes() -> bytes:
    return resources.files("service.webboard").joinpath("static/board.html").read_bytes()


class BoardServer:
    """Listens from the constructor; serves from ``start`` until ``stop``."""

    def __init__(self, host: str, port: int, hub: Hub, page: bytes) -> None:
        self.hub, self.page = hub, page
        self._http = HttpServer(host, port, self._handle, "board-http", "brewstream-board")
        self.port = self._http.port
        # Open event streams, each with the version it was sent last; touched on the loop only.
        self._streams: dict[asyncio.StreamWriter, int] = {}
        self._stop = threading.Event()
        self._relay = threading.Thread(target=self._relay_loop, name="board-relay", daemon=True)

    def start(self) -> None:
        self._http.start()
        self._relay.start()

    def stop(self) -> None:
        self._stop.set()
        self._http.stop()
        if self._relay.is_alive():
            self._relay.join(2 * _RELAY_WAIT_S)

    async def _handle(self, request: Request) -> Response | Stream:
        path = request.path
        if path in ("/", "/index.html"):
            return Response(HTTPStatus.OK, self.page, "text/html; charset=utf-8")
        if path == "/api/state":
            return Response(HTTPStatus.OK, self.hub.latest()[1], "application/json")
        if path == "/events":
            return Stream("text/event-stream", self._stream)
        return Response(HTTPStatus.NOT_FOUND, b"not found\n")

    async def _stream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.hub.closed:
            return
        version, body = self.hub.latest()
        writer.write(f"retry: {RECONNECT_MS}\n\n".encode() + _event(body))
        self._streams[writer] = version
        try:
            while await reader.read(4096):  # a page says nothing more: this ends when it goes away
                pass
        finally:
            self._streams.pop(writer, None)

    # ------------------------------------------------------------ the relay

    def _relay_loop(self) -> None:
        version = self.hub.latest()[0]
        last = time.monotonic()
        while not self._stop.is_set():
            newer = self.hub.wait_newer(version, _RELAY_WAIT_S)
            if self.hub.closed:
                self._http.call_soon(self._end_streams)
                return
            if newer is not None:
                version, body = newer
                self._http.call_soon(self._broadcast, version, _event(body))
            elif time.monotonic() - last < KEEPALIVE_S:
                continue
            else:
                self._http.call_soon(self._broadcast, None, b": keepalive\n\n")
            last = time.monotonic()

    def _broadcast(self, version: int | None, data: bytes) -> None:
        for writer, sent in list(self._streams.items()):
            if version is not None and sent >= version:
                continue  # it joined after this version came out
            if writer.transport.is_closing() or writer.transport.get_write_buffer_size() > MAX_STREAM_BUFFER:
                del self._streams[writer]
                writer.transport.abort()
                continue
            writer.write(data)
            if version is not None:
                self._streams[writer] = version

    def _end_streams(self) -> None:
        for writer in list(self._streams):
            del self._streams[writer]
            with contextlib.suppress(OSError):
                writer.close()


def _event(body: bytes) -> bytes:
    return b"data: " + body + b"\n\n"


def bind(host: str, port: int, hub: Hub, page: bytes) -> BoardServer:
    """Listen on host:port, or fail in one line."""
    try:
        return BoardServer(host, port, hub, page)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise BrewError(f"port {port} on {host} is already in use; stop the other process or pass "
                            "another --port") from None
        raise BrewError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
