"""Where the windows store's keys go: a key's windows and sessions in its own task, and
the changelog's route markers saying so (pure, but for a writer that never connects)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from restorer.changelog import ChangelogWriter
from restorer.codec import decode_entries, encode_u64, route_key
from restorer.tasks import task_of
from service.windows.state import ROUTING as WINDOWS_ROUTING
from service.windows.state import state_key, window_key
from topics.kafka import KafkaConnection
from topics.partitioner import murmur2_partition


@given(st.text(max_size=10), st.sampled_from(["tumbling", "hopping", "session"]),
       st.lists(st.integers(-(2**62), 2**62), min_size=1, max_size=20), st.integers(1, 32))
def test_every_window_of_a_key_is_in_its_keys_task(key: str, kind: str, starts: list[int], tasks: int) -> None:
    """A key's windows and sessions share the task of the key itself (a shop's, or, for the
    windows over every key, the empty key's), whatever their starts."""
    routing = WINDOWS_ROUTING
    assert {task_of(window_key(kind, start, key or None), tasks, routing) for start in starts} == \
        {murmur2_partition(key.encode(), tasks)}


@given(st.binary(max_size=40), st.integers(1, 32))
def test_any_store_key_has_a_task(raw: bytes, tasks: int) -> None:
    """Total over any bytes: a key the windows' layout cannot read is routed by itself."""
    assert 0 <= task_of(raw, tasks, WINDOWS_ROUTING) < tasks
    assert state_key(b"c" + raw) == b"c" + raw  # a clock, a table row: by the whole key


def test_a_routed_writer_sends_keys_and_markers_where_they_belong() -> None:
    writer = ChangelogWriter(KafkaConnection("127.0.0.1:1"), "w", [0, 1, 2], routing=WINDOWS_ROUTING)
    try:
        markers = writer.markers(7)
        assert (route_key(1), encode_u64(1)) in markers
        assert {writer.partition_of(k) for k, _ in markers if k.startswith(route_key(2))} == {2}
        shop = window_key("session", 5, "shop-7")
        assert writer.partition_of(shop) == murmur2_partition(b"shop-7", 3)
    finally:
        writer.close()
    plain = ChangelogWriter(KafkaConnection("127.0.0.1:1"), "d", [0, 1, 2])
    try:  # a store routed by its whole keys writes no route marker: its changelog is as before
        assert not any(k.startswith(route_key(0)[:-1]) for k, _ in plain.markers(7))
    finally:
        plain.close()
    assert decode_entries([(route_key(4), encode_u64(1))]).routes == {4: 1}
