"""A crowd at an HTTP port, on real sockets to 127.0.0.1 only: many requests at once from one
asyncio loop, slow clients that hold connections open (idle, or a byte a second, connecting
again whenever the server lets go), and a prober on a thread of its own that times a probe
again and again meanwhile. Every request ends in an ``Outcome``: a status, or how it failed
(``reset``, ``timeout``, ``refused``, ``closed`` without an answer). Bounded in count and time:
nothing here runs past the deadlines it is given."""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

HOST = "127.0.0.1"
# What a slow client trickles, one byte a second: a request head that never ends.
SLOW_HEAD = b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Slow: " + b"a" * 4000


@dataclass(frozen=True)
class Outcome:
    path: str
    status: int | None  # None: no answer
    failure: str | None  # why there is no answer
    seconds: float
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    body: bytes = field(default=b"", repr=False)


def raise_open_files(needed: int) -> None:
    """This process may hold ``needed`` sockets (the soft limit up to the hard one)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard == resource.RLIM_INFINITY else min(hard, needed),
                                                    hard))


def parse_response(data: bytes) -> tuple[int, dict[str, str], bytes] | None:
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        return None
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers, body


def _failure(exc: BaseException) -> str:
    if isinstance(exc, ConnectionResetError | BrokenPipeError):
        return "reset"
    if isinstance(exc, ConnectionRefusedError):
        return "refused"
    if isinstance(exc, TimeoutError):
        return "timeout"
    return type(exc).__name__


def request_bytes(path: str, headers: Sequence[tuple[str, str]] = ()) -> bytes:
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers)
    return f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n{extra}\r\n".encode()


async def request(port: int, path: str, timeout_s: float, headers: Sequence[tuple[str, str]] = (),
                  first_event: bool = False) -> Outcome:
    """One GET on a connection of its own, read to the end (or, for an event stream, to the
    end of its first event)."""
    start = time.perf_counter()
    data = b""
    writer = None
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(HOST, port)
            writer.write(request_bytes(path, headers))
            await writer.drain()
            while chunk := await reader.read(65536):
                data += chunk
                if first_event and b"\r\n\r\n" in data and b"\n\n" in data.partition(b"data: ")[2]:
                    break
    except (OSError, TimeoutError) as exc:
        parsed = parse_response(data)
        if parsed is None:
            return Outcome(path, None, _failure(exc), time.perf_counter() - start)
    finally:
        if writer is not None:
            writer.close()
    parsed = parse_response(data)
    if parsed is None:
        return Outcome(path, None, "closed", time.perf_counter() - start)
    status, got, body = parsed
    return Outcome(path, status, None, time.perf_counter() - start, got, body)


async def crowd(port: int, paths: Sequence[str], n: int, timeout_s: float,
                headers: Sequence[tuple[str, str]] = ()) -> list[Outcome]:
    """``n`` requests at once, the paths in turn."""
    raise_open_files(n + 1024)
    return list(await asyncio.gather(*(request(port, paths[i % len(paths)], timeout_s, headers,
                                               first_event=paths[i % len(paths)].startswith("/events"))
                                       for i in range(n))))


class SlowClients:
    """``idle`` connections that send nothing and ``trickle`` ones that send a byte a second;
    each connects again as soon as the server lets it go, until ``stop``."""

    def __init__(self, port: int, idle: int, trickle: int) -> None:
        self.port, self.idle, self.trickle = port, idle, trickle
        self.open = 0
        self.cut: list[float] = []  # how long the server held each connection it let go
        self.connect_failures = 0
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        raise_open_files(self.idle + self.trickle + 1024)
        self._tasks = [asyncio.ensure_future(self._one(i >= self.idle)) for i in range(self.idle + self.trickle)]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _one(self, trickle: bool) -> None:
        while not self._stop.is_set():
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, self.port), 10)
            except (OSError, TimeoutError):
                self.connect_failures += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), 0.2)
                continue
            self.open += 1
            since = time.monotonic()
            reading = asyncio.ensure_future(reader.read())  # whatever the server says, to its end
            stopping = asyncio.ensure_future(self._stop.wait())
            try:
                sent = 0
                while not reading.done() and not self._stop.is_set():
                    if trickle and sent < len(SLOW_HEAD):
                        writer.write(SLOW_HEAD[sent:sent + 1])
                        sent += 1
                    await asyncio.wait([reading, stopping], timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
                if reading.done():
                    self.cut.append(time.monotonic() - since)
            except OSError:
                self.cut.append(time.monotonic() - since)
            finally:
                self.open -= 1
                stopping.cancel()
                reading.cancel()
                writer.close()


class Prober:
    """Times ``path`` on a blocking socket, on a thread of its own, until stopped."""

    def __init__(self, port: int, path: str = "/readyz", period_s: float = 0.02, timeout_s: float = 30) -> None:
        self.port, self.path, self.period_s, self.timeout_s = port, path, period_s, timeout_s
        self.outcomes: list[Outcome] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="prober", daemon=True)

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(self.timeout_s + 5)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.outcomes.append(probe(self.port, self.path, self.timeout_s))
            self._stop.wait(self.period_s)


def probe(port: int, path: str, timeout_s: float) -> Outcome:
    start = time.perf_counter()
    data = b""
    try:
        with socket.create_connection((HOST, port), timeout=timeout_s) as s:
            s.sendall(request_bytes(path))
            while chunk := s.recv(65536):
                data += chunk
    except OSError as exc:
        if parse_response(data) is None:
            return Outcome(path, None, _failure(exc), time.perf_counter() - start)
    parsed = parse_response(data)
    if parsed is None:
        return Outcome(path, None, "closed", time.perf_counter() - start)
    return Outcome(path, parsed[0], None, time.perf_counter() - start, parsed[1], parsed[2])


async def hold_streams(port: int, n: int, events: int, timeout_s: float) -> list[int]:
    """``n`` event streams held open at once, each read until it has seen ``events`` events
    (or ``timeout_s``); how many each saw."""
    raise_open_files(n + 1024)

    async def one() -> int:
        seen = 0
        writer = None
        try:
            async with asyncio.timeout(timeout_s):
                reader, writer = await asyncio.open_connection(HOST, port)
                writer.write(request_bytes("/events"))
                data = b""
                while seen < events and (chunk := await reader.read(65536)):
                    data += chunk
                    seen = data.partition(b"\r\n\r\n")[2].count(b"data: ")
        except (OSError, TimeoutError):
            pass
        finally:
            if writer is not None:
                writer.close()
        return seen

    return list(await asyncio.gather(*(one() for _ in range(n))))


async def until(cond: Callable[[], object], timeout_s: float, what: str) -> None:
    """Wait on the running loop until ``cond()`` holds; past ``timeout_s``, TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        await asyncio.sleep(0.05)


def tally(outcomes: Sequence[Outcome]) -> Counter[str]:
    """How many got each status, and how many failed each way."""
    return Counter(str(o.status) if o.status is not None else o.failure or "?" for o in outcomes)


def latency(outcomes: Sequence[Outcome]) -> dict[str, float]:
    """p50, p99 and max seconds of the answered ones."""
    times = sorted(o.seconds for o in outcomes if o.status is not None)
    if not times:
        return {"n": 0}
    q = statistics.quantiles(times, n=100, method="inclusive") if len(times) > 1 else [times[0]] * 99
    return {"n": len(times), "p50": round(q[49], 4), "p99": round(q[98], 4), "max": round(times[-1], 4)}


@contextlib.contextmanager
def loop_in_thread() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop on a thread of its own, for tests that also block on other things."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="crowd-loop", daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
