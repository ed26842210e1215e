"""How every part of brewstream talks to Kafka: one connection description, many clients.

Every client (admin, producers, consumers, Spark's source) is built from the same
``KafkaConnection`` so that security settings given once reach all of them.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from topics.auth import Refusal, from_librdkafka
from topics.errors import BrewError, KafkaRefused, KafkaUnavailable
from topics.kafka_config import (
    BOOTSTRAP_SERVERS,
    SASL_MECHANISMS,
    ConfigError,
    check_owned_settings,
    choose_bootstrap,
    hide_values,
    java_options,
    librdkafka_properties,
    load_properties,
    names_in,
)
from topics.retention import deletes_records

DEFAULT_BOOTSTRAP = "localhost:19092"
METADATA_TIMEOUT_S = 5.0
# How long one request to one broker may go unanswered before a client gives that
# connection up and asks the cluster again where to go (librdkafka's socket.timeout.ms, the
# Java clients' request.timeout.ms in Spark's source): a paused broker, or one behind a
# network that swallows packets, costs this long, not the clients' defaults of 30-60 s.
REQUEST_TIMEOUT_S = 10.0
# The wait of every read that ends at end offsets it took first. consume(n, wait) returns
# once it holds n messages or once the wait has passed, and poll(wait) once one message
# came or the wait passed; neither ends early at the end of a partition, nor after the
# transaction marker a read_committed reader never sees. With a long wait, every read's
# tail (a short changelog catch-up, a takeover, a standby's follow, a DLQ listing) lasted
# the whole wait; a short one only costs an empty turn of the loop while the broker has
# nothing more.
POLL_WAIT_S = 0.02

log = logging.getLogger("brewstream")
# librdkafka logs every failed connection attempt, and a fenced producer at level 0; the
# CLI reports broker trouble itself, in one line, so the library's own lines go to a
# logger that shows them only under --log-level debug.
_KAFKA_LOG = logging.getLogger("brewstream.librdkafka")
_KAFKA_LOG.setLevel(logging.CRITICAL + 1)


def show_client_logs(on: bool) -> None:
    """Let librdkafka's own lines through (``--log-level debug``)."""
    _KAFKA_LOG.setLevel(logging.DEBUG if on else logging.CRITICAL + 1)

_QUIET = {"logger": _KAFKA_LOG}
# A broker with auto.create.topics.enable=true creates a topic that a client merely asks
# about by name (librdkafka's producers and admin clients ask so by default): `run` or
# `topics describe` against a missing topic created it with the broker's defaults, a
# changelog among them as cleanup.policy=delete. Topics are brewstream's to create, with
# their settings (`brewstream topics create`); a missing one is named as missing.
_NO_AUTO_CREATE = {"allow.auto.create.topics": False}

# librdkafka's timeouts for every request but a produce (socket.timeout.ms, 60 s by
# default) and for a produce (request.timeout.ms, 30 s): the longest a client waits on a
# broker that stopped answering (paused, or behind a network that swallows packets) before
# it drops the connection and asks the cluster again. A --kafka-config file may set others.
_TIMEOUTS = {"socket.timeout.ms": int(REQUEST_TIMEOUT_S * 1000)}
_PRODUCE_TIMEOUT = {"request.timeout.ms": int(REQUEST_TIMEOUT_S * 1000)}

# Readers here assign partitions themselves and never commit, so they join no group;
# librdkafka still wants a group.id to be set.
_READER = {"group.id": "brewstream-reader", "enable.auto.commit": False}


# How long what a client's error callback said about a refusal (``Refusals``) explains a
# later failure of the same connection: a request that fails on it waits up to a few
# timeouts, and its client's callbacks are served only after that.
REFUSAL_RECENT_S = 30.0


class Refusals:
    """What the error callbacks of one connection's clients said about Kafka refusing them
    (``topics.auth``): librdkafka fails the request itself as a mere transport failure, and
    says why (a failed login, a certificate it cannot verify) only there."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: tuple[Refusal, float] | None = None

    def __call__(self, err: KafkaError) -> None:
        refusal = from_librdkafka(err.code(), err.str())
        if refusal is not None:
            with self._lock:
                self._last = (refusal, time.monotonic())

    def recent(self, within_s: float = REFUSAL_RECENT_S) -> Refusal | None:
        with self._lock:
            last = self._last
        return last[0] if last is not None and time.monotonic() - last[1] <= within_s else None

    def __reduce__(self) -> tuple[type[Refusals], tuple[()]]:
        return Refusals, ()  # a copy starts with nothing heard (and no lock to copy)


@dataclass(frozen=True)
class KafkaConnection:
    bootstrap: str = DEFAULT_BOOTSTRAP
    # Raw --kafka-config properties: secrets, so kept out of repr and thus out of logs.
    properties: Mapping[str, str] = field(default_factory=dict, repr=False)
    config_file: Path | None = None  # handed on to child processes (drills)
    refusals: Refusals = field(default_factory=Refusals, repr=False, compare=False)

    @classmethod
    def from_file(cls, bootstrap: str | None, config_file: Path | None,
                  given_as: str = "--bootstrap") -> KafkaConnection:
        """``bootstrap`` None: not given, so the file's bootstrap.servers or the default."""
        props = load_properties(config_file) if config_file is not None else {}
        hide_values(props)
        check_owned_settings(props, config_file)
        check_client_settings(props, config_file)
        chosen = choose_bootstrap(bootstrap, given_as, props.pop(BOOTSTRAP_SERVERS, None), config_file,
                                  DEFAULT_BOOTSTRAP)
        return cls(chosen, props, config_file)

    def config(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return {**_QUIET, **_NO_AUTO_CREATE, "error_cb": self.refusals, **_TIMEOUTS,
                **librdkafka_properties(dict(self.properties)), **(overrides or {}),
                "bootstrap.servers": self.bootstrap}

    def refused(self, exc: KafkaException | None = None, client: AdminClient | Producer | None = None,
                name: str = "") -> KafkaRefused | None:
        """Kafka refusing this connection's clients, as one line naming what to check, or None:
        ``exc`` itself (an ACL's refusal of the resource ``name``), or what a client's error
        callback said lately (``client``'s queued callbacks are served first: a failed
        request's are still there)."""
        err = exc.args[0] if exc is not None and exc.args else None
        refusal = from_librdkafka(err.code(), err.str()) if isinstance(err, KafkaError) else None
        if refusal is not None and name:
            refusal = replace(refusal, name=name)
        if refusal is None:
            if client is not None:
                client.poll(0)
            refusal = self.refusals.recent()
        if refusal is None:
            return None
        return KafkaRefused(refusal.line(self.bootstrap, str(self.config_file or "the Kafka client settings")))

    def admin(self) -> AdminClient:
        return AdminClient(self.config())

    def producer(self, overrides: Mapping[str, Any] | None = None) -> Producer:
        own = {k: v for k, v in _PRODUCE_TIMEOUT.items() if k not in self.properties}  # the file's wins
        return Producer(self.config({**own, **(overrides or {})}))

    def consumer(self, overrides: Mapping[str, Any] | None = None) -> Consumer:
        return Consumer(self.config({**_READER, **(overrides or {})}))

    def spark_options(self) -> dict[str, str]:
        """The same settings as options for Spark's Kafka source (``kafka.`` prefixed)."""
        opts = {f"kafka.{k}": v for k, v in java_options(dict(self.properties)).items()}
        opts["kafka.bootstrap.servers"] = self.bootstrap
        return opts

    def cli_args(self) -> list[str]:
        """The flags that give a child ``brewstream`` process this same connection."""
        args = ["--bootstrap", self.bootstrap]
        return args + (["--kafka-config", str(self.config_file)] if self.config_file else [])


def admin_client(bootstrap: str) -> AdminClient:
    return KafkaConnection(bootstrap).admin()


def require_broker(conn: KafkaConnection, timeout: float = METADATA_TIMEOUT_S) -> None:
    """Fail fast, in one line, when the broker cannot be reached or refuses this client."""
    admin = conn.admin()
    try:
        admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise _unreachable(conn, exc, admin) from None


def _unreachable(conn: KafkaConnection, exc: KafkaException, admin: AdminClient | None = None) -> BrewError:
    err = exc.args[0] if exc.args else None
    if isinstance(err, KafkaError) and err.code() == KafkaError._INVALID_ARG:
        # A client refused its settings before it tried any broker (its text may quote a value).
        where = conn.config_file or "the client settings"
        return BrewError(f"configuration error: a Kafka client refuses the settings of {where}; check its keys "
                         "and values (not shown)")
    refused = conn.refused(exc, admin)  # reachable, but refusing the login, the certificate, a permission
    if refused is not None:
        return refused
    return KafkaUnavailable(f"cannot reach Kafka at {conn.bootstrap} ({_reason(exc)}); "
                            "start it with `brewstream sandbox up` or pass --bootstrap")


# What a cluster answers while it heals: a broker down or unreachable, a partition whose
# leader is being elected, a coordinator moving, too few in-sync replicas. Each passes by
# itself once the cluster's own elections and timeouts have run.
TRANSIENT = frozenset({
    KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT, KafkaError._MSG_TIMED_OUT,
    KafkaError._TIMED_OUT_QUEUE, KafkaError._WAIT_COORD, KafkaError._RESOLVE, KafkaError._UNKNOWN_BROKER,
    KafkaError._NODE_UPDATE, KafkaError._WAIT_CACHE,
    # A request that was in flight to a broker whose handle librdkafka tore down as the
    # broker left the cluster's metadata (seen as a node of three was killed): the next
    # request goes to the brokers it knows now.
    KafkaError._DESTROY_BROKER,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.REQUEST_TIMED_OUT, KafkaError.NETWORK_EXCEPTION,
    KafkaError.KAFKA_STORAGE_ERROR, KafkaError.NOT_CONTROLLER, KafkaError.BROKER_NOT_AVAILABLE,
    KafkaError.REPLICA_NOT_AVAILABLE, KafkaError.CONCURRENT_TRANSACTIONS, KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.THROTTLING_QUOTA_EXCEEDED,
})


def is_transient(err: KafkaError) -> bool:
    """An error a healing cluster stops giving (``TRANSIENT``, or one librdkafka calls
    retriable); never a fatal one (a fenced producer is not transient)."""
    return not err.fatal() and (err.code() in TRANSIENT or bool(err.retriable()))


def failed(conn: KafkaConnection, what: str, exc: KafkaException,
           client: AdminClient | Producer | None = None) -> BrewError:
    """``what`` failed on ``exc``: as ``KafkaRefused`` when Kafka refuses this client
    (``KafkaConnection.refused``, asked first: a refused login fails requests with transient
    codes), as ``KafkaUnavailable`` when the cluster heals (``unavailable``), else with
    Kafka's own reason."""
    refused = conn.refused(exc, client)
    if refused is not None:
        return KafkaRefused(f"{what}: {refused}")
    err = exc.args[0] if exc.args else None
    reason = err.str() if isinstance(err, KafkaError) else str(exc)
    return unavailable(what, exc) or BrewError(f"{what}: {reason}")


def unavailable(what: str, exc: KafkaException) -> KafkaUnavailable | None:
    """``exc`` as ``KafkaUnavailable`` when it is transient (``what`` says what failed), else None."""
    err = exc.args[0] if exc.args else None
    if isinstance(err, KafkaError) and is_transient(err):
        return KafkaUnavailable(f"{what}: {err.str()}")
    return None


def partitions_of(conn: KafkaConnection, topic: str, timeout: float = METADATA_TIMEOUT_S) -> list[int]:
    """The topic's partition ids; a clear error when the topic does not exist."""
    return _partitions(conn, conn.admin(), topic, timeout)


def partitions_of_each(conn: KafkaConnection, topics: list[str],
                       timeout: float = METADATA_TIMEOUT_S) -> dict[str, list[int]]:
    """``partitions_of`` for every topic, asked through one client (a new client's first
    answer costs a connection and a metadata round trip: tens of milliseconds each)."""
    admin = conn.admin()
    return {topic: _partitions(conn, admin, topic, timeout) for topic in topics}


def _partitions(conn: KafkaConnection, admin: AdminClient, topic: str, timeout: float) -> list[int]:
    try:
        meta = admin.list_topics(topic=topic, timeout=timeout)
    except KafkaException as exc:
        raise _unreachable(conn, exc, admin) from None
    info = meta.topics.get(topic)
    _raise_if_refused(conn, topic, info)
    if info is None or info.error is not None or not info.partitions:
        raise BrewError(f"topic {topic} does not exist; create the topics with `brewstream topics create`")
    return sorted(info.partitions)


def _raise_if_refused(conn: KafkaConnection, topic: str, info: Any) -> None:
    """A topic's metadata that says this client may not see it: not a missing topic."""
    if info is not None and info.error is not None:
        refused = conn.refused(KafkaException(info.error), name=topic)
        if refused is not None:
            raise refused


def topic_exists(conn: KafkaConnection, topic: str, timeout: float = METADATA_TIMEOUT_S) -> bool:
    admin = conn.admin()
    try:
        meta = admin.list_topics(topic=topic, timeout=timeout)
    except KafkaException as exc:
        raise _unreachable(conn, exc, admin) from None
    info = meta.topics.get(topic)
    _raise_if_refused(conn, topic, info)
    return info is not None and info.error is None and bool(info.partitions)


# What a partition answers while its leader is being elected: for about a second after a
# broker starts (every partition at once), or when leadership moves. librdkafka does not
# mark these retriable, and a command started with the broker failed on them.
_NO_LEADER_YET = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE})
_LEADER_RETRY_S = 0.05
# One watermark request's share of the whole wait: a leader that answers does so in
# milliseconds, and one that died is asked again elsewhere (see ``watermark_retry``).
_WATERMARK_ATTEMPT_S = 2.0
AGAIN, REFRESH, CHECK = "again", "refresh", "check"
# What a client answers when its metadata cache lacks the partition: after a broker paused
# or restarted, librdkafka's cache can miss a partition the cluster has (a standby's restore
# was stopped by one). A partition the cluster really lacks (a topic deleted or shrunk) is
# told apart by asking the cluster (``CHECK``).
_MAYBE_UNKNOWN = frozenset({KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART})


def watermark_retry(err: KafkaError) -> str | None:
    """Pure: what a failed watermark request calls for. AGAIN: the partition has no leader
    yet, ask again; REFRESH: the broker the client took for the leader did not answer (it
    died, stopped or cannot be reached), so learn the leaders afresh before asking again;
    CHECK: the client does not know the partition, so ask the cluster whether it has it
    (then as REFRESH) or not (raise); None: raise it.

    librdkafka sends a watermark request to the leader its metadata cache names, and a
    consumer that does not fetch from the partition never refreshes that entry by itself:
    once the leader died, such a long-lived consumer asked the dead broker, timing out on
    every call, until the cache's periodic refresh minutes later."""
    if err.code() in _NO_LEADER_YET:
        return AGAIN
    if err.code() in _MAYBE_UNKNOWN:
        return CHECK
    return REFRESH if is_transient(err) else None


def watermarks(consumer: Consumer, topic: str, partition: int,
               timeout: float = METADATA_TIMEOUT_S) -> tuple[int, int]:
    """(low, high) of one partition; with isolation.level=read_committed, high is the LSO.

    Every watermark query goes through here: a partition without a leader yet, a leader
    that does not answer, or one the client forgot but the cluster has, is asked again
    (``watermark_retry``) until ``timeout``; past it, and on any other error, the
    ``KafkaException`` is raised (a forgotten partition's as a time-out: it is transient).
    """
    tp = TopicPartition(topic, partition)
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=max(min(left, _WATERMARK_ATTEMPT_S),
                                                                       _LEADER_RETRY_S), cached=False)
            return int(low), int(high)
        except KafkaException as exc:
            err = exc.args[0]
            action = watermark_retry(err)
            if action == CHECK:
                listed = _listed(consumer, topic, partition, deadline)  # the client's metadata learnt afresh
                if listed is False:
                    raise  # the cluster answered, and has no such partition
                if deadline - time.monotonic() <= _LEADER_RETRY_S:
                    cluster = "has it" if listed else "did not say"
                    text = f"{err.str()}, though the cluster {cluster}: its metadata has not reached this client"
                    raise KafkaException(KafkaError(KafkaError._TIMED_OUT, text)) from None
            elif action is None or deadline - time.monotonic() <= _LEADER_RETRY_S:
                raise
            elif action == REFRESH:
                with contextlib.suppress(KafkaException):
                    _learn_metadata(consumer, topic, deadline)
        time.sleep(_LEADER_RETRY_S)


def _learn_metadata(consumer: Consumer, topic: str, deadline: float) -> Any:
    """The topic's metadata asked of the cluster now (the client's cache learns it too), for
    at most a second and not past ``deadline``."""
    return consumer.list_topics(topic, timeout=max(_LEADER_RETRY_S, min(1.0, deadline - time.monotonic())))


def _listed(consumer: Consumer, topic: str, partition: int, deadline: float) -> bool | None:
    """Whether the cluster's metadata, asked now, has the partition; None when it did not answer."""
    try:
        meta = _learn_metadata(consumer, topic, deadline)
    except KafkaException:
        return None
    info = meta.topics.get(topic)
    if info is None:
        return False
    if partition in info.partitions:
        return True
    if info.error is None or info.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return False
    return None  # the topic's metadata came with an error (no leader yet, say): it cannot tell


def end_offsets(
    consumer: Consumer, topic: str, partitions: list[int], timeout: float = METADATA_TIMEOUT_S
) -> dict[int, tuple[int, int]]:
    """``watermarks`` of each partition."""
    return {p: watermarks(consumer, topic, p, timeout) for p in partitions}


def _reason(exc: KafkaException) -> str:
    err = exc.args[0] if exc.args else exc
    return str(getattr(err, "str", lambda: err)())


@dataclass(frozen=True)
class TopicShape:
    """What identifies a topic beyond its name: re-created topics get a new id."""

    topic_id: str
    partitions: int


# How long a describe keeps asking past transient errors: the request goes to one broker
# of the cluster's choosing, and one that died or stopped fails it until the client's
# metadata has moved on (seconds).
DESCRIBE_RETRY_S = 15.0


def describe_topic(conn: KafkaConnection, topic: str, timeout: float = METADATA_TIMEOUT_S,
                   retry_s: float = DESCRIBE_RETRY_S) -> TopicShape:
    """The topic's id and partition count. Transient errors are asked again for ``retry_s``,
    each time by a new client (one that learns afresh which brokers are alive), then raised
    as ``KafkaUnavailable``."""
    deadline = time.monotonic() + retry_s
    while True:
        admin = conn.admin()  # must outlive its future
        try:
            desc = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)[topic].result()
            return TopicShape(str(desc.topic_id), len(desc.partitions))
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise BrewError(f"topic {topic} does not exist; create the topics with `brewstream topics create`"
                                ) from None
            refused = conn.refused(exc, admin, topic)
            if refused is not None:
                raise refused from None
            if not is_transient(err):
                raise BrewError(f"cannot describe topic {topic}: {err.str()}") from None
            if time.monotonic() > deadline:
                raise KafkaUnavailable(f"cannot describe topic {topic}: {err.str()}") from None
        time.sleep(_DESCRIBE_BACKOFF_S)


_DESCRIBE_BACKOFF_S = 0.5


# Broker and librdkafka default for the largest record a topic takes.
DEFAULT_MAX_RECORD_BYTES = 1_000_000


def max_record_bytes(conn: KafkaConnection, topic: str, timeout: float = METADATA_TIMEOUT_S) -> int:
    """The largest record ``topic`` accepts (its max.message.bytes), or the default."""
    try:
        return int(topic_config(conn, topic, timeout)["max.message.bytes"])
    except (KafkaException, KeyError, TypeError, ValueError):
        return DEFAULT_MAX_RECORD_BYTES


def deletion_risk(conn: KafkaConnection, topic: str) -> str | None:
    """How ``topic`` would delete records by itself (``topics.retention.deletes_records``),
    or None: also when the broker does not say (no right to describe its settings)."""
    try:
        config = topic_config(conn, topic)
    except KafkaException as exc:
        log.debug("cannot read the settings of %s: %s", topic, exc)
        return None
    return deletes_records(config)


def topic_config(conn: KafkaConnection, topic: str, timeout: float = METADATA_TIMEOUT_S) -> dict[str, str]:
    """The topic's settings as the broker applies them (its own, else the broker's defaults);
    ``KafkaException`` when the broker cannot say."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = conn.admin()  # must outlive its future
    entries = admin.describe_configs([resource], request_timeout=timeout)[resource].result()
    return {name: entry.value for name, entry in entries.items() if entry.value is not None}


# A topic's min.insync.replicas when the broker will not say (no right to describe it).
_DEFAULT_MIN_ISR = 1


def serving_problem(conn: KafkaConnection, topics: Sequence[str], timeout: float = METADATA_TIMEOUT_S) -> str | None:
    """Why the cluster cannot serve reads and transactional writes of ``topics`` right now,
    or None: no broker answers, a partition has no leader, fewer replicas are in sync than
    the topic's min.insync.replicas (a produce with acks=all is refused then), or a leader
    the metadata names does not answer.

    The last one is asked of every leader itself (one watermark request a partition, by a
    client new enough to hold no stale metadata): a cluster that lost its KRaft quorum
    (two of three combined nodes down) can elect and fence nobody, so the surviving broker
    goes on naming dead brokers as leaders with every replica in sync.

    A cluster that answers but refuses this client (``topics.auth``: a login, a certificate,
    an ACL) is not one that cannot serve for now: ``KafkaRefused`` is raised, since no wait
    ends it."""
    admin = conn.admin()
    try:
        meta = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        refused = conn.refused(exc, admin)
        if refused is not None:
            raise refused from None
        return f"no broker at {conn.bootstrap} answers ({_reason(exc)})"
    for topic in topics:
        info = meta.topics.get(topic)
        if info is None:
            # A listing of every topic leaves out the ones this client may not describe:
            # asked by name, the topic's own metadata says which it is.
            with contextlib.suppress(KafkaException):
                info = admin.list_topics(topic=topic, timeout=timeout).topics.get(topic)
        _raise_if_refused(conn, topic, info)
        if info is None or info.error is not None:
            detail = f" ({info.error.str()})" if info is not None and info.error is not None else ""
            return (f"topic {topic} is not in the cluster's metadata{detail}; if it was deleted, `brewstream topics "
                    "create` makes it again")
        leaderless = sorted(p for p, part in info.partitions.items() if part.leader < 0 or part.error is not None)
        if leaderless:
            return f"{topic} partition {leaderless[0]} has no leader"
        short = [(p, len(part.isrs)) for p, part in sorted(info.partitions.items())]
        need = _min_isr(conn, topic, timeout)
        below = [(p, n) for p, n in short if n < need]
        if below:
            p, n = below[0]
            return (f"{topic} partition {p} has {n} in-sync replica{'' if n == 1 else 's'}, fewer than its "
                    f"min.insync.replicas={need}")
    return _silent_leader(conn, meta, topics)


# How long a partition leader may take to answer a watermark request in ``serving_problem``.
LEADER_ANSWER_S = 2.0


def _silent_leader(conn: KafkaConnection, meta: Any, topics: Sequence[str]) -> str | None:
    consumer = conn.consumer()
    try:
        for topic in topics:
            for p, part in sorted(meta.topics[topic].partitions.items()):
                try:
                    consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=LEADER_ANSWER_S, cached=False)
                except KafkaException as exc:
                    return f"{topic} partition {p}: its leader, node {part.leader}, cannot serve it ({_reason(exc)})"
    finally:
        consumer.close()
    return None


def cluster_trouble(conn: KafkaConnection, topics: Sequence[str], what: str) -> KafkaUnavailable | None:
    """``what`` failed or stalled: as ``KafkaUnavailable`` when the cluster cannot serve
    ``topics`` now (``serving_problem``), else None (the cause lies elsewhere)."""
    problem = serving_problem(conn, topics)
    return None if problem is None else KafkaUnavailable(f"{what}: {problem}")


def _min_isr(conn: KafkaConnection, topic: str, timeout: float) -> int:
    try:
        return int(topic_config(conn, topic, timeout).get("min.insync.replicas", _DEFAULT_MIN_ISR))
    except (KafkaException, ValueError):
        return _DEFAULT_MIN_ISR


# ---------------------------------------------------------------- the config file's settings

_SILENT = logging.getLogger("brewstream.config-check")
_SILENT.addHandler(logging.NullHandler())
_SILENT.propagate = False


def check_client_settings(props: dict[str, str], path: Path | None) -> None:
    """Refuse, naming the key and saying it is a configuration error (never the value), a
    setting librdkafka refuses or a SASL mechanism no client knows."""
    where = path or "the Kafka config"
    for key in ("sasl.mechanisms", "sasl.mechanism"):
        if key in props and props[key].strip().upper() not in SASL_MECHANISMS:
            raise ConfigError(f"configuration error in {where}: {key} is not a SASL mechanism the Kafka clients "
                              f"know ({', '.join(sorted(SASL_MECHANISMS))}); its value is not shown")
    settings = librdkafka_properties(props)
    settings.pop(BOOTSTRAP_SERVERS, None)
    reason = _refused(settings)
    if reason is None:
        return
    if settings.get("security.protocol", "").upper().startswith("SASL") and not (
            "sasl.mechanisms" in settings or "sasl.mechanism" in settings):
        raise ConfigError(f"configuration error in {where}: security.protocol asks for SASL but sasl.mechanisms is "
                          f"not set (librdkafka's default, GSSAPI, is not built in): set it to one of "
                          f"{', '.join(sorted(SASL_MECHANISMS - {'GSSAPI'}))}")
    names = names_in(reason, settings)
    if not names:  # librdkafka named nothing: find the key without which it takes the rest
        names = [k for k in sorted(settings) if _refused({n: v for n, v in settings.items() if n != k}) is None]
    if names:
        raise ConfigError(f"configuration error in {where}: librdkafka refuses {' and '.join(names)} (values are "
                          "not shown: check the keys' spelling, their values, and what they need beside them)")
    raise ConfigError(f"configuration error in {where}: librdkafka refuses these settings together "
                      f"({', '.join(sorted(settings))}); check how they combine (values are not shown)")


def _refused(settings: dict[str, str]) -> str | None:
    """librdkafka's reason for refusing ``settings`` (it may quote a value: never print it), or None."""
    try:
        Producer({**settings, "logger": _SILENT})
    except KafkaException as exc:
        return str(exc.args[0].str()) if exc.args else "refused"
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


