"""Every topic brewstream reads or writes, with the settings it needs. Names are fixed."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

ORDERS = "brew.orders.v1"
CHANGELOG = "brew.drink-count-changelog"
COUNTS = "brew.drink-counts"
DLQ = "brew.orders.dlq"
EVENTS = "brew.order-events.v1"
LATE_EVENTS = "brew.order-events.late"
WINDOWS = "brew.order-windows"
WINDOWS_CHANGELOG = "brew.order-windows-changelog"
INSTANCES = "brew.instances"
DLQ_REPLAYS = "brew.orders.dlq-replays"
MENU = "brew.menu.v1"
REVENUE_CHANGELOG = "brew.revenue-changelog"
REVENUE_DLQ = "brew.revenue.dlq"
DRINK_COUNT_REPARTITION = "brew.drink-count-repartition"

# Compaction tuned to be observable on small volumes, as in the seed sandbox: segments
# roll every minute and any dirt makes a segment cleanable. Production clusters want
# much larger values; compaction is not free.
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.ms": "60000",
    "min.cleanable.dirty.ratio": "0.01",
}


# Leases: who writes each changelog. The broker stamps every announcement, so instances on
# different machines judge their age by one clock.
LEASES = {**COMPACTED, "message.timestamp.type": "LogAppendTime"}

# The menu is a versioned table: every price of a drink within the revenue pipeline's
# history retention is a version an order may still need, but compaction keeps only a
# key's latest record. A week before a record may be compacted away gives the pipeline
# (and a restore from scratch) time to read every version first.
MENU_VERSIONS = {**COMPACTED, "min.compaction.lag.ms": str(7 * 24 * 3600 * 1000)}

# A repartition topic (``restorer.repartition``): the input stage's parts, one partition per
# task. Kept until every task has applied them and they are purged, never by age or size
# (a part gone before its task applied it is lost), as Kafka Streams keeps its own.
REPARTITION = {
    "cleanup.policy": "delete",
    "retention.ms": "-1",
    "retention.bytes": "-1",
    "segment.ms": "600000",  # a purged segment is deleted whole: roll often enough to free it
}


@dataclass(frozen=True)
class TopicSpec:
    name: str
    purpose: str
    config: dict[str, str] = field(default_factory=dict)
    partitions: int | None = None  # fixed, whatever `topics create --partitions` says
    # A changelog: its partitions are the pipeline's tasks (``restorer.tasks``), as many as
    # `topics create --tasks` says.
    tasks: bool = False


ALL_TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec(ORDERS, "input orders"),
    TopicSpec(CHANGELOG, "drink-count changelog", COMPACTED, tasks=True),
    TopicSpec(COUNTS, "top-N snapshots"),
    TopicSpec(DLQ, "bad orders"),
    TopicSpec(EVENTS, "order events with event time"),
    TopicSpec(LATE_EVENTS, "events later than allowed"),
    TopicSpec(WINDOWS, "closed windows"),
    TopicSpec(WINDOWS_CHANGELOG, "window state changelog", COMPACTED, tasks=True),
    TopicSpec(INSTANCES, "which instance writes each changelog (leases)", LEASES, partitions=1),
    # `brewstream dlq replay`'s ledger: one record per DLQ record sent back, keyed by its source.
    TopicSpec(DLQ_REPLAYS, "DLQ records replayed (the replay ledger)", COMPACTED, partitions=1),
    TopicSpec(MENU, "menu: a drink's price from its event time on", MENU_VERSIONS),
    TopicSpec(REVENUE_CHANGELOG, "revenue state changelog", COMPACTED, tasks=True),
    TopicSpec(REVENUE_DLQ, "orders the revenue pipeline cannot price"),
    # `run --shuffle`'s parts, one partition per task as in the changelog.
    TopicSpec(DRINK_COUNT_REPARTITION, "drink-count shuffle: each task's parts", REPARTITION, tasks=True),
)


@dataclass(frozen=True)
class Topics:
    """The names one pipeline uses. The default prefix is empty: the fixed names above.
    A prefix runs a separate pipeline on the same cluster (drills, tests, staging)."""

    prefix: str = ""

    @property
    def orders(self) -> str:
        return self.prefix + ORDERS

    @property
    def changelog(self) -> str:
        return self.prefix + CHANGELOG

    @property
    def counts(self) -> str:
        return self.prefix + COUNTS

    @property
    def dlq(self) -> str:
        return self.prefix + DLQ

    @property
    def events(self) -> str:
        return self.prefix + EVENTS

    @property
    def late_events(self) -> str:
        return self.prefix + LATE_EVENTS

    @property
    def windows(self) -> str:
        return self.prefix + WINDOWS

    @property
    def windows_changelog(self) -> str:
        return self.prefix + WINDOWS_CHANGELOG

    @property
    def instances(self) -> str:
        return self.prefix + INSTANCES

    @property
    def dlq_replays(self) -> str:
        return self.prefix + DLQ_REPLAYS

    @property
    def menu(self) -> str:
        return self.prefix + MENU

    @property
    def revenue_changelog(self) -> str:
        return self.prefix + REVENUE_CHANGELOG

    @property
    def revenue_dlq(self) -> str:
        return self.prefix + REVENUE_DLQ

    @property
    def drink_count_repartition(self) -> str:
        return self.prefix + DRINK_COUNT_REPARTITION

    def spec(self, name: str) -> TopicSpec:
        """The spec of one of these topics, by its full name."""
        return next(s for s in self.specs() if s.name == name)

    def specs(self) -> tuple[TopicSpec, ...]:
        return tuple(replace(s, name=self.prefix + s.name) for s in ALL_TOPICS)


DEFAULT_TOPICS = Topics()
