"""Bad records on their way from the executors to the DLQ (pure; runs on executors too).

Whatever one record holds, what travels to the driver for it is bounded: its bytes are
cut to what one output record can hold (``carry``), and once a task has carried its
budget of bad bytes, later bad records travel as their position only and the driver
reads them back from the source topic (``service.dlq.records``). So a flood of huge garbage costs
the driver the same small memory as a trickle.

Nothing here may import a Kafka client: executors have only ``service.spark.shipped_code.EXECUTOR_PACKAGES``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Bytes of bad records one task carries to the driver before it sends positions only.
TASK_CARRY_BUDGET = 4 * 1024 * 1024
# Must equal topics.records.RECORD_OVERHEAD and KEY_KEEP: an executor cuts no more than the
# driver would.
RECORD_OVERHEAD = 1024
KEY_KEEP = 1024


@dataclass(frozen=True)
class BadRecord:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    reason: str
    # The original sizes, when key/value were cut on the way (not part of equality).
    key_size: int | None = field(default=None, compare=False)
    value_size: int | None = field(default=None, compare=False)
    carried: bool = True           # False: only the position travelled; read the bytes back


def carry(key: bytes | None, value: bytes | None, max_record_bytes: int) -> tuple[bytes | None, bytes | None]:
    """The key and value cut to what a record of ``max_record_bytes`` could hold at most."""
    room = max(0, max_record_bytes - RECORD_OVERHEAD)
    ksize, vsize = len(key or b""), len(value or b"")
    if key is not None and ksize > KEY_KEEP and ksize + vsize > room:
        key = key[:KEY_KEEP]
    if value is not None and len(key or b"") + vsize > room:
        value = value[:max(0, room - len(key or b""))]
    return key, value


class CarryBudget:
    """How many bad bytes a task may still carry whole."""

    def __init__(self, budget: int = TASK_CARRY_BUDGET) -> None:
        self.left = budget

    def take(self, key: bytes | None, value: bytes | None) -> bool:
        if self.left <= 0:
            return False
        self.left -= len(key or b"") + len(value or b"")
        return True


def internal_reason(exc: BaseException) -> str:
    """The DLQ reason of a record whose processing raised something unexpected."""
    return f"internal: {type(exc).__name__}"
