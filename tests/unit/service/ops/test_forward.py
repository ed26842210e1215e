"""Any instance answers for every task: a standby forwards data queries to the instance
that runs the tasks, over real sockets between two HTTP servers (no Kafka, no Spark)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from restorer.codec import CHANGELOG_PARTITIONS, commit_key, encode_u64, local_key, position_key
from restorer.store import Store
from service.drink_count.counts import drink_key
from service.instance.health import ACTIVE, RESTORING, STANDBY, STARTING, Health
from service.ops.forward import FORWARDED_HEADER, BadAddress, advertised, forward, parse_address
from service.ops.http_api import HttpApi, serving
from service.ops.queries import Owner
from tests.support.http_api import TOKEN, get, start


@given(st.text(max_size=40))
def test_any_text_is_an_address_or_refused_in_one_line(text: str) -> None:
    try:
        host, port = parse_address(text)
    except BadAddress as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 300
    else:
        assert 1 <= port <= 65535 and host and text.endswith(str(port))
        assert parse_address(f"{host}:{port}") == (host, port)  # read back as it is announced


@given(st.sampled_from(["localhost", "10.0.0.7", "brew-1.internal", "[::1]", "[fe80::1]"]), st.integers(1, 65535))
def test_names_and_addresses_with_a_port_read_back(host: str, port: int) -> None:
    assert parse_address(f"{host}:{port}") == (host, port)


@pytest.mark.parametrize("text", ["brew-1", ":80", "brew-1:0", "brew-1:65536", "brew-1:http", "::1:80",
                                  "[::1:80", "[not-v6]:80", "a b:80", "user@host:80", "http://h:80"])
def test_what_is_not_host_and_port_is_refused(text: str) -> None:
    with pytest.raises(BadAddress):
        parse_address(text)


def test_the_advertised_address_is_the_given_one_or_the_bind() -> None:
    assert advertised("127.0.0.1", 8080, None) == "127.0.0.1:8080"
    assert advertised("0.0.0.0", 8080, None) == f"{socket.gethostname()}:8080"
    assert advertised("::1", 8080, None) == "[::1]:8080"
    assert advertised("0.0.0.0", 8080, "brew-1.internal:9000") == "brew-1.internal:9000"
    with pytest.raises(BadAddress):
        advertised("0.0.0.0", 8080, "brew-1.internal")


def make_store(path: Path, latte: int, position: int) -> Store:
    s = Store(path)
    s.commit([(drink_key("latte"), encode_u64(latte)), (commit_key(0), encode_u64(3)),
              (position_key(0), encode_u64(position)), (local_key(CHANGELOG_PARTITIONS), b"1")])
    return s


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[HttpApi, HttpApi, Health, Health]]:
    """An active owner (latte 7) and a standby whose copy is behind (latte 5)."""
    owner_health, standby_health = Health(), Health()
    owner, standby = start(owner_health, TOKEN), start(standby_health, TOKEN)
    with make_store(tmp_path / "a", 7, 20) as a, make_store(tmp_path / "b", 5, 12) as b, \
            serving(owner, a), serving(standby, b):
        owner.whole(a)
        standby.whole(b)
        owner_health.set(RESTORING)
        owner_health.set(STARTING)
        owner_health.set(ACTIVE)
        standby_health.set(RESTORING)
        standby_health.set(STANDBY)
        owner.owner = lambda: Owner("brew-a", 2, ("running",))
        standby.owner = lambda: Owner("brew-b", 1, ("standby",))
        standby.peer = lambda: f"127.0.0.1:{owner.port}"
        try:
            yield owner, standby, owner_health, standby_health
        finally:
            owner.stop()
            standby.stop()


def test_a_standby_answers_with_the_owner_s_fresh_answer(pair: tuple[HttpApi, HttpApi, Health, Health]) -> None:
    owner, standby, _, _ = pair
    code, body = get(standby, "/api/counts", TOKEN)
    doc = json.loads(body)
    assert code == 200 and doc["counts"] == {"latte": 7}  # the owner's, not the copy's 5
    assert (doc["instance"], doc["generation"], doc["role"], doc["forwarded_by"]) == ("brew-a", 2, "active", "brew-b")
    assert doc["tasks"]["0"] == {"keys": 1, "seq": 3, "changelog_position": 20, "offsets": {}, "owner": "brew-a",
                                      "generation": 2, "state": "running"}
    assert "stale" not in doc
    assert json.loads(get(standby, "/api/top?n=1", TOKEN)[1])["top"] == [{"rank": 1, "drink": "latte", "count": 7}]
    # Refused here, never sent on: a bad query, a missing token; the probes and status are its own.
    assert get(standby, "/api/top?n=0", TOKEN)[0] == 400
    assert get(standby, "/api/counts")[0] == 401
    assert json.loads(get(standby, "/api/status", TOKEN)[1])["role"] == "standby"
    # The owner never forwards: it runs the tasks.
    assert "forwarded_by" not in json.loads(get(owner, "/api/counts", TOKEN)[1])


def test_a_request_is_forwarded_once_at_most(pair: tuple[HttpApi, HttpApi, Health, Health]) -> None:
    owner, standby, _, _ = pair
    # Each thinks the other the owner for a moment: the request goes one way, and is answered there.
    owner.peer = lambda: f"127.0.0.1:{standby.port}"
    doc = json.loads(get(standby, "/api/counts", TOKEN)[1])
    assert doc["counts"] == {"latte": 7} and doc["forwarded_by"] == "brew-b"
    got = forward(f"127.0.0.1:{standby.port}", "/api/counts", f"Bearer {TOKEN}", "brew-a")
    assert not isinstance(got, str) and got.doc["counts"] == {"latte": 5} and got.doc["stale"] is True
    assert FORWARDED_HEADER.lower().startswith("x-brewstream")


def test_without_an_answer_from_the_owner_the_standby_answers_its_labelled_copy(
        pair: tuple[HttpApi, HttpApi, Health, Health]) -> None:
    owner, standby, owner_health, _ = pair
    owner_health.set(STARTING, "waiting for Kafka")  # the owner answers 503: no answer
    doc = json.loads(get(standby, "/api/counts", TOKEN)[1])
    assert doc["counts"] == {"latte": 5} and doc["stale"] is True and doc["tasks"]["0"]["owner"] is None
    assert doc["forward_failed"] == f"the owner at 127.0.0.1:{owner.port} answered 503"
    owner.stop()  # gone: refused at once
    doc = json.loads(get(standby, "/api/counts", TOKEN)[1])
    assert doc["stale"] is True and "did not answer" in doc["forward_failed"]


def test_a_silent_owner_costs_a_query_the_forward_timeout_not_more(tmp_path: Path) -> None:
    """An owner paused (SIGSTOP): its kernel takes the connection, nobody answers."""
    silent = socket.create_server(("127.0.0.1", 0))
    health = Health()
    api = start(health)
    try:
        with make_store(tmp_path / "b", 5, 12) as b, serving(api, b):
            api.whole(b)
            health.set(RESTORING)
            health.set(STANDBY)
            api.peer = lambda: f"127.0.0.1:{silent.getsockname()[1]}"
            code, body = get(api, "/api/counts")  # the client waits 5 s: the forward gives up first
            assert code == 200 and json.loads(body)["stale"] is True
            assert "timed out" in json.loads(body)["forward_failed"]
    finally:
        api.stop()
        silent.close()


class Server:
    """A listening socket whose every connection gets ``reply(conn)``, on a thread."""

    def __init__(self, reply: Callable[[socket.socket], None]) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.done = threading.Event()

        def serve() -> None:
            with contextlib.suppress(OSError):
                conn, _ = self.sock.accept()
                with conn:
                    conn.recv(65536)
                    reply(conn)
                    self.done.wait(30)

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.done.set()
        self.sock.close()


def trickle(conn: socket.socket) -> None:
    for byte in b"HTTP/1.0 200 OK\r\nX-Slow: " + b"y" * 1000:  # a header a byte at a time, never ending
        conn.sendall(bytes([byte]))
        time.sleep(0.05)


def garbage(conn: socket.socket) -> None:
    conn.sendall(b"\x00\x01not http at all\r\n\r\n")


def oversized(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + b"[" + b"1," * 4000 + b"1]")


@pytest.mark.parametrize(("reply", "why"), [
    (trickle, "did not answer whole within 1.5s"),
    (garbage, "did not answer (BadStatusLine"),
    (oversized, "answered more than 1000 bytes"),
])
def test_whatever_the_address_leads_to_a_forward_ends_in_one_line(reply: Callable[[socket.socket], None],
                                                                  why: str) -> None:
    server = Server(reply)
    try:
        got = forward(server.address, "/api/counts", None, "brew-b", timeout_s=1.0, deadline_s=1.5, max_bytes=1000)
        assert isinstance(got, str) and why in got and "\n" not in got, got
    finally:
        server.close()


@given(st.text(max_size=30))
def test_an_accepted_host_is_plain_text(host: str) -> None:
    try:
        got, _ = parse_address(f"{host}:80")
    except BadAddress:
        return
    assert got.isprintable() and got.isascii() and not any(c.isspace() for c in got)
