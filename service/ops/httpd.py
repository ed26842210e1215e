"""The HTTP server under the daemon's port (``ops.http_api``) and the board's
(``webboard.server``): HTTP/1.0 answers on one asyncio event loop, on a thread of its own
beside the Spark query, built to keep answering a crowd and to shrug off slow clients.

    - The listen backlog is LISTEN_BACKLOG (the kernel caps it at net.core.somaxconn,
      4096 on current Linux), not socketserver's 5: a burst of connections waits in the
      kernel for the loop to take it instead of being reset.
    - An open connection costs a socket and a few KiB on the loop, never a thread, up to
      MAX_CONNECTIONS at once (fewer when the process's open-file limit is low: see
      ``connection_cap``). One more is answered ``503`` with ``Retry-After`` at once (reset
      only past MAX_REFUSING such refusals in flight): none waits on a full server.
    - A request head must arrive whole within HEAD_TIMEOUT_S (from the connection, not per
      byte) and MAX_HEAD_BYTES: a client that sends nothing, or a byte a second, gets a
      ``408`` and is let go, so it holds nothing for long and never delays anyone else.
    - Work that blocks (a store read, rendering the metrics, asking Spark whether the query
      runs) runs in ``Lane``s, thread pools of their own, never on the loop. The probes have
      a lane to themselves, so they never wait behind store reads or metrics. Identical
      requests in flight at once share one run of the work; when more than a lane's
      ``max_waiting`` distinct runs wait, the next request is answered ``503`` with
      ``Retry-After``.
    - Every answer ends its connection, as ``http.server`` did (HTTP/1.0, no keep-alive); a
      client that does not read its answer within WRITE_TIMEOUT_S is reset.
    - ``stop`` closes the listening socket, ends every connection (event streams
      included) and the loop; nothing here keeps the process alive.

Why the standard library and not a server package: the asyncio servers that could run
beside a threaded daemon (uvicorn, aiohttp's) parse HTTP well, but neither bounds the time
to receive a request head, the guard slow clients need. uvicorn's keep-alive timer restarts
on every byte received, so a client trickling a byte a second holds its connection for as
long as it likes (xorbitsai/inference#5213 had to wrap uvicorn's protocol classes for it);
aiohttp's request handler has a keep-alive timeout (3630 s by default) and no deadline for
a request head. Only uvicorn caps concurrency, and it comes with an ASGI app, signal
handling and a loop of its own to work around. Either would be a dependency (several
packages for aiohttp) that still needs the guards written here, around its private classes.
What a library would add is the parsing of a request head; for a GET answered and closed
that is a request line and header lines, and the standard library's
``http.client.parse_headers``, the very parser ``http.server`` used here before, reads them
(``parse_head``), so every answer keeps its bytes: status line, ``Server`` and ``Date``
headers, error pages.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import email.utils
import functools
import html
import http.client
import io
import logging
import resource
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from email.message import Message
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any, TypeVar

log = logging.getLogger("brewstream")

T = TypeVar("T")

LISTEN_BACKLOG = 4096
MAX_CONNECTIONS = 4096
# Refusals (503 then close) in flight at once; past them a connection is reset.
MAX_REFUSING = 1024
HEAD_TIMEOUT_S = 5.0
MAX_HEAD_BYTES = 65536
WRITE_TIMEOUT_S = 10.0
# After an answer, how long the client may take to close its end (read and dropped meanwhile):
# closing with its bytes unread would reset the connection under the answer.
LINGER_S = 2.0
RETRY_AFTER_S = 1
# Open files the rest of the process may need beside the connections: RocksDB's files, Kafka
# clients, Spark's gateway.
RESERVED_FILES = 1024
_MAX_LINE = 65536  # what http.server allowed for one line
_RESPONSES = BaseHTTPRequestHandler.responses
_ERROR_PAGE = BaseHTTPRequestHandler.error_message_format
_ERROR_TYPE = BaseHTTPRequestHandler.error_content_type


# ---------------------------------------------------------------- requests (pure)


@dataclass(frozen=True)
class Request:
    method: str
    target: str  # as sent, "//" at the start reduced to "/" (as http.server did)
    version: str
    headers: Message

    @property
    def path(self) -> str:
        return self.target.partition("?")[0]

    @property
    def query(self) -> str:
        return self.target.partition("?")[2]


@dataclass(frozen=True)
class HeadError:
    """A request head that cannot be answered: the error page to send instead."""

    status: HTTPStatus
    message: str  # the reason phrase, as http.server sent it
    explain: str | None = None


def parse_head(head: bytes) -> Request | HeadError | None:
    """A request head (the request line, header lines, the blank line) as ``http.server``
    read it; None when it holds no request at all. Never raises."""
    head = head.lstrip(b"\r\n")
    first, _, rest = head.partition(b"\n")
    if len(first) >= _MAX_LINE:
        return HeadError(HTTPStatus.REQUEST_URI_TOO_LONG, _RESPONSES[HTTPStatus.REQUEST_URI_TOO_LONG][0])
    line = first.decode("iso-8859-1").rstrip("\r\n")
    words = line.split()
    if not words:
        return None
    version = "HTTP/0.9"
    if len(words) >= 3:
        version = words[-1]
        number = _version(version)
        if number is None:
            return HeadError(HTTPStatus.BAD_REQUEST, f"Bad request version ({version!r})")
        if number >= (2, 0):
            return HeadError(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED,
                             f"Invalid HTTP version ({version.split('/', 1)[1]})")
    if not 2 <= len(words) <= 3:
        return HeadError(HTTPStatus.BAD_REQUEST, f"Bad request syntax ({line!r})")
    method, target = words[:2]
    if len(words) == 2 and method != "GET":
        return HeadError(HTTPStatus.BAD_REQUEST, f"Bad HTTP/0.9 request type ({method!r})")
    if target.startswith("//"):
        target = "/" + target.lstrip("/")
    try:
        headers = http.client.parse_headers(io.BytesIO(rest))
    except http.client.LineTooLong as exc:
        return HeadError(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Line too long", str(exc))
    except http.client.HTTPException as exc:
        return HeadError(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Too many headers", str(exc))
    return Request(method, target, version, headers)


def _version(version: str) -> tuple[int, int] | None:
    if not version.startswith("HTTP/"):
        return None
    parts = version[5:].split(".")
    if len(parts) != 2 or not all(p.isdigit() and p.isascii() and len(p) <= 10 for p in parts):
        return None
    return int(parts[0]), int(parts[1])


# ---------------------------------------------------------------- answers (pure)


@dataclass(frozen=True)
class Response:
    status: HTTPStatus
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Stream:
    """An answer without a length (server-sent events): its head, then ``run`` writes until
    the client goes away or the server stops."""

    content_type: str
    run: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Busy(Exception):
    """Too much waits already; the request is answered 503 with Retry-After."""


def response_head(status: int, reason: str, server: str, date: str, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.0 {status} {reason}", f"Server: {server}", f"Date: {date}",
             *(f"{name}: {value}" for name, value in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")


def response_bytes(response: Response, server: str, date: str) -> bytes:
    headers = [("Content-Type", response.content_type), ("Content-Length", str(len(response.body))),
               ("Cache-Control", "no-store"), *response.headers]
    return response_head(response.status, response.status.phrase, server, date, headers) + response.body


def error_bytes(status: HTTPStatus, server: str, date: str, message: str | None = None,
                explain: str | None = None, head_only: bool = False) -> bytes:
    """The error page http.server's ``send_error`` sent (its head only, to a HEAD request)."""
    message = status.phrase if message is None else message
    explain = _RESPONSES.get(status, ("", status.description))[1] if explain is None else explain
    body = (_ERROR_PAGE % {"code": status, "message": html.escape(message, quote=False),
                           "explain": html.escape(explain, quote=False)}).encode("utf-8", "replace")
    headers = [("Connection", "close"), ("Content-Type", _ERROR_TYPE), ("Content-Length", str(len(body)))]
    return response_head(status, message, server, date, headers) + (b"" if head_only else body)


def busy_response(why: str) -> Response:
    return Response(HTTPStatus.SERVICE_UNAVAILABLE, f"busy: {why}; retry in {RETRY_AFTER_S}s\n".encode(),
                    headers=(("Retry-After", str(RETRY_AFTER_S)),))


def connection_cap(wanted: int, open_files: int) -> int:
    """Connections to hold at once under a limit of ``open_files``: RESERVED_FILES stay for
    the rest of the process, and half of what is left for refusals and sockets closing."""
    return min(wanted, max(16, (open_files - RESERVED_FILES) // 2))


def raise_open_files(wanted: int) -> int:
    """Raise this process's soft limit on open files toward ``wanted`` (never above the hard
    limit, as the JVM does for itself); the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return wanted if soft == resource.RLIM_INFINITY else soft
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        return target
    return soft


# ---------------------------------------------------------------- lanes


class Lane:
    """Blocking work on ``threads`` threads of its own, off the event loop. Work asked for
    under a key that is already running waits for that run instead of starting another;
    with ``max_waiting`` runs queued or running, asking for one more raises ``Busy``. Used
    from one event loop only."""

    def __init__(self, name: str, threads: int, max_waiting: int) -> None:
        self.name, self.max_waiting = name, max_waiting
        self._pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix=name)
        self._running: dict[Hashable, asyncio.Future[Any]] = {}
        self.waiting = 0

    async def run(self, key: Hashable, work: Callable[[], T]) -> T:
        shared = self._running.get(key)
        if shared is None:
            if self.waiting >= self.max_waiting:
                raise Busy(f"{self.waiting} requests wait for the {self.name} lane")
            shared = _submit(self._pool, work)
            self.waiting += 1
            self._running[key] = shared
            shared.add_done_callback(functools.partial(self._finished, key))
        # A waiter that goes away (its client left, the server stops) leaves the run to the others.
        result: T = await asyncio.shield(shared)
        return result

    def _finished(self, key: Hashable, future: asyncio.Future[Any]) -> None:
        self.waiting -= 1
        if self._running.get(key) is future:
            del self._running[key]
        if not future.cancelled():
            future.exception()  # retrieved: nobody may be left to await it

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _submit(pool: concurrent.futures.ThreadPoolExecutor, work: Callable[[], T]) -> asyncio.Future[T]:
    """``work`` on ``pool``, as a future of the running loop. Unlike ``run_in_executor``, work
    that ends after the loop closed (the server stopped under it) is dropped quietly."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(done: concurrent.futures.Future[T]) -> None:
        if future.done():
            return
        if done.cancelled():
            future.cancel()
        elif (exc := done.exception()) is not None:
            future.set_exception(exc)
        else:
            future.set_result(done.result())

    def back(done: concurrent.futures.Future[T]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, done)

    pool.submit(work).add_done_callback(back)
    return future


# ---------------------------------------------------------------- the server


Handler = Callable[[Request], Awaitable[Response | Stream]]


class HeadTooLarge(Exception):
    def __init__(self, line_done: bool) -> None:
        super().__init__("request head too large")
        self.line_done = line_done


async def read_head(reader: asyncio.StreamReader, limit: int = MAX_HEAD_BYTES) -> bytes:
    """The bytes of one request head, through its blank line (blank lines before it skipped);
    b"" when the client closes before sending a request line. A client that closes right
    after a whole line has ended its head (http.server read it so)."""
    head = bytearray()
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            return bytes(head) if head and not exc.partial else b""
        except asyncio.LimitOverrunError:
            raise HeadTooLarge(b"\n" in head) from None
        if not head and line in (b"\r\n", b"\n"):
            limit -= len(line)
            if limit < 0:
                raise HeadTooLarge(False)
            continue
        head += line
        if len(head) > limit:
            raise HeadTooLarge(head.count(b"\n") > 1)
        if line in (b"\r\n", b"\n"):
            return bytes(head)


class HttpServer:
    """Listens on host:port from the constructor (an OSError there is the caller's to word);
    serves from ``start`` until ``stop``."""

    def __init__(self, host: str, port: int, handler: Handler, name: str, server_version: str,
                 max_connections: int = MAX_CONNECTIONS, head_timeout_s: float = HEAD_TIMEOUT_S) -> None:
        self.name, self.handler, self.head_timeout_s = name, handler, head_timeout_s
        self.server_header = f"{server_version} Python/{sys.version.split()[0]}"
        self.max_connections = connection_cap(
            max_connections, raise_open_files(2 * max_connections + MAX_REFUSING + RESERVED_FILES))
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as socketserver did
            self._sock.bind((host, port))
            self._sock.listen(LISTEN_BACKLOG)
            self._sock.setblocking(False)
        except OSError:
            self._sock.close()
            raise
        self.port: int = self._sock.getsockname()[1]
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._ready = threading.Event()
        self._failure: Exception | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.open = 0  # connections held now, refusals apart
        self._refusing = 0
        self._stopped = False

    # ------------------------------------------------------------ life

    def start(self) -> None:
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            raise self._failure

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(asyncio.start_server(
                self._connection, sock=self._sock, backlog=LISTEN_BACKLOG, limit=MAX_HEAD_BYTES))
        except Exception as exc:
            self._failure = exc
            return
        finally:
            self._ready.set()
        self._loop.run_forever()

    def call_soon(self, fn: Callable[..., object], *args: object) -> None:
        """``fn(*args)`` on the server's loop, from any thread; nothing once it stopped."""
        with contextlib.suppress(RuntimeError):  # the loop is closed
            self._loop.call_soon_threadsafe(fn, *args)

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._stopped:
            return
        self._stopped = True
        if not self._thread.is_alive():
            self._sock.close()
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout_s)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self._loop.close()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()  # the listening socket
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)

    # ------------------------------------------------------------ one connection

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            if self.open < self.max_connections:
                self.open += 1
                try:
                    await self._exchange(reader, writer)
                finally:
                    self.open -= 1
            elif self._refusing < MAX_REFUSING:
                self._refusing += 1
                try:
                    await self._answer(reader, writer, response_bytes(
                        busy_response(f"{self.open} connections are open"), self.server_header, _now()))
                finally:
                    self._refusing -= 1
            else:
                writer.transport.abort()  # a flood past every refusal: the kernel's answer
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client went away or stalled, or the server stops
        except Exception:
            log.debug("%s: a connection failed", self.name, exc_info=True)
        finally:
            if task is not None:
                self._tasks.discard(task)
            if writer.transport.get_write_buffer_size():
                writer.transport.abort()  # never held open by a client that does not read
            else:
                writer.close()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server = self.server_header
        try:
            async with asyncio.timeout(self.head_timeout_s):
                head = await read_head(reader)
        except TimeoutError:
            await self._answer(reader, writer, error_bytes(HTTPStatus.REQUEST_TIMEOUT, server, _now()))
            return
        except HeadTooLarge as exc:
            status = HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE if exc.line_done else HTTPStatus.REQUEST_URI_TOO_LONG
            await self._answer(reader, writer, error_bytes(status, server, _now()))
            return
        request = parse_head(head)
        if request is None:
            return  # nothing asked
        if isinstance(request, HeadError):
            await self._answer(reader, writer, error_bytes(request.status, server, _now(), request.message,
                                                           request.explain))
            return
        if request.method != "GET":
            await self._answer(reader, writer, error_bytes(HTTPStatus.NOT_IMPLEMENTED, server, _now(),
                                                           f"Unsupported method ({request.method!r})",
                                                           head_only=request.method == "HEAD"))
            return
        try:
            answer = await self.handler(request)
        except Busy as exc:
            answer = busy_response(str(exc))
        except Exception as exc:  # a bug; the daemon's log says it in one line
            log.warning("%s: answering %s failed: %s: %s", self.name, request.path[:80], type(exc).__name__, exc)
            log.debug("%s: answering %s failed", self.name, request.path[:80], exc_info=True)
            await self._answer(reader, writer, error_bytes(HTTPStatus.INTERNAL_SERVER_ERROR, server, _now()))
            return
        if isinstance(answer, Stream):
            writer.write(response_head(HTTPStatus.OK, "OK", server, _now(),
                                       [("Content-Type", answer.content_type), ("Cache-Control", "no-store")]))
            await answer.run(reader, writer)
            return
        log.debug("http %s %s %d", request.method, request.target[:200], answer.status)
        # A GET without a body was read whole: closing right away loses nothing.
        body = "Content-Length" in request.headers or "Transfer-Encoding" in request.headers
        await self._answer(reader, writer, response_bytes(answer, server, _now()), linger=body)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes,
                      linger: bool = True) -> None:
        """Write a whole answer; with ``linger``, end the connection's sending side and give the
        client a moment to close its own, its unread bytes dropped (closing with them unread
        would reset the connection under the answer)."""
        writer.write(data)
        async with asyncio.timeout(WRITE_TIMEOUT_S):
            await writer.drain()
        if not linger or not writer.can_write_eof():
            return
        writer.write_eof()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(LINGER_S):
                while await reader.read(65536):
                    pass


def _now() -> str:
    return email.utils.formatdate(usegmt=True)
