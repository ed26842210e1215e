"""Every knob of a benchmark run, with the defaults of the full run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from service.engine.defaults import DEFAULT_TRIGGER_S

REPO = Path(__file__).resolve().parent.parent
DEFAULT_QUIX_PYTHON = REPO / ".cache" / "bench" / "quix-venv" / "bin" / "python"
DEFAULT_OUTPUT = REPO / "bench" / "results" / "latest.json"
DEFAULT_WORK = REPO / ".sandbox" / "bench"
SCENARIOS = ("ingest", "restore", "latency", "sustained", "recovery", "windows", "revenue")
# Run only when named in --scenarios: it starts a Spark cluster and adds about ten minutes.
OPTIONAL_SCENARIOS = ("scaling",)
# The one scenario that starts no Spark: it reads the changelog back into a store.
SPARK_FREE = ("restore",)
# The systems under test: brewstream, the plain consumer (the limit), Quix Streams, Kafka
# Streams and Spark's own stateful aggregation. Each scenario runs those it applies to.
SYSTEMS = ("ours", "plain", "quix", "kstreams", "spark")


@dataclass(frozen=True)
class OursSweep:
    """The brewstream settings tried on the ingest backlog before the repetitions."""

    caps: tuple[int | None, ...] = (None, 250_000)  # --max-offsets-per-trigger; None: no cap
    masters: tuple[str, ...] = ("local[*]", "local[3]")


@dataclass(frozen=True)
class BenchConfig:
    orders: int = 1_000_000
    reps: int = 3
    seed: int = 42
    partitions: int = 3
    scenarios: tuple[str, ...] = SCENARIOS
    systems: tuple[str, ...] = SYSTEMS
    sweep: OursSweep = field(default_factory=OursSweep)
    # The peers' settings tried on the ingest backlog (one run each; the best is repeated).
    kstreams_threads: tuple[int, ...] = (1, 2)
    spark_shuffle_partitions: tuple[int, ...] = (2, 4)
    changelog_records: int = 1_000_000
    changelog_keys: int = 1_000
    latency_rate: int = 5_000
    latency_seconds: float = 60.0
    probe_seconds: float = 15.0
    warmup_seconds: float = 5.0
    default_trigger_s: float = DEFAULT_TRIGGER_S
    trigger_candidates: tuple[float, ...] = (0.0, 0.1, 0.25, 0.5)
    flush_s: float = 5.0
    poll_s: float = 0.025
    kill_after_batches: int = 3
    # Kills of a daemon with a hot standby in the recovery scenario: its goal is stated over ten.
    failover_kills: int = 10
    # The sustained-rate steps, as fractions of the plain consumer's read rate.
    sustained_fractions: tuple[float, ...] = (0.3, 0.45, 0.6, 0.75, 0.9)
    sustained_seconds: float = 60.0
    # The peers' sustained-rate steps, as fractions of each one's own catch-up rate (over
    # processing time) in this run: the plain consumer's steps start above what they process.
    peer_sustained_fractions: tuple[float, ...] = (0.3, 0.45, 0.6, 0.75, 0.9, 1.1, 1.3)
    # Latency probes: one order in this many carries a probe item (dataset.OrderStream).
    probe_every: int = 50
    # Event-time windows: events fed per second, for how long, and how much faster than
    # the feed their event-time clock runs (a minute of feed is this many 1-minute windows).
    windows_rate: int = 1_000
    windows_seconds: float = 90.0
    windows_speedup: float = 30.0
    scaling_orders: int = 300_000
    # The revenue join's orders: --orders, at most this (each run generates them and the
    # menu history in Python, and both systems read them).
    revenue_orders: int = 200_000
    scaling_min_partitions: int | None = 4
    profile: bool = True
    quix_python: Path = DEFAULT_QUIX_PYTHON
    bootstrap: str | None = None  # an existing broker instead of a sandbox
    work_dir: Path = DEFAULT_WORK
    keep_work: bool = False
    output: Path = DEFAULT_OUTPUT
    label: str = ""

    def wants(self, scenario: str) -> bool:
        return scenario in self.scenarios

    def runs(self, system: str) -> bool:
        return system in self.systems

    def starts_spark(self) -> bool:
        return any(s not in SPARK_FREE for s in self.scenarios)
