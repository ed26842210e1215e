"""Ports for our own listeners: never from the ephemeral range an outgoing connection can
take between the pick and the bind, never the same one twice."""

from __future__ import annotations

import socket

import pytest

from sandbox import kraft


def _ephemeral() -> range:
    lo, hi = kraft._ephemeral_range()
    return range(lo, hi + 1)


def test_ports_are_distinct_bindable_and_outside_the_ephemeral_range() -> None:
    ports = kraft.free_ports(13)
    assert len(set(ports)) == 13
    assert not any(p in _ephemeral() for p in ports)
    for p in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", p))


def test_a_port_is_never_handed_out_twice_by_one_process() -> None:
    first = {kraft.free_port() for _ in range(50)}
    assert len(first) == 50
    assert not first & set(kraft.free_ports(50))


def test_avoided_and_listened_ports_are_skipped() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", kraft.free_port()))
        taken.listen()
        busy = taken.getsockname()[1]
        avoid = frozenset(range(kraft._LISTEN_FLOOR, 65536)) - {busy} - set(_ephemeral())
        # Only the busy port is left outside the ephemeral range: the system picks instead.
        ports = kraft.free_ports(2, avoid=avoid)
        assert busy not in ports and not set(ports) & avoid and len(set(ports)) == 2


def test_a_run_of_consecutive_ports_lies_wholly_outside_the_ephemeral_range() -> None:
    base = kraft.free_port_run(3)
    run = range(base, base + 3)
    assert not any(p in _ephemeral() for p in run) and run[-1] <= 65535
    assert kraft.free_port_run(3) not in run


def test_where_the_ephemeral_range_is_everything_the_system_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kraft, "_ephemeral_range", lambda: (1024, 65535))
    ports = kraft.free_ports(3)
    assert len(set(ports)) == 3
    with pytest.raises(kraft.BrewError, match="consecutive"):
        kraft.free_port_run(3)
