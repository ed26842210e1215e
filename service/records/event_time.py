"""The event time of a record: its ``event-time`` header when present, else its Kafka
timestamp, and the bounds every pipeline that reads event time holds it to (pure).

- the event time lies from 0 (1970) to ``MAX_EVENT_NS`` (2100), which leaves room under
  2^63 for window sizes added to it;
- a time from the header lies at most ``max_ahead_ns`` ahead of the record's own Kafka
  timestamp (``ahead_fault``), which must then lie in the same range: one device with a
  clock far ahead would otherwise move its partition's clock, and with it the watermark,
  past every real event. Behind it is fine, however far: that is a late record (an offline
  till flushing its orders), for the pipeline's time rules to judge.
"""

from __future__ import annotations

from service.records.json_reasons import show
from topics.event_time import decode_event_time

MAX_EVENT_NS = 4_102_444_800 * 10**9  # 2100-01-01T00:00:00Z in unix nanoseconds
# How far an event time may run ahead of its record's Kafka timestamp (--max-event-time-ahead).
# Like the default --watermark-delay: an event accepted this far ahead moves the watermark no
# further than an event stamped with the record's own timestamp would.
DEFAULT_MAX_AHEAD_NS = 60 * 10**9
MAX_AHEAD_LIMIT_NS = 10 * 366 * 24 * 3600 * 10**9  # ten years, like every other span


class BadTime(ValueError):
    """The record's time cannot be trusted; the message is the short DLQ reason."""


def event_time_ns(header: object, kafka_ts_ns: object, max_ahead_ns: int) -> tuple[int, bool]:
    """The record's event time and whether it came from the header (``header`` None: the
    record has none); ``BadTime`` for anything out of bounds, never another exception."""
    if header is None:
        if type(kafka_ts_ns) is not int:
            raise BadTime("Kafka timestamp is not an integer")
        if not 0 <= kafka_ts_ns <= MAX_EVENT_NS:
            raise BadTime(f"Kafka timestamp {show(kafka_ts_ns)} ns out of range 0..{MAX_EVENT_NS}")
        return kafka_ts_ns, False
    try:
        ns = decode_event_time(header)
    except ValueError as exc:
        raise BadTime(str(exc)) from None
    if ns > MAX_EVENT_NS:
        raise BadTime(f"event time {show(ns)} ns out of range 0..{MAX_EVENT_NS}")
    fault = ahead_fault(ns, kafka_ts_ns, max_ahead_ns)
    if fault is not None:
        raise BadTime(fault)
    return ns, True


def ahead_fault(event_ns: object, kafka_ts_ns: object, max_ahead_ns: int) -> str | None:
    """Why an event time cannot be trusted next to its record's Kafka timestamp, or None.

    Total over any event time and any Kafka timestamp (an int in any range, None or
    anything else): the timestamp must be an integer in 0..``MAX_EVENT_NS`` (there is no
    bound without one), and the event time an integer at most ``max_ahead_ns`` after it.
    """
    if type(event_ns) is not int:
        return "event time is not an integer"
    if type(kafka_ts_ns) is not int:
        return "Kafka timestamp is not an integer"
    if not 0 <= kafka_ts_ns <= MAX_EVENT_NS:
        return f"Kafka timestamp {show(kafka_ts_ns)} ns out of range 0..{MAX_EVENT_NS}"
    ahead = event_ns - kafka_ts_ns
    if ahead > max_ahead_ns:
        return (f"event time {span_text(ahead)} ahead of the record's Kafka timestamp, "
                f"over the {span_text(max_ahead_ns)} limit")
    return None


def span_text(ns: int) -> str:
    """A span for a one-line reason: ``5ns``, ``90ms``, ``1.5s``, ``59m``, ``1h0m``, ``365d0h``."""
    ms, s = ns // 10**6, ns // 10**9
    if s >= 10**11:
        return "over 3000 years"
    if ns < 10**6:
        return f"{ns}ns"
    if ns < 10**9:
        return f"{ms}ms"
    if s < 60:
        return f"{ms / 1000:g}s"
    if s < 3600:
        return f"{s // 60}m{s % 60}s" if s % 60 else f"{s // 60}m"
    if s < 86_400:
        return f"{s // 3600}h{s % 3600 // 60}m"
    return f"{s // 86_400}d{s % 86_400 // 3600}h"
