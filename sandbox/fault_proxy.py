"""The fault-injecting TCP proxy in front of the sandbox cluster's brokers, as a process:
``python -m sandbox.fault_proxy CONFIG.json``. One listener per node forwards to that
node's PROXIED listener (which advertises the proxy's port, so clients that bootstrap
through a proxy stay behind the proxies); replication and the quorum never pass here.
``sandbox.faults`` starts it and drives it through a small HTTP API on 127.0.0.1.

Faults, per node, as a real network would show them to a TCP client:

- latency: every byte waits ``ms / 2`` on its way to the broker and ``ms / 2`` on its way
  back, so each request's round trip grows by ``ms``; order is kept.
- blackhole: connections are accepted and kept, nothing is forwarded either way. Bytes in
  flight are held, not dropped (TCP would retransmit them): after a heal they arrive, on
  the same connections, unless the client gave up and closed first. Dropping bytes of a
  TCP stream would desynchronise the Kafka framing, which no network does.
- reset: every connection open at that moment is closed with an RST (SO_LINGER 0) on
  both sides, idle or busy; new connections are served as before.
- heal: no latency, no blackhole.

Why not Toxiproxy (it has latency, timeout and reset_peer toxics and an HTTP API, and
``go install github.com/Shopify/toxiproxy/v2/cmd/server`` builds v2.5.0 and v2.12.0 here
in 10-40 s): tried on both versions, ``reset_peer`` added while connections are open
ends them with a FIN, not an RST (it sets SO_LINGER 0 only on links started while the
toxic exists), and only once each carries more data, so an idle client connection is
never reset; and removing a ``timeout`` toxic (the blackhole) closes every connection it
held, so a healed blackhole is a disconnect. Those are the three faults asked of it, and
it would add a Go toolchain to `make install`. Throughput here is a sandbox's (a few
MB/s through asyncio), plenty for drills on a two-core machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import signal
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

CHUNK = 65536
# Chunks a direction holds in a blackhole or behind latency before it stops reading:
# then the kernel's buffers fill and the sender's TCP window closes, as on a real link.
QUEUE_CHUNKS = 64
API_TIMEOUT_S = 5.0


@dataclass(eq=False)  # a set of links holds each one by identity
class Link:
    """One client connection and its connection to the broker."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter

    def reset(self) -> None:
        _rst(self.client)
        _rst(self.upstream)


def _rst(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()  # closes at once; with linger 0 that is an RST


@dataclass
class Node:
    node_id: int
    listen: int
    upstream: int
    latency_ms: int = 0
    open: asyncio.Event = field(default_factory=asyncio.Event)  # cleared while blackholed
    links: set[Link] = field(default_factory=set)
    accepted: int = 0
    reset_total: int = 0

    def state(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "listen": self.listen, "upstream": self.upstream,
                "latency_ms": self.latency_ms, "blackhole": not self.open.is_set(),
                "connections": len(self.links), "accepted": self.accepted, "reset_total": self.reset_total}


class Proxy:
    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = {n.node_id: n for n in nodes}
        self.servers: list[asyncio.Server] = []

    async def start(self) -> None:
        for node in self.nodes.values():
            node.open.set()
            server = await asyncio.start_server(functools.partial(self._serve, node), "127.0.0.1", node.listen)
            self.servers.append(server)

    async def _serve(self, node: Node, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        node.accepted += 1
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", node.upstream)
        except OSError:
            # The broker is down: the client sees what it would see connecting to it.
            _rst(client_w)
            return
        link = Link(client_w, up_w)
        node.links.add(link)
        try:
            await asyncio.gather(self._pump(node, client_r, up_w), self._pump(node, up_r, client_w),
                                 return_exceptions=True)
        finally:
            node.links.discard(link)
            for w in (client_w, up_w):
                w.close()

    async def _pump(self, node: Node, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(QUEUE_CHUNKS)

        async def read() -> None:
            while True:
                try:
                    data = await reader.read(CHUNK)
                except OSError:
                    data = b""
                await queue.put((time.monotonic() + node.latency_ms / 2000, data))
                if not data:
                    return

        reading = asyncio.create_task(read())
        try:
            while True:
                due, data = await queue.get()
                if not data:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                await node.open.wait()
                writer.write(data)
                await writer.drain()
        finally:
            reading.cancel()
            # One side is gone: close the other, as a direct connection would be.
            writer.close()

    # Called on the loop by the API thread.
    def act(self, node_id: int, action: str, body: dict[str, Any]) -> dict[str, Any]:
        node = self.nodes.get(node_id)
        if node is None:
            raise KeyError(f"no node {node_id}")
        if action == "latency":
            ms = int(body.get("ms", 0))
            if not 0 <= ms <= 600_000:
                raise ValueError("ms must be 0..600000")
            node.latency_ms = ms
        elif action == "blackhole":
            node.open.clear()
        elif action == "reset":
            links = list(node.links)
            for link in links:
                link.reset()
            node.reset_total += len(links)
            return {**node.state(), "reset": len(links)}
        elif action == "heal":
            node.latency_ms = 0
            node.open.set()
        else:
            raise ValueError(f"unknown action {action!r}")
        return node.state()

    def state(self) -> dict[str, Any]:
        return {"nodes": [n.state() for n in self.nodes.values()]}


def _api(proxy: Proxy, loop: asyncio.AbstractEventLoop, port: int) -> ThreadingHTTPServer:
    def on_loop(fn: Any, *args: Any) -> Any:
        async def call() -> Any:
            return fn(*args)
        return asyncio.run_coroutine_threadsafe(call(), loop).result(API_TIMEOUT_S)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _reply(self, code: int, payload: dict[str, Any]) -> None:
            raw = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:
            if self.path == "/state":
                self._reply(200, on_loop(proxy.state))
            else:
                self._reply(404, {"error": f"no {self.path}"})

        def do_POST(self) -> None:
            parts = self.path.strip("/").split("/")
            if len(parts) != 3 or parts[0] != "nodes" or not parts[1].isdigit():
                self._reply(404, {"error": f"no {self.path}; POST /nodes/<id>/<latency|blackhole|reset|heal>"})
                return
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
                self._reply(200, on_loop(proxy.act, int(parts[1]), parts[2], body))
            except (KeyError, ValueError, TypeError) as exc:
                self._reply(400, {"error": str(exc).strip("'\"")})

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, name="fault-proxy-api", daemon=True).start()
    return server


async def _main(config: dict[str, Any]) -> None:
    nodes = [Node(int(n["node_id"]), int(n["listen"]), int(n["upstream"])) for n in config["nodes"]]
    proxy = Proxy(nodes)
    await proxy.start()
    loop = asyncio.get_running_loop()
    api = _api(proxy, loop, int(config["api_port"]))
    done = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    print(f"fault proxy serving: api 127.0.0.1:{config['api_port']}, "
          + ", ".join(f"node {n.node_id} {n.listen}->{n.upstream}" for n in nodes), flush=True)
    await done.wait()
    api.shutdown()
    for server in proxy.servers:
        server.close()
    for node in nodes:
        for link in list(node.links):
            link.reset()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m sandbox.fault_proxy CONFIG.json", file=sys.stderr)
        return 2
    asyncio.run(_main(json.loads(Path(argv[0]).read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
