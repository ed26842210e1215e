"""``python -m bench`` (what ``make bench`` runs): flags in, a results table and JSON out."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from bench.config import (
    DEFAULT_OUTPUT,
    DEFAULT_QUIX_PYTHON,
    DEFAULT_WORK,
    OPTIONAL_SCENARIOS,
    SCENARIOS,
    SYSTEMS,
    BenchConfig,
    OursSweep,
)
from service.cli.common import DURATION
from service.instance.signals import Terminated, terminate_by_exception
from topics.clock import parse_duration
from topics.errors import BrewError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _caps(text: str) -> tuple[int | None, ...]:
    out: list[int | None] = []
    for part in text.split(","):
        part = part.strip().lower()
        out.append(None if part in ("none", "") else int(part))
    return tuple(out)


def _fractions(text: str) -> tuple[float, ...]:
    try:
        values = tuple(sorted(float(w) for w in _words(text)))
    except ValueError:
        raise click.BadParameter(f"--sustained-fractions wants numbers separated by commas, got {text!r}") from None
    if not values or values[0] <= 0:
        raise click.BadParameter("--sustained-fractions wants at least one fraction above 0")
    return values


def _ints(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(w) for w in _words(text))
    except ValueError:
        raise click.BadParameter(f"{flag} wants whole numbers separated by commas, got {text!r}") from None
    if not values or min(values) < 1:
        raise click.BadParameter(f"{flag} wants at least one number, each 1 or more")
    return values


def _words(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


@click.command(context_settings=CONTEXT)
@click.option("--orders", type=click.IntRange(min=1000), default=1_000_000, show_default=True,
              help="Orders in the ingest backlog.")
@click.option("--reps", type=click.IntRange(min=1), default=3, show_default=True,
              help="Repetitions of every measurement (median, min and max are reported).")
@click.option("--seed", type=int, default=42, show_default=True, help="Seed of every generated order.")
@click.option("--scenarios", default=",".join(SCENARIOS), show_default=True,
              help=f"Which scenarios to run, comma-separated; also {', '.join(OPTIONAL_SCENARIOS)} (ingest on "
                   "local[1], local[2] and a local Spark cluster of one and two workers). revenue: orders priced "
                   "with a menu history by Kafka Streams' versioned stream-table join and by `brewstream revenue`, "
                   "each checked against the as-of oracle (`python -m bench.revenue` on its own).")
@click.option("--systems", default=",".join(SYSTEMS), show_default=True,
              help="Which systems to run, comma-separated (every scenario runs those it applies to).")
@click.option("--kstreams-threads", default="1,2", show_default=True,
              help="num.stream.threads values tried for Kafka Streams' ingest (the best is repeated).")
@click.option("--spark-shuffle-partitions", default="2,4", show_default=True,
              help="spark.sql.shuffle.partitions values (state store partitions) tried for Spark's own "
                   "aggregation (the best is repeated).")
@click.option("--ours-caps", default="none,250000", show_default=True,
              help="--max-offsets-per-trigger values tried for brewstream's ingest ('none': no cap).")
@click.option("--ours-masters", default="local[*],local[3]", show_default=True,
              help="Spark masters tried for brewstream's ingest (local[*] is one task slot per core).")
@click.option("--scaling-orders", type=click.IntRange(min=1000), default=300_000, show_default=True,
              help="Orders in the scaling scenario's backlog.")
@click.option("--scaling-min-partitions", type=click.IntRange(min=0), default=4, show_default=True,
              help="Also run the two-core set-ups with this --min-partitions (0: not).")
@click.option("--revenue-orders", type=click.IntRange(min=1000), default=200_000, show_default=True,
              help="Orders in the revenue scenario: --orders, at most this many.")
@click.option("--changelog-records", type=click.IntRange(min=1000), default=1_000_000, show_default=True,
              help="Records in the changelog the restore scenario reads.")
@click.option("--changelog-keys", type=click.IntRange(min=3), default=1_000, show_default=True,
              help="Distinct keys over those records.")
@click.option("--latency-rate", type=click.IntRange(min=1), default=5_000, show_default=True,
              help="Orders per second fed in the latency and recovery scenarios.")
@click.option("--latency-seconds", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="Measured seconds of each latency run.")
@click.option("--probe-seconds", type=click.FloatRange(min=1), default=None,
              help="Seconds of each probe for the fastest trigger that keeps up.  [default: min(15, latency)]")
@click.option("--warmup-seconds", type=click.FloatRange(min=0), default=5.0, show_default=True,
              help="Seconds fed before each latency measurement starts (not counted).")
@click.option("--triggers", default="0ms,100ms,250ms,500ms", show_default=True,
              help="Trigger intervals probed, fastest first, for the fastest that keeps up.")
@click.option("--sustained-fractions", default="0.3,0.45,0.6,0.75,0.9", show_default=True,
              help="Input rates stepped through by the sustained scenario, as fractions of the plain "
                   "consumer's read rate, lowest first.")
@click.option("--peer-sustained-fractions", default="0.3,0.45,0.6,0.75,0.9,1.1,1.3", show_default=True,
              help="Input rates stepped through for Kafka Streams and Spark, as fractions of each one's own "
                   "catch-up rate in this run, lowest first.")
@click.option("--sustained-seconds", type=click.FloatRange(min=3), default=60.0, show_default=True,
              help="How long each sustained-rate step is held.")
@click.option("--failover-kills", type=click.IntRange(min=1), default=10, show_default=True,
              help="SIGKILLs of a daemon with a hot standby in the recovery scenario (the restarts without "
                   "one are repeated --reps times).")
@click.option("--windows-rate", type=click.IntRange(min=10), default=1_000, show_default=True,
              help="Order events per second fed in the event-time windows scenario.")
@click.option("--windows-seconds", type=click.FloatRange(min=10), default=90.0, show_default=True,
              help="Seconds of feed in each run of the windows scenario.")
@click.option("--windows-speedup", type=click.FloatRange(min=1), default=30.0, show_default=True,
              help="How much faster than the feed the events' event-time clock runs in the windows scenario "
                   "(a second of feed is this many seconds of event time).")
@click.option("--flush", "flush_s", type=DURATION, default="5s", show_default=True,
              help="brewstream's --flush (top-N snapshot interval) in the latency runs.")
@click.option("--poll", "poll_s", type=DURATION, default="25ms", show_default=True,
              help="How often the committed store is polled (latency resolution).")
@click.option("--profile/--no-profile", default=True, show_default=True,
              help="One extra brewstream ingest run under py-spy (driver and Python workers).")
@click.option("--quix-python", type=click.Path(path_type=Path), default=DEFAULT_QUIX_PYTHON, show_default=True,
              help="Python of the Quix Streams virtualenv.")
@click.option("--bootstrap", default=None, help="Use this broker instead of starting a sandbox.")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_WORK,
              show_default=True, help="Broker data, state dirs and logs of the run.")
@click.option("--keep-work", is_flag=True, help="Keep the work dir (logs, stores, broker data) afterwards.")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_OUTPUT,
              show_default=True, help="Where the results JSON goes.")
@click.option("--label", default="", help="A note stored with the results and shown above the tables.")
def bench(orders: int, reps: int, seed: int, scenarios: str, systems: str, kstreams_threads: str,
          spark_shuffle_partitions: str, ours_caps: str, ours_masters: str,
          scaling_orders: int, scaling_min_partitions: int, revenue_orders: int, changelog_records: int,
          changelog_keys: int,
          latency_rate: int, latency_seconds: float,
          probe_seconds: float | None, warmup_seconds: float, triggers: str, sustained_fractions: str,
          peer_sustained_fractions: str, sustained_seconds: float, failover_kills: int, windows_rate: int,
          windows_seconds: float,
          windows_speedup: float, flush_s: float, poll_s: float,
          profile: bool, quix_python: Path, bootstrap: str | None, work_dir: Path, keep_work: bool,
          output: Path, label: str) -> None:
    """Ingest, restore, latency, sustained rate, recovery, event-time windows and the revenue join of brewstream
    against a plain consumer, Quix Streams, Kafka Streams and Spark's own stateful aggregation."""
    from bench.runner import run

    chosen = _words(scenarios)
    unknown = set(chosen) - set(SCENARIOS) - set(OPTIONAL_SCENARIOS)
    if unknown:
        raise click.BadParameter(f"unknown scenario(s) {sorted(unknown)}; pick from "
                                 f"{', '.join(SCENARIOS + OPTIONAL_SCENARIOS)}")
    picked = _words(systems)
    if not picked or set(picked) - set(SYSTEMS):
        raise click.BadParameter(f"--systems: pick from {', '.join(SYSTEMS)}; got {systems!r}")
    cfg = BenchConfig(
        orders=orders, reps=reps, seed=seed, scenarios=chosen, systems=picked,
        kstreams_threads=_ints(kstreams_threads, "--kstreams-threads"),
        spark_shuffle_partitions=_ints(spark_shuffle_partitions, "--spark-shuffle-partitions"),
        sweep=OursSweep(_caps(ours_caps), _words(ours_masters)),
        scaling_orders=scaling_orders, scaling_min_partitions=scaling_min_partitions or None,
        revenue_orders=revenue_orders,
        changelog_records=changelog_records, changelog_keys=changelog_keys,
        latency_rate=latency_rate, latency_seconds=latency_seconds,
        probe_seconds=probe_seconds if probe_seconds is not None else min(15.0, latency_seconds),
        warmup_seconds=warmup_seconds,
        trigger_candidates=tuple(sorted(parse_duration(t) for t in _words(triggers))),
        sustained_fractions=_fractions(sustained_fractions),
        peer_sustained_fractions=_fractions(peer_sustained_fractions), sustained_seconds=sustained_seconds,
        failover_kills=failover_kills,
        windows_rate=windows_rate, windows_seconds=windows_seconds, windows_speedup=windows_speedup,
        flush_s=flush_s, poll_s=poll_s, profile=profile, quix_python=quix_python, bootstrap=bootstrap,
        work_dir=work_dir, keep_work=keep_work, output=output, label=label,
    )
    run(cfg)


def main() -> None:
    terminate_by_exception()  # SIGTERM unwinds like Ctrl+C, so the broker and every daemon are still stopped
    try:
        bench.main(standalone_mode=False)
    except (click.exceptions.Abort, KeyboardInterrupt, Terminated):
        click.echo("bench: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except BrewError as exc:  # BenchError, or a shared helper's
        click.echo(f"bench: FAILED: {exc}", err=True)
        sys.exit(1)
