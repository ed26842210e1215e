"""The lease on a real broker: two instances that find it free at the same moment."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from service.instance.lease import LEASE_INTERVAL_S, Announcement, Lease, LeaseLost
from tests.support.helpers import Pipeline, read_topic
from topics.clock import wait_until

WON, YIELDED, STOOD_BY = "won", "yielded at its claim", "saw a holder"


def test_of_two_instances_that_find_the_lease_free_at_once_one_holds_it(pipe: Pipeline, tmp_path: Path) -> None:
    """Round after round, two instances (two standbys started together) look for a holder
    at the same moment, find none and claim the lease. Exactly one holds it; the other
    yields at its claim, before it would fence the changelog's writer, and then sees the
    holder; the holder is never taken over by the claim that lost."""
    outcomes = [_one_round(pipe, tmp_path, f"{pipe.topics.changelog}.round{i}") for i in range(12)]
    assert any(YIELDED in o for o in outcomes), f"no round raced: both claims never met {outcomes}"


def _one_round(pipe: Pipeline, tmp_path: Path, changelog: str) -> list[str]:
    """Two leases of ``changelog`` (its announcements are one lease) look and claim at once."""
    leases = {name: Lease(pipe.conn, pipe.topics.instances,
                          Announcement.here(tmp_path / changelog / name, changelog, name, LEASE_INTERVAL_S))
              for name in ("a", "b")}
    outcome: dict[str, str] = {}
    together = threading.Barrier(len(leases))

    def look_and_claim(name: str, lease: Lease) -> None:
        together.wait()
        if lease.holder() is not None:
            outcome[name] = STOOD_BY
            return
        try:
            lease.claim()
            outcome[name] = WON
        except LeaseLost:
            outcome[name] = YIELDED

    try:
        for lease in leases.values():
            lease.start(seq=lambda: 0)
        threads = [threading.Thread(target=look_and_claim, args=item) for item in leases.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert sorted(outcome.values()) in ([WON, YIELDED], [STOOD_BY, WON]), outcome
        holder = leases[next(n for n, o in outcome.items() if o == WON)]
        other = leases[next(n for n, o in outcome.items() if o != WON)]
        assert not other.holds_lease
        wait_until(lambda: (h := other.holder()) is not None and h.what.token == holder.me.token, 30,
                   "the other to see the holder")
        wait_until(holder.proven_active, 30, "the holder to be proven active")
        assert holder.taken_over() is None and other.taken_over() is None
    finally:
        for lease in leases.values():
            lease.stop()
    return sorted(outcome.values())


def test_a_proof_since_a_takeover_comes_to_the_new_holder_only(pipe: Pipeline, tmp_path: Path) -> None:
    """What the board asks after its producer was fenced (``Lease.proven_active(since)``): an
    announcement sent after that moment and read back. The holder taken over before it never
    gets one (it reads the takeover's claim first); the new holder does, within a few
    announcements; and a moment still to come is proven by nobody yet."""
    changelog = f"{pipe.topics.changelog}.since"
    old, new = (Lease(pipe.conn, pipe.topics.instances,
                      Announcement.here(tmp_path / name, changelog, name, LEASE_INTERVAL_S)) for name in ("old", "new"))
    try:
        old.start(seq=lambda: 0)
        old.claim()
        wait_until(old.proven_active, 30, "the first holder to be proven active")
        before = time.monotonic()
        wait_until(lambda: old.proven_active(since=before), 30, "a proof since a moment the holder lived through")
        new.start(seq=lambda: 0)
        new.claim()  # a takeover: a later generation, read back before it would fence anyone
        fenced_at = time.monotonic()
        wait_until(lambda: new.proven_active(since=fenced_at), 30, "the new holder's proof since its takeover")
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:  # a few dozen of the old holder's announcements
            assert not old.proven_active(since=fenced_at)
            time.sleep(0.05)
        assert old.taken_over() is not None
        assert not new.proven_active(since=time.monotonic() + 60)
    finally:
        new.stop()
        old.stop()


def test_announcements_go_on_while_the_store_cannot_be_read(pipe: Pipeline, tmp_path: Path) -> None:
    """The daemon closes its store and opens another when its folder is deleted under it; an
    announcement due in that moment reads a closed store. The announcements, which keep the
    lease, go on meanwhile with the last batch read, and carry the store's again once it reads."""
    changelog = f"{pipe.topics.changelog}.reopen"
    seq: list[int | None] = [7]

    def store_seq() -> int:
        if seq[0] is None:
            raise RuntimeError("DB instance already closed")
        return seq[0]

    lease = Lease(pipe.conn, pipe.topics.instances, Announcement.here(tmp_path / "a", changelog, "a", 0.1))

    def said() -> list[int]:
        return [a.seq for m in read_topic(pipe.conn, pipe.topics.instances)
                if (a := Announcement.decode(m.value())) is not None and a.token == lease.me.token]

    try:
        lease.start(seq=store_seq)
        wait_until(lambda: 7 in said(), 30, "an announcement of batch 7")
        seq[0] = None
        before = len(said())
        wait_until(lambda: len(said()) >= before + 10, 30, "announcements while the store cannot be read")
        assert set(said()) == {7}
        seq[0] = 8
        wait_until(lambda: 8 in said(), 30, "an announcement of batch 8 once the store reads again")
    finally:
        lease.stop()
