"""The HTTP server's pure parts (request heads, answers, lanes, the connection cap) and its
guards on real sockets on 127.0.0.1: the head deadline, the connection cap, a full lane, stop."""

from __future__ import annotations

import asyncio
import io
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.ops.httpd import (
    MAX_HEAD_BYTES,
    Busy,
    HeadError,
    HeadTooLarge,
    HttpServer,
    Lane,
    Request,
    Response,
    Stream,
    connection_cap,
    error_bytes,
    parse_head,
    read_head,
    response_bytes,
)
from topics.clock import wait_until

# ---------------------------------------------------------------- request heads


def stdlib(head: bytes) -> Request | HeadError | None:
    """What http.server's own parse_request made of ``head``."""
    first, newline, rest = head.partition(b"\n")
    handler = object.__new__(BaseHTTPRequestHandler)
    handler.raw_requestline = first + newline  # type: ignore[attr-defined]
    handler.rfile, handler.wfile = io.BytesIO(rest), io.BytesIO()
    errors: list[tuple[int, str | None, str | None]] = []
    handler.send_error = lambda code, message=None, explain=None: errors.append((code, message, explain))  # type: ignore[method-assign]
    if handler.parse_request():
        return Request(handler.command, handler.path, handler.request_version, handler.headers)
    if not errors:
        return None
    code, message, explain = errors[0]
    return HeadError(HTTPStatus(code), message or HTTPStatus(code).phrase, explain)


def same(a: Request | HeadError | None, b: Request | HeadError | None) -> bool:
    if isinstance(a, Request) and isinstance(b, Request):
        return (a.method, a.target, a.version, a.headers.items()) == (b.method, b.target, b.version, b.headers.items())
    return a == b


WORDS = st.one_of(st.sampled_from(["GET", "POST", "HEAD", "/readyz", "//api/counts?x=1", "/a b", "HTTP/1.1",
                                   "HTTP/1.0", "HTTP/2.0", "HTTP/1", "HTTP/1.1.1", "HTTP/x.y", "FOO/1.0", "HTTP/01.01",
                                   "HTTP/\xb2.1", "HTTP/99999999999.1"]),
                  st.text(st.characters(min_codepoint=1, max_codepoint=255), max_size=12))
LINES = st.lists(WORDS, max_size=5).map(" ".join)
HEADERS = st.lists(st.one_of(
    st.tuples(st.sampled_from(["Host", "Accept", "Authorization", "X-A"]),
              st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=20)).map(": ".join),
    st.text(st.characters(min_codepoint=1, max_codepoint=255), max_size=30)), max_size=6)


@st.composite
def heads(draw: st.DrawFn) -> bytes:
    eol = draw(st.sampled_from(["\r\n", "\n"]))
    lines = [draw(LINES), *draw(HEADERS)]
    return (eol.join(lines) + eol + eol).encode("latin-1")


@settings(max_examples=400)
@given(heads())
def test_a_head_is_read_as_http_server_read_it(head: bytes) -> None:
    if head[:1] in (b"\r", b"\n"):
        return  # blank lines before a request are skipped here (RFC 9112 2.2), not by http.server
    assert same(parse_head(head), stdlib(head)), head


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_any_bytes_make_a_request_an_error_or_nothing_and_never_raise(head: bytes) -> None:
    parsed = parse_head(head)
    assert parsed is None or isinstance(parsed, Request | HeadError)
    if isinstance(parsed, HeadError):
        assert parsed.status in (400, 414, 431, 505)
        assert "\r" not in parsed.message and "\n" not in parsed.message  # it goes on the status line


@given(st.sampled_from(["GET", "POST"]), st.from_regex(r"/[!-~]{0,30}", fullmatch=True),
       st.sampled_from(["HTTP/1.0", "HTTP/1.1"]),
       st.dictionaries(st.from_regex(r"[A-Za-z][A-Za-z0-9-]{0,15}", fullmatch=True),
                       st.from_regex(r"[!-~]([ !-~]{0,30}[!-~])?", fullmatch=True), max_size=5))
def test_a_well_formed_request_reads_back(method: str, target: str, version: str, headers: dict[str, str]) -> None:
    head = f"{method} {target} {version}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    parsed = parse_head(head.encode())
    assert isinstance(parsed, Request)
    assert (parsed.method, parsed.version) == (method, version)
    assert parsed.target == ("/" + target.lstrip("/") if target.startswith("//") else target)
    assert parsed.path + ("?" + parsed.query if "?" in parsed.target else "") == parsed.target
    assert {k.lower(): v for k, v in parsed.headers.items()} == {k.lower(): v for k, v in headers.items()}


def test_heads_http_server_refused_are_refused_the_same_way() -> None:
    assert parse_head(b"GET /readyz HTTP/2.0\r\n\r\n") == HeadError(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED,
                                                                    "Invalid HTTP version (2.0)")
    assert parse_head(b"GET /x FOO/1.0\r\n\r\n") == HeadError(HTTPStatus.BAD_REQUEST, "Bad request version ('FOO/1.0')")
    too_many = b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 101 + b"\r\n"
    assert isinstance(error := parse_head(too_many), HeadError) and error.status == 431
    assert parse_head(b"\r\n") is None and parse_head(b"") is None
    assert isinstance(request := parse_head(b"\r\nGET //healthz HTTP/1.1\r\n\r\n"), Request)
    assert request.target == "/healthz"


def read(data: list[bytes], eof: bool = True, limit: int = MAX_HEAD_BYTES) -> bytes:
    async def go() -> bytes:
        reader = asyncio.StreamReader(limit=limit)
        for piece in data:
            reader.feed_data(piece)
        if eof:
            reader.feed_eof()
        return await read_head(reader, limit)
    return asyncio.run(go())


@given(st.lists(st.binary(min_size=1, max_size=7), max_size=12))
def test_a_head_is_the_same_however_it_arrives(cuts: list[bytes]) -> None:
    head = b"GET /readyz HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n"
    pieces, at = [], 0
    for cut in cuts:
        n = len(cut)
        pieces.append(head[at:at + n])
        at += n
    pieces.append(head[at:])
    assert read([p for p in pieces if p] + [b"GET /next"]) == head


def test_reading_a_head() -> None:
    assert read([b"\r\n\n", b"GET / HTTP/1.0\n\n"]) == b"GET / HTTP/1.0\n\n"
    assert read([]) == b""  # closed before asking anything
    assert read([b"GET / HT"]) == b""  # closed in the middle of its request line
    assert read([b"GET / HTTP/1.0\r\n"]) == b"GET / HTTP/1.0\r\n"  # closed after a whole line: that was all
    with pytest.raises(HeadTooLarge) as line:
        read([b"GET /" + b"a" * 300], eof=False, limit=100)
    assert not line.value.line_done
    with pytest.raises(HeadTooLarge) as headers:
        read([b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 40], eof=False, limit=100)
    assert headers.value.line_done


# ---------------------------------------------------------------- answers


def test_answers_keep_http_server_s_bytes() -> None:
    ok = response_bytes(Response(HTTPStatus.OK, b"ready: active\n", headers=(("X-A", "1"),)), "brewstream Python/3",
                        "Sun, 22 Nov 2026 10:00:00 GMT")
    assert ok == (b"HTTP/1.0 200 OK\r\nServer: brewstream Python/3\r\nDate: Sun, 22 Nov 2026 10:00:00 GMT\r\n"
                  b"Content-Type: text/plain; charset=utf-8\r\nContent-Length: 14\r\nCache-Control: no-store\r\n"
                  b"X-A: 1\r\n\r\nready: active\n")
    page = error_bytes(HTTPStatus.NOT_IMPLEMENTED, "s", "d", "Unsupported method ('POST')")
    assert page.startswith(b"HTTP/1.0 501 Unsupported method ('POST')\r\nServer: s\r\nDate: d\r\nConnection: close\r\n"
                           b"Content-Type: text/html;charset=utf-8\r\nContent-Length: ")
    assert b"<p>Message: Unsupported method (&#x27;POST&#x27;).</p>" not in page  # quotes are not escaped
    assert b"<p>Message: Unsupported method ('POST').</p>" in page
    assert error_bytes(HTTPStatus.NOT_IMPLEMENTED, "s", "d", head_only=True).endswith(b"\r\n\r\n")


@given(st.integers(1, 100_000), st.integers(0, 1_000_000))
def test_the_connection_cap_leaves_files_for_the_rest(wanted: int, files: int) -> None:
    cap = connection_cap(wanted, files)
    assert 1 <= cap <= wanted
    assert cap == min(wanted, 16) or 2 * cap + 1024 <= files


# ---------------------------------------------------------------- lanes


def test_a_lane_runs_identical_work_once_and_bounds_the_rest() -> None:
    async def go() -> None:
        lane = Lane("test", 2, 2)
        release = threading.Event()
        runs: list[str] = []

        def work(name: str) -> str:
            runs.append(name)
            release.wait(10)
            return name

        same = [asyncio.ensure_future(lane.run("a", lambda: work("a"))) for _ in range(50)]
        other = asyncio.ensure_future(lane.run("b", lambda: work("b")))
        await asyncio.sleep(0)
        with pytest.raises(Busy):
            await lane.run("c", lambda: work("c"))
        same[0].cancel()  # one waiter leaving does not cancel the others' run
        release.set()
        assert await asyncio.gather(*same[1:]) == ["a"] * 49 and await other == "b"
        assert sorted(runs) == ["a", "b"] and lane.waiting == 0

        def broken() -> str:
            raise RuntimeError("no")
        results = await asyncio.gather(*(lane.run("d", broken) for _ in range(3)), return_exceptions=True)
        assert all(isinstance(r, RuntimeError) for r in results)
        assert await lane.run("a", lambda: "again") == "again"  # a finished run is not reused
        lane.close()
    asyncio.run(go())


# ---------------------------------------------------------------- the guards, on real sockets


@contextmanager
def serving(handler_lane: Lane | None = None, release: threading.Event | None = None,
            **kwargs: float) -> Iterator[HttpServer]:
    release = release or threading.Event()

    async def handler(request: Request) -> Response | Stream:
        if request.path == "/slow" and handler_lane is not None:
            return await handler_lane.run(request.query, lambda: (release.wait(10), Response(HTTPStatus.OK, b"x"))[1])
        if request.path == "/events":
            async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                writer.write(b"data: {}\n\n")
                await reader.read()
            return Stream("text/event-stream", run)
        return Response(HTTPStatus.OK, b"fine\n")

    server = HttpServer("127.0.0.1", 0, handler, "test-http", "test", **kwargs)  # type: ignore[arg-type]
    server.start()
    try:
        yield server
    finally:
        release.set()
        server.stop()


def exchange(port: int, data: bytes, timeout: float = 10) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def test_a_client_that_sends_nothing_or_trickles_gets_408_at_the_deadline() -> None:
    with serving(head_timeout_s=0.5) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as idle, \
                socket.create_connection(("127.0.0.1", server.port), timeout=10) as trickle:
            start = time.monotonic()
            trickle.settimeout(0.1)
            answer = b""
            for byte in b"GET /readyz HTTP/1.1\r\nX: " + b"a" * 100:
                trickle.send(bytes([byte]))
                try:
                    answer = trickle.recv(65536)
                    break
                except TimeoutError:
                    continue
            assert answer.startswith(b"HTTP/1.0 408 Request Timeout\r\n")
            assert time.monotonic() - start < 5  # the deadline holds for the whole head, not per byte
            assert idle.recv(65536).startswith(b"HTTP/1.0 408 ")
        assert exchange(server.port, b"GET / HTTP/1.0\r\n\r\n").endswith(b"\r\n\r\nfine\n")


def test_past_the_connection_cap_a_request_is_answered_503_with_retry_after() -> None:
    with serving(max_connections=3, head_timeout_s=30) as server:
        held = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(3)]
        try:
            wait_until(lambda: server.open == 3, 10, "three connections held")
            answer = exchange(server.port, b"GET / HTTP/1.1\r\n\r\n")
            assert answer.startswith(b"HTTP/1.0 503 Service Unavailable\r\n") and b"\r\nRetry-After: 1\r\n" in answer
        finally:
            for s in held:
                s.close()
        wait_until(lambda: server.open == 0, 10, "the held connections let go")
        assert exchange(server.port, b"GET / HTTP/1.1\r\n\r\n").endswith(b"fine\n")


def test_a_full_lane_answers_503_with_retry_after_and_identical_requests_share_a_run() -> None:
    lane, release = Lane("test-lane", 1, 1), threading.Event()
    with serving(lane, release) as server:
        results: list[bytes] = []
        slow = b"GET /slow?a HTTP/1.0\r\n\r\n"
        waiting = [threading.Thread(target=lambda: results.append(exchange(server.port, slow))) for _ in range(5)]
        for t in waiting:
            t.start()
        wait_until(lambda: lane.waiting == 1 and server.open == 5, 10, "the five slow requests to wait on one run")
        busy = exchange(server.port, b"GET /slow?b HTTP/1.0\r\n\r\n")
        assert busy.startswith(b"HTTP/1.0 503 ") and b"Retry-After: 1\r\n" in busy
        release.set()
        for t in waiting:
            t.join(10)
    assert len(results) == 5 and all(r.startswith(b"HTTP/1.0 200 OK\r\n") for r in results)
    lane.close()


def test_methods_and_heads_it_cannot_serve_get_http_server_s_answers() -> None:
    with serving() as server:
        assert exchange(server.port, b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\nab").startswith(
            b"HTTP/1.0 501 Unsupported method ('POST')\r\n")
        head = exchange(server.port, b"HEAD / HTTP/1.1\r\n\r\n")
        assert head.startswith(b"HTTP/1.0 501 ") and head.endswith(b"\r\n\r\n")
        assert exchange(server.port, b"GET / HTTP/1.1\r\n" + b"X: " + b"y" * MAX_HEAD_BYTES).startswith(
            b"HTTP/1.0 431 ")
        assert exchange(server.port, b"GET /" + b"y" * MAX_HEAD_BYTES).startswith(b"HTTP/1.0 414 ")
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.shutdown(socket.SHUT_WR)  # gone before asking anything: nothing to answer
            assert s.recv(65536) == b""


def test_stop_ends_every_connection_and_stream_and_frees_the_port() -> None:
    with serving() as server:
        idle = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        stream = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        stream.sendall(b"GET /events HTTP/1.1\r\n\r\n")
        got = b""
        while b"data: {}" not in got:
            got += stream.recv(65536)
        wait_until(lambda: server.open == 2, 10, "two connections held")
        start = time.monotonic()
        server.stop()
        assert time.monotonic() - start < 5
        assert idle.recv(65536) == b"" and stream.recv(65536) == b""
        idle.close()
        stream.close()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", server.port), timeout=10)
