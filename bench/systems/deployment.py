"""A system under test deployed as a daemon: what the fed scenarios (visible latency,
sustained rate, disk loss and failover) start, kill and read, whatever the system.

Every deployment reads orders from ``input`` and publishes per-drink sums to ``output``
(see ``bench.outputs``); ``start(i)`` starts instance ``i`` (0 the active one, 1 a hot
standby where the system has one), ``lose_disk(i)`` deletes what instance ``i`` keeps
on its local disk and would lose with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from bench.context import BenchContext
from bench.procs import Child


class Deployment(Protocol):
    system: str  # the name in the results: "ours", "kafka streams", "spark native"
    input: str
    output: str
    has_standby: bool

    def start(self, instance: int, name: str) -> Child: ...

    def lose_disk(self, instance: int) -> None: ...

    def standby_ready(self, child: Child, timeout: float) -> None:
        """Wait until instance 1, started as a hot standby, follows the active one."""
        ...

    def describe(self) -> str:
        """One line: how this deployment is configured."""
        ...


# The systems with a hot standby (Spark's own aggregation and Quix Streams have none).
WITH_STANDBY = frozenset({"ours", "kafka streams"})
Factory = Callable[[str, bool], Deployment]  # (what, with a standby) -> a fresh deployment


def factories(ctx: BenchContext) -> dict[str, Factory]:
    """The systems of this run that run as daemons, by their name in the results."""
    from bench.systems import kstreams, ours, spark_native

    out: dict[str, Factory] = {}
    if ctx.cfg.runs("ours"):
        out["ours"] = lambda what, standby: ours.OursDeployment(ctx, what, standby)
    if ctx.cfg.runs("kstreams"):
        ks = ctx.peer_settings.get("kafka streams") or kstreams.Settings()
        out["kafka streams"] = lambda what, standby: kstreams.KStreamsDeployment(ctx, what, standby, ks)
    if ctx.cfg.runs("spark"):
        sp = ctx.peer_settings.get("spark native") or spark_native.Settings()
        out["spark native"] = lambda what, standby: spark_native.SparkDeployment(ctx, what, sp)
    return out
