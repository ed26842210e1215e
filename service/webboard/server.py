"""The HTTP side: the page, the state as JSON, and the same state as server-sent events."""

from __future__ import annotations

import errno
import logging
import socket
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources

from service.webboard.state import Hub
from topics.errors import BrewError

log = logging.getLogger(__name__)

# A comment line now and then lets both ends notice a connection that died quietly.
KEEPALIVE_S = 15.0
RECONNECT_MS = 2000


def page_bytes() -> bytes:
    return resources.files("service.webboard").joinpath("static/board.html").read_bytes()


class BoardServer(ThreadingHTTPServer):
    # Event streams never end on their own; they must not keep the process alive.
    daemon_threads = True

    def __init__(self, address: tuple[str, int], hub: Hub, page: bytes) -> None:
        self.hub = hub
        self.page = page
        super().__init__(address, BoardHandler)


class BoardServer6(BoardServer):
    address_family = socket.AF_INET6


class BoardHandler(BaseHTTPRequestHandler):
    server: BoardServer
    server_version = "brewstream-board"

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in ("/", "/index.html"):
            self._send(HTTPStatus.OK, "text/html; charset=utf-8", self.server.page)
        elif path == "/api/state":
            self._send(HTTPStatus.OK, "application/json", self.server.hub.latest()[1])
        elif path == "/events":
            self._stream()
        else:
            self._send(HTTPStatus.NOT_FOUND, "text/plain; charset=utf-8", b"not found\n")

    def _send(self, status: HTTPStatus, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _stream(self) -> None:
        hub = self.server.hub
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        version, body = hub.latest()
        try:
            self.wfile.write(f"retry: {RECONNECT_MS}\n\n".encode() + _event(body))
            self.wfile.flush()
            while not hub.closed:
                newer = hub.wait_newer(version, KEEPALIVE_S)
                if newer is None:
                    self.wfile.write(b": keepalive\n\n")
                else:
                    version, body = newer
                    self.wfile.write(_event(body))
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the page went away

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s %s", self.address_string(), format % args)


def _event(body: bytes) -> bytes:
    return b"data: " + body + b"\n\n"


def bind(host: str, port: int, hub: Hub, page: bytes) -> BoardServer:
    """Listen on host:port, or fail in one line."""
    cls = BoardServer6 if ":" in host else BoardServer
    try:
        return cls((host, port), hub, page)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise BrewError(f"port {port} on {host} is already in use; stop the other process or pass "
                            "another --port") from None
        raise BrewError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
