"""The pipeline contract: what a pipeline brings to the engine, and the flags every
pipeline shares. The engine names no pipeline; each wing (``service.drink_count``,
``service.windows``) fills these in, and ``service.pipelines`` registers it once.

- ``Wing``: a pipeline as every command sees it, running or not: its name, its input and
  changelog topics, its store's value check, its default state dir.
- ``Pipeline``: a pipeline as the daemon runs it: its topics resolved, its sink and reporter,
  the module its Python workers import, its HTTP routes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from restorer.tasks import BY_WHOLE_KEY, Routing
from service.engine.defaults import CHANGELOG_CHECK_S, DEFAULT_MAX_OFFSETS_PER_TRIGGER, DEFAULT_TRIGGER_S
from service.instance.lease import LEASE_INTERVAL_S, TAKEOVER_TIMEOUT_S, ActiveProof
from service.records.limits import MAX_NAME_BYTES
from topics.catalog import DEFAULT_TOPICS, Topics
from topics.errors import BrewError
from topics.kafka import KafkaConnection

if TYPE_CHECKING:  # what only the annotations name: the CLI imports this module at start
    import threading

    from pyspark.sql import DataFrame, SparkSession

    from restorer.changelog import ChangelogWriter
    from restorer.faults import FaultPlan
    from restorer.reader import ValueCheck
    from restorer.store import Store
    from service.engine.sink import SinkOptions
    from service.ops.metrics import Metrics
    from service.ops.queries import Route


class CountsView(Protocol):
    """What ``brewstream counts`` prints of a store."""

    def as_json(self) -> dict[str, object]: ...

    def text(self, top_n: int | None) -> str: ...


@dataclass(frozen=True)
class Wing:
    """A pipeline as every command sees it: ``restore --store``, ``status``, the board."""

    name: str
    input_topic: Callable[[Topics], str]
    changelog_topic: Callable[[Topics], str]
    check_value: ValueCheck  # why a changelog value cannot belong to its key (the restorer asks)
    # ``brewstream counts`` on its store (every key and value of it); None: not for this store.
    counts: Callable[[Iterable[tuple[bytes, bytes]]], CountsView] | None = None
    # Its other inputs, whose offsets its store keeps beside the input's (``status`` shows their lag).
    side_inputs: Callable[[Topics], tuple[str, ...]] = field(default=lambda _topics: ())
    # Which part of a store key decides its task, so its changelog partition (``restorer.tasks``).
    routing: Routing = BY_WHOLE_KEY
    # Where its refused records go, and, when ``dlq replay`` cannot send them back, why not.
    dlq_topic: Callable[[Topics], str] = field(default=attrgetter("dlq"))
    no_replay: str | None = None

    @property
    def default_state_dir(self) -> Path:
        return Path("state") / self.name

    @property
    def default_checkpoint_dir(self) -> Path:
        return Path("state") / "checkpoints" / self.name


@dataclass(frozen=True)
class RunConfig:
    """The flags every pipeline shares."""

    conn: KafkaConnection
    state_dir: Path
    checkpoint_dir: Path
    trigger_s: float = DEFAULT_TRIGGER_S
    max_offsets_per_trigger: int | None = DEFAULT_MAX_OFFSETS_PER_TRIGGER
    available_now: bool = False
    master: str = "local[*]"
    auto_restore: bool = True
    instance: str | None = None
    topics: Topics = DEFAULT_TOPICS
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None
    max_name_bytes: int = MAX_NAME_BYTES
    accept_changelog_loss: bool = False
    accept_input_loss: bool = False
    lease_interval_s: float = LEASE_INTERVAL_S
    takeover_timeout_s: float = TAKEOVER_TIMEOUT_S
    standby: bool = False
    http_token_file: Path | None = None
    http_insecure: bool = False
    spark_conf: dict[str, str] = field(default_factory=dict)  # the user's --conf: wins over every other source
    min_partitions: int | None = None  # Spark's Kafka minPartitions: tasks per batch, at least
    changelog_check_s: float = CHANGELOG_CHECK_S  # how often the changelog's settings are asked
    http_advertise: str | None = None  # HOST:PORT other instances forward queries to (``ops.forward``)
    shuffle: bool = False  # through a repartition topic (``service.shuffle``), where the pipeline has one


class BatchSink(Protocol):
    """A foreachBatch function that can be told to stop taking batches."""

    failure: BaseException | None
    seq: int

    def __call__(self, df: DataFrame, batch_id: int) -> None: ...

    def close(self, timeout_s: float = -1) -> bool: ...

    def retry(self) -> None: ...

    def fence(self, reason: str) -> None: ...

    def stop_with(self, failure: BrewError) -> None: ...

    def computing(self) -> bool: ...

    @property
    def fenced(self) -> bool: ...


class InputStage(Protocol):
    """A shuffle's input stage (``service.shuffle``): the query over the source topic that
    hands each task its share through the repartition topic, which the pipeline's own query
    then reads as its input. One per active spell: ``start`` fences the last one."""

    def start(self, spark: SparkSession, store: Store, metrics: Metrics | None = None) -> None: ...

    def run_to_end(self, stop: threading.Event) -> None:
        """Available-now: until it has handed on the source's backlog (or ``stop``)."""

    def check(self) -> None:
        """Raise what stopped it: its own refusal (a ``BrewError``), Kafka's trouble
        (``KafkaUnavailable``), or any other failure as a ``BrewError`` in one line."""

    def stop(self) -> None: ...


@dataclass(frozen=True)
class Shuffled:
    """A pipeline behind a shuffle: what its input stage reads, and a new stage for each
    active spell."""

    source_topic: str
    new_stage: Callable[[], InputStage]


class Reporter(Protocol):
    """What a pipeline shows while it runs (the top-N board, the windows table)."""

    def start(self) -> None: ...

    def stop(self, final_flush: bool = True) -> None: ...


@dataclass(frozen=True)
class Pipeline:
    """A pipeline as the daemon runs it (``engine.runner.run_pipeline``), its topics resolved."""

    wing: Wing
    input_topic: str
    changelog_topic: str
    dlq_topic: str
    output_topics: tuple[str, ...]
    make_sink: Callable[[Store, ChangelogWriter, FaultPlan, Metrics, SinkOptions], BatchSink]
    # The reporter publishes only while the last argument says so (``Lease.proven_active``).
    make_reporter: Callable[[Store, BatchSink, Metrics, ActiveProof], Reporter]
    batch_module: str  # what the Python workers run; imported before the first batch
    dry_run: Callable[[DataFrame], object]  # a batch's work over its source, committing nothing (warm-up)
    routes: Mapping[str, Route] = field(default_factory=dict)  # its HTTP paths, beside /api/status
    start_when_empty: str = "earliest"  # or "latest": where a brand-new store starts reading
    reader_options: dict[str, str] = field(default_factory=dict)
    # What would make this pipeline refuse its store as active (a BrewError saying so), checked
    # without writing anything: by an active once its store is up to date, before ``prepare``,
    # and by a standby as soon as its store holds the changelog's state. One rule at both
    # points, so a standby that could never take over (other window flags) refuses at its
    # start, not at the takeover.
    check: Callable[[Store], object] | None = None
    # Then, once this instance is the changelog's only writer, before Spark starts: may
    # commit a repair through ``restorer.commit``.
    prepare: Callable[[Store, ChangelogWriter], object] | None = None
    # Behind a shuffle (``run --shuffle``): ``input_topic`` is the repartition topic.
    shuffled: Shuffled | None = None

    @property
    def source_topic(self) -> str:
        """Where its records come from: its input, or its input stage's source."""
        return self.shuffled.source_topic if self.shuffled is not None else self.input_topic

    @property
    def name(self) -> str:
        return self.wing.name

    @property
    def check_value(self) -> ValueCheck:
        return self.wing.check_value
