"""Create, delete and describe the project's topics."""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ConfigResource, ConfigSource, NewTopic

from topics.catalog import DEFAULT_TOPICS, Topics, TopicSpec
from topics.clock import wait_until
from topics.errors import BrewError
from topics.kafka import KafkaConnection, failed, partitions_of_each, require_broker, topic_exists

ADMIN_TIMEOUT_S = 30.0
# What a cluster of three or more brokers gets by default: one broker may be lost, and with
# min.insync.replicas=2 every acknowledged write is on two of them.
CLUSTER_REPLICATION_FACTOR = 3


@dataclass(frozen=True)
class TopicDescription:
    name: str
    partitions: int
    replication_factor: int
    config: dict[str, str]


def default_replication_factor(conn: KafkaConnection) -> tuple[int, int]:
    """(replication factor, live brokers): 3 on a cluster of three or more brokers, else 1."""
    require_broker(conn)
    brokers = len(conn.admin().list_topics(timeout=ADMIN_TIMEOUT_S).brokers)
    return (CLUSTER_REPLICATION_FACTOR if brokers >= CLUSTER_REPLICATION_FACTOR else 1), brokers


def kept_settings(conn: KafkaConnection, topics: Topics, name: str) -> tuple[int, dict[str, str]]:
    """The replication factor and configs a topic of ``topics`` keeps when it is re-created
    (``republish-changelog``): the existing topic's replication factor and the configs set
    on it (a cluster's tuned compaction, say) over the spec's, but its cleanup policy, which
    the spec keeps (a changelog stays compacted); for a topic that is absent, what ``topics
    create`` would give it. A cluster's changelog is never re-created with one replica
    because a flag was left out."""
    spec = topics.spec(name)
    current = next((d for d in describe_topics(conn, topics) if isinstance(d, TopicDescription) and d.name == name),
                   None)
    if current is None:
        return default_replication_factor(conn)[0], dict(spec.config)
    policy = {k: v for k, v in spec.config.items() if k == "cleanup.policy"}
    return current.replication_factor, {**spec.config, **current.config, **policy}


def create_topics(conn: KafkaConnection, partitions: int, replication_factor: int,
                  topics: Topics = DEFAULT_TOPICS, tasks: int | None = None) -> list[tuple[str, str]]:
    """Create every topic; one that already exists counts as success. The changelogs get
    ``tasks`` partitions (default: ``partitions``); an existing changelog with another count
    is refused in one line (its stores hash keys to its count: ``restorer.tasks``).

    Returns once the broker's metadata shows every topic: the controller acknowledges a
    new topic before the broker answering metadata requests knows it, and a `run` started
    just after `topics create` would be told the topic does not exist."""
    require_broker(conn)
    specs = topics.specs()
    def count(s: TopicSpec) -> int:
        return s.partitions or (tasks if s.tasks and tasks is not None else partitions)

    new = [NewTopic(s.name, num_partitions=count(s), replication_factor=replication_factor,
                    config=dict(s.config)) for s in specs]
    admin = conn.admin()  # must outlive its futures
    futures = admin.create_topics(new, request_timeout=ADMIN_TIMEOUT_S)
    outcomes = _outcomes(conn, futures, "creating", ("created", "exists"), KafkaError.TOPIC_ALREADY_EXISTS)
    names = [s.name for s in specs]
    wait_until(lambda: all(topic_exists(conn, name) for name in names), ADMIN_TIMEOUT_S,
               f"the broker's metadata to show {', '.join(names)}")
    if tasks is not None:
        changelogs = [s.name for s in specs if s.tasks]
        for name, parts in partitions_of_each(conn, changelogs).items():
            if len(parts) != tasks:
                raise TaskCountChanged(name, len(parts), tasks)
    return outcomes


class TaskCountChanged(BrewError):
    """A changelog exists with another partition count than the tasks asked for."""

    def __init__(self, topic: str, has: int, asked: int) -> None:
        self.topic, self.has, self.asked = topic, has, asked
        super().__init__(self.message(None))

    def message(self, pipeline: str | None) -> str:
        """The one line, naming the pipeline (its ``--store``) when the caller knows it."""
        store, whose = (f" --store {pipeline}", f"the {pipeline}") if pipeline else ("", "its")
        return (f"{self.topic} already exists with {self.has} partitions, so {whose} pipeline has "
                f"{self.has} tasks, not {self.asked}; stop its instances and rebuild it with "
                f"`brewstream republish-changelog{store} --partitions {self.asked}`")


def delete_topics(conn: KafkaConnection, topics: Topics = DEFAULT_TOPICS) -> list[tuple[str, str]]:
    """Delete every topic; one that does not exist counts as success."""
    require_broker(conn)
    specs = topics.specs()
    admin = conn.admin()  # must outlive its futures
    futures = admin.delete_topics([s.name for s in specs], request_timeout=ADMIN_TIMEOUT_S)
    return _outcomes(conn, futures, "deleting", ("deleted", "absent"), KafkaError.UNKNOWN_TOPIC_OR_PART)


def _outcomes(conn: KafkaConnection, futures: Mapping[str, Future[None]], doing: str, labels: tuple[str, str],
              harmless: int) -> list[tuple[str, str]]:
    """Wait for each topic's future: done, or the one error that means there was nothing to do
    (an ACL's refusal is named as one: ``topics.auth``)."""
    done, nothing_to_do = labels
    results: list[tuple[str, str]] = []
    for name, future in futures.items():
        try:
            future.result()
            results.append((name, done))
        except KafkaException as exc:
            if exc.args[0].code() != harmless:
                raise failed(conn, f"{doing} {name} failed", exc) from None
            results.append((name, nothing_to_do))
    return results


def describe_topics(conn: KafkaConnection, topics: Topics = DEFAULT_TOPICS) -> list[TopicDescription | str]:
    """Partitions, replication and the non-default configs of each topic (or 'absent')."""
    require_broker(conn)
    specs: tuple[TopicSpec, ...] = topics.specs()
    admin = conn.admin()
    meta = admin.list_topics(timeout=ADMIN_TIMEOUT_S)
    present = [s.name for s in specs if s.name in meta.topics and meta.topics[s.name].error is None]
    for spec in specs:
        if spec.name not in present:
            # Left out of the listing: absent, or one this client may not describe (asked by
            # name, an ACL's refusal says so; "absent" would send the user to create it).
            topic_exists(conn, spec.name)
    configs: dict[str, dict[str, str]] = {}
    if present:
        resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in present]
        for resource, future in admin.describe_configs(resources, request_timeout=ADMIN_TIMEOUT_S).items():
            entries = future.result()
            configs[resource.name] = {
                k: str(v.value) for k, v in entries.items()
                if v.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value and v.value is not None
            }
    out: list[TopicDescription | str] = []
    for spec in specs:
        if spec.name not in present:
            out.append(spec.name)
            continue
        parts = meta.topics[spec.name].partitions
        rf = min((len(p.replicas) for p in parts.values()), default=0)
        out.append(TopicDescription(spec.name, len(parts), rf, configs.get(spec.name, {})))
    return out
