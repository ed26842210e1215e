"""One HTTP port per daemon: Prometheus metrics, the probes, and the committed store as JSON.

    /metrics                      Prometheus text (what --metrics-port always served)
    /healthz                      200 while the process and its query are alive
    /readyz                       200 when active with its query running, or a standby
    /api/status                   role, batch, input lag, restore progress
    /api/counts, /api/top?n=10    drink-count's store (``service.drink_count.http``)
    /api/windows?key=&from=&to=   the windows store's open windows (``service.windows.http``)

An instance that runs none of the tasks (a standby) forwards the data paths to the one that
runs them, and answers itself only when that one does not (``ops.forward``).

The paths under /api/ beside /api/status are the pipeline's own: its wing brings them
(``engine.contract.Pipeline.routes``), and this module names no pipeline.

The store is attached once the runner has it open and locked, and detached before it is
closed; the API answers 503 until then. Its data paths answer only from a store the runner
has declared whole, on an instance that serves (``instance.health.data_refusal``), and 503
with Retry-After otherwise; /api/status answers in every phase, naming it. With a bearer
token (``--http-token-file``)
everything but the probes asks for it; probes stay open because Kubernetes and load
balancers call them bare, and they say nothing but the phase. Without a token, binding
beyond loopback is refused unless ``--http-insecure``. Nothing secret is ever in a body.

The server is ``ops.httpd`` (why there, and not a package: its docstring): a crowd waits in a
deep listen backlog and on one event loop, not on a thread per connection; a slow client is
let go after HEAD_TIMEOUT_S; the probes are answered on a lane of their own, so they never
wait behind a store read or the metrics; identical requests at once (a dashboard wall, a
Prometheus fleet) share one store read or one rendering; past the lanes' bounds a request is
answered 503 with Retry-After, never dropped.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import hmac
import ipaddress
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from http import HTTPStatus
from pathlib import Path
from urllib.parse import parse_qs

import orjson
from prometheus_client import Gauge
from prometheus_client.exposition import choose_encoder

from restorer.codec import RESERVED, decode_entries
from restorer.store import Store
from service.instance.health import STANDBY, Health, data_refusal, liveness, readiness
from service.ops.forward import FORWARDED_HEADER, forward
from service.ops.httpd import RETRY_AFTER_S, HttpServer, Lane, Request, Response
from service.ops.metrics import Metrics
from service.ops.queries import BadQuery, Owner, Route, find_route, labelled, status_answer
from topics.errors import BrewError

log = logging.getLogger("brewstream")

# Store reads and metrics renderings waiting or running at once; one more is answered 503.
MAX_WAITING = 256
# On every 503 of the port: a phase that passes, or a store not yet whole.
RETRY = (("Retry-After", str(RETRY_AFTER_S)),)


def routes(pipeline_routes: Mapping[str, Route], input_topic: str, metrics: Metrics) -> dict[str, Route]:
    """The API paths of one pipeline: /api/status, and those its wing brings."""
    def status(store: Store) -> dict[str, object]:
        # Only the reserved keys: a snapshot of the batch without reading every drink or window.
        state = decode_entries(store.scan(RESERVED))
        return status_answer(state, input_topic, _by_partition(metrics.input_lag),
                             _by_partition(metrics.restore_remaining), time.time())

    return {"/api/status": Route((), lambda _params: status, any_phase=True), **pipeline_routes}


def _by_partition(gauge: Gauge) -> dict[str, float]:
    """A per-partition gauge's current values, by partition."""
    return {s.labels["partition"]: s.value for family in gauge.collect() for s in family.samples
            if "partition" in s.labels}


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost, or "" (every interface)


def bind_problem(host: str, has_token: bool, insecure: bool) -> str | None:
    """Why serving on ``host`` is refused, or None."""
    if is_loopback(host) or has_token or insecure:
        return None
    return (f"refusing to serve the HTTP API on {host or 'every interface'} without a token: pass "
            "--http-token-file FILE, or --http-insecure to serve it to anyone who can reach the port")


def read_token(path: Path) -> str:
    try:
        token = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise BrewError(f"cannot read the HTTP token file {path}: "
                        f"{getattr(exc, 'strerror', None) or 'not text'}") from None
    if not token or any(c.isspace() for c in token):
        raise BrewError(f"the HTTP token file {path} must hold one token, without spaces")
    return token


class HttpApi:
    """The daemon's HTTP server, on a thread of its own until ``stop``."""

    def __init__(self, host: str, port: int, pipeline: str, input_topic: str, pipeline_routes: Mapping[str, Route],
                 metrics: Metrics, health: Health, token: str | None = None) -> None:
        self.pipeline, self.metrics, self.health = pipeline, metrics, health
        self.routes = routes(pipeline_routes, input_topic, metrics)
        self._token = token.encode() if token else None
        self._store: Store | None = None
        self._whole = False  # the attached store is whole (``whole``)
        # Who answers: this instance's name and its lease's generation (set by the daemon
        # once it has a lease); ``queries.labelled`` says what each answer carries.
        self.owner: Callable[[], Owner] | None = None
        # Where the instance that runs the tasks answers, while this one runs none of them
        # (set by the daemon): data queries go there first (``ops.forward``).
        self.peer: Callable[[], str | None] | None = None
        # Held while a request reads the store, and to detach it: the store is never closed
        # under a reader.
        self._store_lock = threading.Lock()
        # A probe may ask Spark whether the query runs: on a lane of its own, never behind
        # the store or the metrics. Store reads and renderings share the other.
        self._probes = Lane("http-probe", 1, MAX_WAITING)
        self._work = Lane("http-work", 2, MAX_WAITING)
        # Forwards wait on another instance (up to FORWARD_TIMEOUT_S when it is paused): on a
        # lane of their own, so they never hold up this instance's own reads.
        self._forwards = Lane("http-forward", 8, MAX_WAITING)
        try:
            self._server = HttpServer(host, port, self._handle, "http-api", "brewstream")
        except OSError as exc:
            hint = "the port is in use" if exc.errno == errno.EADDRINUSE else exc.strerror or str(exc)
            raise BrewError(f"cannot serve HTTP on {host}:{port} ({hint}); pick another --http-port") from None
        self.port = self._server.port
        self._server.start()
        log.info("HTTP on http://%s:%d (/metrics /healthz /readyz %s)", host, self.port, " ".join(self.routes))

    def attach(self, store: Store) -> None:
        """Serve ``store``: /api/status at once, the data paths once it is ``whole``."""
        with self._store_lock:
            self._store, self._whole = store, False

    def whole(self, store: Store) -> None:
        """The runner says ``store`` holds what its changelog holds (``engine.runner.OpenStore``)."""
        with self._store_lock:
            self._whole = self._store is store

    def detach(self) -> None:
        with self._store_lock:
            self._store, self._whole = None, False

    def stop(self) -> None:
        self.detach()
        self._server.stop()
        self._probes.close()
        self._work.close()
        self._forwards.close()

    # ---------------------------------------------------------------- answering

    def authorized(self, header: str | None) -> bool:
        if self._token is None:
            return True
        scheme, _, given = (header or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self._token)

    def answer(self, route: Route, query: str, rest: str = "") -> tuple[HTTPStatus, dict[str, object]]:
        try:
            read = route.prepare(route.params_of(query, rest))
        except BadQuery as exc:
            return HTTPStatus.BAD_REQUEST, {"error": str(exc)}
        phase = self.health.phase
        with self._store_lock:
            store = self._store
            why = "the store is not open yet" if store is None else \
                None if route.any_phase else data_refusal(phase, self._whole)
            if store is None or why is not None:
                return HTTPStatus.SERVICE_UNAVAILABLE, {"error": f"not serving the store: {why}"}
            try:
                body = read(store)
            except Exception as exc:  # a store that cannot be read now; the daemon says why in its log
                log.warning("the HTTP API could not read the store: %s", exc)
                return HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"cannot read the store ({type(exc).__name__})"}
        owner = None if self.owner is None else self.owner()
        lag = _by_partition(self.metrics.restore_remaining)
        return HTTPStatus.OK, {"pipeline": self.pipeline, "role": phase.name,
                               **labelled(body, phase.name == STANDBY, owner, lag)}

    def forwarded(self, route: Route, query: str, rest: str, address: str, target: str,
                  authorization: str | None) -> tuple[HTTPStatus, dict[str, object]] | str:
        """The owner's answer to a data query (``ops.forward``), or why there is none. A bad
        query is refused here, never sent on."""
        try:
            route.prepare(route.params_of(query, rest))
        except BadQuery as exc:
            return HTTPStatus.BAD_REQUEST, {"error": str(exc)}
        me = "" if self.owner is None else self.owner().instance
        got = forward(address, target, authorization, me)
        if isinstance(got, str):
            return got
        return HTTPStatus.OK, {**got.doc, "forwarded_by": me}

    def probe(self, path: str) -> Response:
        ok, text = (liveness if path == "/healthz" else readiness)(self.health.phase)
        if ok:
            return Response(HTTPStatus.OK, (text + "\n").encode())
        return Response(HTTPStatus.SERVICE_UNAVAILABLE, (text + "\n").encode(), headers=RETRY)

    async def _handle(self, request: Request) -> Response:
        path, query = request.path, request.query
        if path in ("/healthz", "/readyz"):
            return await self._probes.run(path, lambda: self.probe(path))
        route, rest = find_route(self.routes, path)
        if route is None and path != "/metrics":
            return Response(HTTPStatus.NOT_FOUND,
                            f"not found: {path[:80]}; see /api/status, /metrics, /healthz\n".encode())
        if not self.authorized(request.headers.get("Authorization")):
            return Response(HTTPStatus.UNAUTHORIZED, b"a bearer token is required\n",
                            headers=(("WWW-Authenticate", 'Bearer realm="brewstream"'),))
        if route is None:
            return await self._metrics(request)
        # Forwarded once at most (``ops.forward``): a request another instance sent on is answered here.
        sent_on = request.headers.get(FORWARDED_HEADER) is not None
        address = None if sent_on or route.any_phase or self.peer is None else self.peer()
        failed: str | None = None
        if address is not None:
            auth = request.headers.get("Authorization")
            got = await self._forwards.run(("forward", address, request.target),
                                           lambda: self.forwarded(route, query, rest, address, request.target, auth))
            if not isinstance(got, str):
                return _json(*got)
            failed = got
        status, doc = await self._work.run(("api", path, query), lambda: self.answer(route, query, rest))
        return _json(status, doc if failed is None else {**doc, "forward_failed": failed})

    async def _metrics(self, request: Request) -> Response:
        # As prometheus_client's own server did: OpenMetrics when asked for, gzip when
        # accepted, only some families with ?name[]=…
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        names = tuple(parse_qs(request.query).get("name[]", ()))
        zipped = "gzip" in request.headers.get("Accept-Encoding", "")
        registry = self.metrics.registry

        def render() -> bytes:
            body = encoder(registry.restricted_registry(list(names)) if names else registry)
            return gzip.compress(body) if zipped else body

        body = await self._work.run(("metrics", content_type, names, zipped), render)
        return Response(HTTPStatus.OK, body, content_type, (("Content-Encoding", "gzip"),) if zipped else ())


def _json(status: HTTPStatus, doc: Mapping[str, object]) -> Response:
    return Response(status, orjson.dumps(doc) + b"\n", "application/json",
                    RETRY if status == HTTPStatus.SERVICE_UNAVAILABLE else ())


def serve_http(host: str, port: int | None, pipeline: str, input_topic: str, pipeline_routes: Mapping[str, Route],
               metrics: Metrics, health: Health, token_file: Path | None = None,
               insecure: bool = False) -> HttpApi | None:
    """The daemon's server when a port was asked for; refuses an unsafe bind in one line."""
    if port is None:
        return None
    problem = bind_problem(host, token_file is not None, insecure)
    if problem:
        raise BrewError(problem)
    return HttpApi(host, port, pipeline, input_topic, pipeline_routes, metrics, health,
                   read_token(token_file) if token_file is not None else None)


@contextlib.contextmanager
def serving(api: HttpApi | None, store: Store) -> Iterator[None]:
    """The API reads ``store`` inside this block only (the store closes after it)."""
    if api is None:
        yield
        return
    api.attach(store)
    try:
        yield
    finally:
        api.detach()
