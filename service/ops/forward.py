"""Any instance answers for every task: a data query that an instance running none of the
tasks receives is forwarded to the instance that runs them, and the owner's answer comes
back, labelled by the owner (task, owner, generation, position: ``queries.labelled``) and
with the instance that forwarded it (``forwarded_by``).

Where the owner is: the address it advertises with its lease (``--http-advertise``, by
default where its HTTP server binds), read from its announcements. The rules:

    - A request is forwarded once: it carries FORWARDED_HEADER, and an instance never
      forwards a request that carries it (two instances that each think the other the
      owner, for a moment, cannot send a request back and forth).
    - The client's own ``Authorization`` goes along: instances of one application share
      their token file. The address comes from the instances topic, so only the
      application's principals may write that topic (its ACLs), as for the lease itself.
    - An owner that does not answer within FORWARD_TIMEOUT_S, or answers anything but 200
      (restoring, its own trouble), is no answer: the instance answers itself as it would
      without forwarding (a standby's copy labelled stale, or 503 with Retry-After), and
      says why in ``forward_failed``.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import re
import socket
import threading
from dataclasses import dataclass

import orjson

from service.records.limits import printable

FORWARDED_HEADER = "X-Brewstream-Forwarded-By"
# A paused owner's kernel still accepts the connection; past this the instance answers itself.
FORWARD_TIMEOUT_S = 1.0
# The whole answer must have come by then: an owner (or whatever the address leads to) that
# trickles bytes holds a forwarding thread no longer.
FORWARD_DEADLINE_S = 10.0
# The largest answer taken from an owner: far above the store answers the API serves (a
# million drinks' counts are about 40 MiB of JSON).
MAX_FORWARDED_BYTES = 128 * 1024 * 1024
_CHUNK = 1 << 16
_WILDCARDS = ("", "0.0.0.0", "::", "[::]")
_HOST = re.compile(r"[A-Za-z0-9._-]{1,253}")  # a DNS name or an IPv4 address


class BadAddress(ValueError):
    """An address that is not HOST:PORT; the message is the one-line reason."""


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (an IPv6 host in brackets) as (host, port); ``BadAddress`` otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise BadAddress(f"expected HOST:PORT, not {text[:80]!r}")
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and 1 <= int(port) <= 65535):
        raise BadAddress(f"the port of {text[:80]!r} must be a number from 1 to 65535")
    if host.startswith("["):
        if not host.endswith("]"):
            raise BadAddress(f"an IPv6 host in {text[:80]!r} needs its closing bracket")
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise BadAddress(f"{host[:80]!r} is not an IPv6 address") from None
    elif not _HOST.fullmatch(host):
        raise BadAddress(f"{host[:80]!r} is not a host name or address (IPv6 goes in brackets)")
    return host, int(port)


def advertised(bind_host: str, port: int, given: str | None) -> str:
    """The address this instance's HTTP API announces: ``--http-advertise`` when given,
    else the address it binds to; a wildcard bind is this host's name."""
    if given is not None:
        host, p = parse_address(given)
        return f"{host}:{p}"
    host = socket.gethostname() if bind_host in _WILDCARDS else bind_host
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


@dataclass(frozen=True)
class Forwarded:
    """What the owner answered: 200 with its JSON document."""

    doc: dict[str, object]


def forward(address: str, target: str, authorization: str | None, me: str,
            timeout_s: float = FORWARD_TIMEOUT_S, deadline_s: float = FORWARD_DEADLINE_S,
            max_bytes: int = MAX_FORWARDED_BYTES) -> Forwarded | str:
    """GET ``target`` (path and query, as the client sent them) from the instance at
    ``address``: its document, or why there is none (one line). Each wait on the socket
    is bounded by ``timeout_s``, the whole exchange by ``deadline_s`` (past it the socket
    is shut under whatever read waits), the answer by ``max_bytes``."""
    try:
        host, port = parse_address(address)
    except BadAddress as exc:
        return f"the owner advertises a bad address ({exc})"
    conn = http.client.HTTPConnection(host.strip("[]"), port, timeout=timeout_s)
    headers = {FORWARDED_HEADER: me, "Accept": "application/json"}
    if authorization is not None:
        headers["Authorization"] = authorization
    late = threading.Event()

    def cut() -> None:
        late.set()
        with contextlib.suppress(OSError, AttributeError):
            conn.sock.shutdown(socket.SHUT_RDWR)  # wakes a read blocked on it

    timer = threading.Timer(deadline_s, cut)
    timer.daemon = True
    timer.start()
    try:
        conn.request("GET", target, headers=headers)
        response = conn.getresponse()
        if response.status != 200:
            return f"the owner at {address} answered {response.status}"
        parts: list[bytes] = []
        size = 0
        while chunk := response.read1(_CHUNK):
            parts.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                return f"the owner at {address} answered more than {max_bytes} bytes"
        body = b"".join(parts)
    except (OSError, http.client.HTTPException) as exc:
        if late.is_set():
            return f"the owner at {address} did not answer whole within {deadline_s:g}s"
        return f"the owner at {address} did not answer ({type(exc).__name__}: {printable(str(exc)[:120])})"
    finally:
        timer.cancel()
        conn.close()
    if late.is_set():
        return f"the owner at {address} did not answer whole within {deadline_s:g}s"
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return f"the owner at {address} answered something else than JSON"
    if not isinstance(doc, dict):
        return f"the owner at {address} answered something else than a JSON object"
    return Forwarded(doc)
