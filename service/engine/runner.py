"""The daemon around a pipeline's sink: its roles, start-up order, the query, shutdown.

Both pipelines (drink-count and windows) run here, as the active writer of their
changelog or, with ``--standby``, as a hot standby that takes over when the active's
lease lapses (``service.instance.lease``).

Start-up as active: lock the state dir (a second process on it stops here) and start
Spark's JVM beside what follows (``Session``), make sure no other live instance holds
the changelog's lease (it is named and this one refuses), fence older writers of the
changelog, bring the store up to date with the changelog (a full restore when the disk
was lost, refusing a changelog that cannot serve it), check that the input still holds
what the store has to count, pick the start point, and only then start the query. As a
standby: lock, warm Spark, restore the store and follow the changelog until the lease
lapses; then the same steps as active, with only the last few records left to apply. A
fenced active goes back to standby when another instance took it over (or it was started
as one); fenced by a writer outside the lease, or in an ``--available-now`` run, it stops.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from restorer.catchup import bring_store_up_to_date, check_routing
from restorer.changelog import ChangelogWriter, Fenced
from restorer.faults import FaultPlan, kill_process_and
from restorer.integrity import RESTORE, plan_start
from restorer.reader import apply_changelog, new_reader, store_facts, view_changelog
from restorer.repartition import cursors_apart
from restorer.store import StateDir, Store, StoreGone
from service.engine.checkpoint_dir import CheckpointDir, drop_checkpoint
from service.engine.contract import Pipeline, RunConfig
from service.engine.input_guard import check_input, pin_latest
from service.engine.outage import InputBacklog, Outage, ServingWatch, through_outages, trouble
from service.engine.query import Rewarm, failure_line, run_query, stop_quietly, warm_query
from service.engine.sink import SinkOptions
from service.instance.health import ACTIVE, FENCED, RESTORING, STANDBY, STARTING, STOPPED, Health, Phase
from service.instance.lease import Announcement, Lease, LeaseLost
from service.instance.signals import stop_on_signals
from service.instance.task_roles import RUNNING, TaskRoles
from service.ops.forward import advertised
from service.ops.http_api import HttpApi, serve_http, serving
from service.ops.metrics import Metrics, MetricsRefresher
from service.ops.queries import Owner
from service.ops.stalls import StallWatch
from service.spark.conf import is_local
from service.spark.session import build_session, jvm_process, stop_session, warm_python_workers
from service.spark.shipped_code import EXECUTOR_PACKAGES
from topics.errors import BrewError
from topics.kafka import max_record_bytes, partitions_of_each, serving_problem, topic_exists

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger("brewstream")
T = TypeVar("T")


def run_pipeline(p: Pipeline, cfg: RunConfig, spark: SparkSession | None = None) -> int:
    """Run until SIGINT/SIGTERM (or the backlog is done with available-now); 0 on a clean stop."""
    conn = cfg.conn
    # Every topic is there (one line naming a missing one) before anything starts.
    partitions = partitions_of_each(conn, [p.source_topic, p.input_topic, p.changelog_topic, p.dlq_topic,
                                           *p.output_topics, cfg.topics.instances])
    if p.shuffled is not None and len(partitions[p.input_topic]) != len(partitions[p.changelog_topic]):
        raise BrewError(f"the repartition topic {p.input_topic} has {len(partitions[p.input_topic])} partitions and "
                        f"the changelog {p.changelog_topic} {len(partitions[p.changelog_topic])}: one per task in "
                        f"both; delete {p.input_topic} and create it with `brewstream topics create --tasks "
                        f"{len(partitions[p.changelog_topic])}`")
    metrics = Metrics(p.name)
    health = Health()
    health.on_change(metrics.phase_changed)
    # The lag users watch is the source's, behind a shuffle too: the store's input offsets
    # there are the least of its tasks' cursors (``codec.decode_entries``).
    api = serve_http(cfg.metrics_host, cfg.metrics_port, p.name, p.source_topic, p.routes, metrics, health,
                     cfg.http_token_file, cfg.http_insecure)
    try:
        # Spark's JVM starts as soon as the state dir is this process's, and builds its
        # session while the lease is taken and the store catches up: start-up costs the
        # longer of the two, not their sum.
        with OpenStore(cfg.state_dir, api) as stores, CheckpointDir(cfg.checkpoint_dir, cfg.state_dir), \
                Session(p, cfg, spark) as session, \
                StallWatch(conn, metrics, p.source_topic, partitions[p.source_topic], p.changelog_topic,
                           lambda: stores.store if stores.whole else None, lambda: health.phase.name,
                           cfg.changelog_check_s):
            return Daemon(p, cfg, session, metrics, health, stores, partitions[p.input_topic],
                          partitions[p.changelog_topic]).run()
    finally:
        if api is not None:
            api.stop()


class OpenStore:
    """The state dir, locked, and its store, open and served by the HTTP API; opened again
    (``reopen``) when the folder was deleted under the daemon.

    A store is *whole* once this process has brought it up to date with its changelog since
    it opened it: a catch-up or a restore as active (``bring_store_up_to_date``), or a
    standby's first read of the changelog (``mark_whole``). Until then it may be empty only
    because its restore has not begun or not ended, so nothing is served from it (the HTTP
    API's data paths, ``instance.health.data_refusal``; the lag metrics). A store opened
    again starts over as not whole."""

    def __init__(self, state_dir: Path, api: HttpApi | None) -> None:
        self.path, self.api = state_dir, api
        self._held = contextlib.ExitStack()
        self.store: Store
        self.whole = False

    def __enter__(self) -> OpenStore:
        state_dir = self._held.enter_context(StateDir(self.path))
        self.store = self._held.enter_context(Store(state_dir.store_path))
        self.whole = False
        self._held.enter_context(serving(self.api, self.store))
        return self

    def mark_whole(self) -> None:
        if not self.whole:
            self.whole = True
            if self.api is not None:
                self.api.whole(self.store)

    def __exit__(self, *exc: object) -> None:
        self._held.close()

    def reopen(self) -> Store:
        self.whole = False  # before it closes: the metrics thread reads a whole store only
        self._held.close()
        return self.__enter__().store


class Daemon:
    """One instance of a pipeline, through its roles."""

    def __init__(self, p: Pipeline, cfg: RunConfig, session: Session, metrics: Metrics, health: Health,
                 stores: OpenStore, input_partitions: list[int], changelog_partitions: list[int]) -> None:
        self.p, self.cfg, self.metrics, self.health, self.stores = p, cfg, metrics, health, stores
        self.input_partitions, self.changelog_partitions = input_partitions, changelog_partitions
        self.spark = session.get
        self.stop = threading.Event()
        me = Announcement.here(cfg.state_dir, p.changelog_topic, cfg.instance, cfg.lease_interval_s)
        if stores.api is not None:
            me = replace(me, api=advertised(cfg.metrics_host, stores.api.port, cfg.http_advertise))
        self.lease = Lease(cfg.conn, cfg.topics.instances, me, cfg.lease_interval_s, cfg.takeover_timeout_s)
        # One instance holds every task of its store: they move with its phase (``run``).
        self.tasks = TaskRoles(len(changelog_partitions))
        if stores.api is not None:
            stores.api.owner = lambda: Owner(self.lease.me.instance, self.lease.generation, self.tasks.snapshot())
            stores.api.peer = self._owner_address
        self.record_bytes = min(max_record_bytes(cfg.conn, t) for t in (p.dlq_topic, *p.output_topics))
        self.outage = Outage(metrics.kafka_outage)
        self._rewarm: Rewarm | None = None

    @property
    def store(self) -> Store:
        return self.stores.store

    def _owner_address(self) -> str | None:
        """Where the instance that runs the tasks answers queries, while this one runs none
        of them (``ops.forward``); None when no live instance says it runs them."""
        if RUNNING in self.tasks.snapshot():
            return None
        holder = self.lease.holder()
        if holder is None or not holder.what.api:
            return None
        return holder.what.api if any(holder.what.runs(t) for t in self.changelog_partitions) else None

    def run(self) -> int:
        def moved(phase: Phase) -> None:
            self.tasks.follow(phase.name)
            self.lease.set_role(phase.name, tasks=self.tasks.snapshot())

        self.health.on_change(moved)
        refresher = (MetricsRefresher(self.metrics, self.cfg.conn, lambda: self.store if self.stores.whole else None,
                                      self.p.source_topic)
                     if self.cfg.metrics_port is not None else None)
        try:
            with stop_on_signals() as stop:
                self.stop = stop
                if not self._through_outages(lambda: self.lease.start(seq=lambda: self.store.last_seq()))[0]:
                    return 0
                if refresher is not None:
                    refresher.start()
                return self._roles()
        except Fenced as exc:
            self.health.set(FENCED, str(exc))
            raise
        finally:
            if self.health.phase.name != FENCED:
                self.health.set(STOPPED)
            if refresher is not None:
                refresher.stop()
            self.lease.stop()

    def _roles(self) -> int:
        took_over: TakeOver | None = None
        if self.cfg.standby:
            # Warm before anything is asked of it.
            went, read = self._through_outages(lambda: warm_query(self.spark(), self.p, self.cfg))
            if not went:
                return 0
            if not read:
                self._rewarm = Rewarm(lambda: warm_query(self.spark(), self.p, self.cfg, only_with_records=True),
                                      lambda: self.store.next_offsets(self.p.source_topic))
                self._rewarm.start()
        else:
            went, previous = self._through_outages(self.lease.check_first_start)
            if not went:
                return 0
            took_over = TakeOver(previous, 0.0, time.monotonic()) if previous is not None else None
        resume = False  # back to the role Kafka's trouble interrupted
        standby = self.cfg.standby
        while not self.stop.is_set():
            try:
                if standby and not resume:
                    took_over = self._stand_by()
                    if self.stop.is_set():
                        return 0
                resume = False
                failure = self._be_active(took_over)
            except Fenced as exc:
                # Taken over by the rules (another live instance announced a later lease),
                # whatever this one was started as, it stands by behind the new holder: an
                # active cut off from the cluster for a moment loses its role, not its
                # process. Fenced with no such holder (a writer that bypassed the lease), or
                # a run that was to end anyway, it stops.
                holder = None if self.cfg.available_now else \
                    self.lease.superseded_by(0.0 if standby else SUPERSEDED_WAIT_S)
                if not (standby or holder is not None):
                    raise
                self.health.set(FENCED, str(exc))
                log.warning("%s; back to standby%s", exc, f" behind {holder.instance}" if holder else "")
                standby = True
                continue
            except LeaseLost as exc:
                # Another instance found the lease free at the same moment and claimed it
                # first: this one fenced nobody and started nothing, and stands by behind it.
                if self.cfg.available_now:
                    raise
                log.info("%s; standing by", exc)
                standby = True
                continue
            except StoreGone as exc:
                # Its files went with the folder: what it committed is in the changelog.
                log.warning("%s; opening the store again and restoring it from the changelog, as at start", exc)
                self.health.set(RESTORING, "the store was deleted: restoring it from the changelog")
                self.stores.reopen()
                resume = self.lease.holds_lease
                took_over = None
                continue
            except Exception as exc:
                kafka = trouble(exc)
                if kafka is None:
                    raise
                resume = self.lease.holds_lease
                if not self._wait_for_kafka(str(kafka)):
                    return 0
                took_over = None
                continue
            if failure:
                gone = self._deleted_topics()
                if gone:
                    raise BrewError(f"the {self.p.name} query failed: {', '.join(gone)} "
                                    f"{'was' if len(gone) == 1 else 'were'} deleted while it ran; "
                                    "create the topics with `brewstream topics create` and start it again: progress "
                                    "is kept")
                raise BrewError(f"the {self.p.name} query failed: {failure}; progress is kept, start it again to "
                                f"continue (Spark's log: {spark_log(self.cfg)})")
            return 0
        return 0

    def _deleted_topics(self) -> list[str]:
        """The topics this instance needs that are gone, when the cluster says so now."""
        try:
            return [t for t in self.topics() if not topic_exists(self.cfg.conn, t)]
        except BrewError:  # the cluster cannot say: the query's own failure says what it knows
            return []

    # ---------------------------------------------------------------- Kafka's own failures

    def _wait_for_kafka(self, reason: str) -> bool:
        """Wait (saying so once) until the cluster serves this pipeline's topics again;
        False when asked to stop first (``service.engine.outage``)."""
        self._kafka_cannot_serve(reason)
        return self.outage.wait(self.cfg.conn, self.topics(), self.stop)

    def _kafka_cannot_serve(self, reason: str) -> None:
        """An episode of Kafka's trouble: said once, and not ready while it lasts."""
        self.outage.begin(reason)
        self.health.set(STARTING, f"waiting for Kafka: {reason}")

    def topics(self) -> list[str]:
        """Every topic this instance reads or writes."""
        p = self.p
        source = [p.source_topic] if p.shuffled is not None else []
        return [*source, p.input_topic, p.changelog_topic, p.dlq_topic, *p.output_topics, self.cfg.topics.instances]

    def _through_outages(self, step: Callable[[], T]) -> tuple[bool, T | None]:
        """``step``, done again after every outage of Kafka until it goes through
        (``outage.through_outages``): (False, None) when asked to stop first."""
        went, result = through_outages(step, self.stop, self._wait_for_kafka)
        if went:
            self.outage.end()
        return went, result

    # ---------------------------------------------------------------- standby

    def _stand_by(self) -> TakeOver | None:
        """Follow the changelog until no other instance holds a live lease."""
        cfg, p = self.cfg, self.p
        self.lease.set_role(RESTORING, holds_lease=False)
        self.health.set(RESTORING, "catching up with the changelog as a standby")
        # Its own checkpoint (no other instance's: ``engine.checkpoint_dir``) says nothing about the
        # store another active has been writing.
        drop_checkpoint(cfg.checkpoint_dir)
        plan = plan_start(view_changelog(cfg.conn, p.changelog_topic), store_facts(self.store),
                          cfg.accept_changelog_loss)
        start: dict[int, int] | None = plan.start if plan.action == RESTORE else None
        reader = new_reader(cfg.conn)
        last = 0.0
        checked = False

        def follow() -> None:
            nonlocal last, start, checked
            if time.monotonic() - last < FOLLOW_EVERY_S:
                return
            result = apply_changelog(cfg.conn, p.changelog_topic, self.store, start=start, check_value=p.check_value,
                                     reader=reader)
            start, last = None, time.monotonic()
            self.stores.mark_whole()
            if not checked and self.store.holds_state():
                self._check_takeover()
                checked = True
            self.metrics.restore_records.labels(self.metrics.pipeline).inc(result.records)
            positions = self.store.positions()
            for q, e in result.end.items():  # per changelog partition: what each task's answers say
                self.metrics.restore_progress(q, 0, positions.get(q, 0), e)
            lag = sum(max(0, e - positions.get(q, 0)) for q, e in result.end.items())
            self.metrics.standby_lag.labels(self.metrics.pipeline).set(lag)
            self.outage.end()
            if self.health.phase.name in (RESTORING, STARTING):
                self.health.set(STANDBY, "following the changelog")

        try:
            follow()
            holder = self.lease.wait_for_lapse(stop=self.stop, on_tick=follow)
        finally:
            reader.close()
            if self._rewarm is not None:  # a later standby spell follows batches this JVM ran
                self._rewarm.stop()
                self._rewarm = None
        if self.stop.is_set():
            return None
        if holder is None:
            return TakeOver(None, 0.0, time.monotonic())
        return TakeOver(holder.what, self.lease.silence(holder), time.monotonic())

    def _check_takeover(self) -> None:
        """What the active refuses its store for (``Pipeline.check``, its routing), asked of
        a standby's store: a standby that could never take over stops now, in one line."""
        p = self.p
        check_routing(self.store, p.changelog_topic, len(self.changelog_partitions), p.wing.routing, p.name)
        if p.check is None:
            return
        try:
            p.check(self.store)
        except BrewError as exc:
            raise BrewError(f"this standby could not take over: {exc}; start it with the active's flags") from None

    # ---------------------------------------------------------------- active

    def _be_active(self, took_over: TakeOver | None) -> str | None:
        cfg, p, store, health = self.cfg, self.p, self.store, self.health
        steps = Steps()
        self.lease.set_role(STARTING)
        self.lease.claim()  # announced before the fencing below, so every reader sees this takeover first
        steps.done("lease")
        # Behind a shuffle each task commits in a transaction of its own (fenced on its own).
        changelog = ChangelogWriter(cfg.conn, p.changelog_topic, self.changelog_partitions, self.record_bytes,
                                    routing=p.wing.routing, by_task=p.shuffled is not None)
        stage = p.shuffled.new_stage() if p.shuffled is not None else None
        try:
            changelog.start()  # fences any other writer of this changelog
            steps.done("fencing")
            health.set(RESTORING, "catching up with the changelog")
            applied = bring_store_up_to_date(cfg.conn, store, changelog, cfg.auto_restore, p.check_value,
                                             cfg.accept_changelog_loss, on_progress=self.metrics.restore_progress,
                                             name=p.name)
            self.stores.mark_whole()
            self.metrics.restore_records.labels(self.metrics.pipeline).inc(applied)
            # A store this pipeline refuses is refused before anything is written for it:
            # an input skip committed first would be in its changelog for good.
            if p.check is not None:
                p.check(store)
            check_input(cfg.conn, store, changelog, p.input_topic, cfg.accept_input_loss, self.metrics,
                        by_task=p.shuffled is not None,
                        derived=None if p.shuffled is None else
                        partial(cursors_apart, store, p.shuffled.source_topic, len(self.changelog_partitions)))
            if p.start_when_empty == "latest":
                pin_latest(cfg.conn, store, changelog, p.input_topic, self.input_partitions)
            if p.prepare is not None:
                p.prepare(store, changelog)
            steps.done("catch-up")
            health.set(STARTING, "starting the query")
            spark = self.spark()
            if self.stop.is_set():
                # Asked to stop while the JVM started: nothing was read, so nothing is left to finish.
                log.info("stopping before the query started")
                return None
            options = SinkOptions(cfg.conn, cfg.checkpoint_dir, cfg.max_name_bytes, self.record_bytes,
                                  cfg.takeover_timeout_s)
            sink = p.make_sink(store, changelog, FaultPlan.from_env(kill_process_and(_jvm_pid())),
                               self.metrics, options)
            reporter = p.make_reporter(store, sink, self.metrics, self.lease.proven_active)
            last = store.last_batch_ms()
            if last is not None:
                self.metrics.last_batch_at(last / 1000)
            reporter.start()

            watches: list[ServingWatch] = []

            def active(query: StreamingQuery) -> None:
                # The probes ask the query itself: it can die while the phase still says active.
                nonlocal took_over

                def serving() -> None:
                    health.set(ACTIVE, query_alive=lambda: bool(query.isActive))
                    self.outage.end()

                serving()
                if took_over is not None and took_over.holder is not None:
                    steps.done("query start")
                    log.info(TOOK_OVER_LINE, took_over.holder.instance, took_over.seconds(),
                             f"silent {took_over.silent_s:.2f}s, {steps}")
                took_over = None  # said once: a query started again (after Kafka's trouble) took nothing over
                for old in watches:
                    old.stop()
                backlog = InputBacklog(cfg.conn, store, p.input_topic, self.input_partitions)
                watches[:] = [ServingWatch(lambda: sink.seq, backlog, lambda: serving_problem(cfg.conn, self.topics()),
                                           self._kafka_cannot_serve, serving, sink.computing)]
                watches[0].start()

            def lost() -> str | None:
                other = self.lease.taken_over()
                return None if other is None else f"{other.describe()} took the lease over"

            ended = False  # the query ended or failed by itself, not on Kafka's trouble
            try:
                failure = run_query(p, cfg, spark, sink, store, changelog, self.metrics, self.input_partitions,
                                    self.stop, lost, active, stage)
                ended = True
                return failure
            finally:
                for watch in watches:
                    watch.stop()
                sink.close()  # lets a batch in flight finish; later ones are refused
                # No last snapshot on the way to wait for Kafka: it could not be sent, and
                # the wait for it held up the daemon's return once the cluster healed.
                reporter.stop(final_flush=ended and not sink.fenced)
        except Fenced:
            self.lease.set_role(FENCED, holds_lease=False)
            raise
        finally:
            if stage is not None:
                stage.stop()
            changelog.close()


def spark_start_failure(master: str, text: str, log_file: Path) -> str:
    """Why Spark did not start, in one line that says where to look."""
    if "JAVA_GATEWAY_EXITED" in text:
        # spark-submit or the JVM refused its settings and printed why on stderr.
        return (f"Spark's JVM exited while starting, with its reason printed above: check --master ({master}), "
                "the --conf settings and spark-defaults.conf, and that Java 17 or later is on PATH or JAVA_HOME")
    where = "" if is_local(master) else f"; is the master at {master} running and reachable from here?"
    return f"Spark did not start on {master}: {failure_line(text)}{where} (Spark's log: {log_file})"


# How long a fenced active waits to read the takeover that fenced it (announced before
# the fencing; its watcher may be behind after a pause or a network fault).
SUPERSEDED_WAIT_S = 5.0
# Logged by a standby that became active, and read by the failover drill and benchmark.
TOOK_OVER_LINE = "took over from %s after %.1fs (%s)"
TOOK_OVER_PATTERN = re.compile(r"took over from (?P<instance>\S+) after (?P<seconds>[\d.]+)s")

# How often a standby applies what its changelog gained (a few hundred records a second
# at most arrive between two steps; at takeover only those are left).
FOLLOW_EVERY_S = 0.2


class Steps:
    """How long each step of becoming active took, for the line that says it took over."""

    def __init__(self) -> None:
        self._last = time.monotonic()
        self._took: list[tuple[str, float]] = []

    def done(self, step: str) -> None:
        now = time.monotonic()
        self._took.append((step, now - self._last))
        self._last = now

    def __str__(self) -> str:
        return ", ".join(f"{step} {s:.2f}s" for step, s in self._took)


@dataclass(frozen=True)
class TakeOver:
    """The instance taken over from, how long it had been silent, and when that was known."""

    holder: Announcement | None
    silent_s: float
    known_at: float  # monotonic

    def seconds(self) -> float:
        """From the holder's last announcement until now."""
        return self.silent_s + time.monotonic() - self.known_at


def spark_log(cfg: RunConfig) -> Path:
    """Where Spark's own warnings and errors go, stack traces included."""
    return cfg.state_dir / "spark.log"


def _jvm_pid() -> int | None:
    proc = jvm_process()
    return proc.pid if proc is not None else None


class Session:
    """The Spark session of one run: the caller's, or one this run builds on a thread of its
    own from the moment it is entered (``get`` waits for it) and stops on the way out."""

    def __init__(self, p: Pipeline, cfg: RunConfig, spark: SparkSession | None) -> None:
        self.p, self.cfg = p, cfg
        self._spark, self._own = spark, spark is None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._warm = False

    def __enter__(self) -> Session:
        if self._own:
            self._thread = threading.Thread(target=self._build, name="spark-start", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._own:
            return
        if self._thread is not None:
            self._thread.join()  # started, perhaps never asked for: stopped all the same
        if self._spark is not None:
            stop_session(self._spark, stop_quietly)

    def _build(self) -> None:
        cfg = self.cfg
        try:
            self._spark = build_session(cfg.master, f"brewstream-{self.p.name}", conf=cfg.spark_conf,
                                        log_file=spark_log(cfg), write_archive=True,
                                        quick_jit=not cfg.available_now)
        except BrewError as exc:
            self._error = exc
        except BaseException as exc:  # handed to whoever asks for the session
            self._error = BrewError(spark_start_failure(cfg.master, str(exc), spark_log(cfg)))

    def get(self) -> SparkSession:
        """The session, once built (what building it raised, raised here). On a cluster its
        executors' Python workers are started and import the batch code first: that is where
        an executor's Python shows whether it can run it at all. On this machine they start
        when a batch first needs one (the JVM's order gate counts a clean batch without
        them), so a start, a restart and a waiting standby hold no worker."""
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._spark is not None
        if not self._warm and not is_local(self.cfg.master):
            try:
                warm_python_workers(self._spark, self.p.batch_module)
            except Exception as exc:
                raise BrewError(f"the executors cannot run the batch code: {failure_line(str(exc))}; executors "
                                f"need Python with {', '.join(EXECUTOR_PACKAGES)}: choose it with --conf "
                                "spark.pyspark.python=PATH or PYSPARK_PYTHON") from None
            self._warm = True
        return self._spark
