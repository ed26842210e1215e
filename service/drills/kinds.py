"""The broker drill's fault kinds and defaults, light enough for the CLI to import at start
(``service.drills.broker_faults`` runs them)."""

from __future__ import annotations

from topics.kafka import REQUEST_TIMEOUT_S

# Every fault kind, in the order the table lists them, with what it does.
KINDS: dict[str, str] = {
    "changelog-leader-kill": "SIGKILL the leader of a changelog partition, then start it again",
    "coordinator-kill": ("SIGKILL the transaction coordinator of the changelog's transactional.id (behind a "
                         "shuffle, or the input stage's or a task's), then start it"),
    "controller-kill": "SIGKILL the active KRaft controller, then start it again",
    "input-leader-pause": "SIGSTOP a broker that leads input partitions past the client timeouts, then SIGCONT",
    "rolling-restart": "stop each broker cleanly and bring it back into every ISR before the next",
    "two-brokers-kill": "SIGKILL two brokers at once (ISR below min.insync.replicas), then start both",
    "daemon-kill": "SIGKILL the active daemon while a broker is down; restart it, or the standby takes over",
    "net-latency": "add latency between the daemons and a changelog leader",
    "net-blackhole": "blackhole a changelog leader for the daemons, longer than the request timeout",
    "net-reset": "reset the daemons' connections to a changelog leader while a transaction is open",
}
NETWORK_KINDS = ("net-latency", "net-blackhole", "net-reset")
# The node actions each kind needs from a cluster the user brings.
NEEDS: dict[str, tuple[str, ...]] = {
    "input-leader-pause": ("pause", "resume"),
    "rolling-restart": ("stop", "start"),
}
PASSES = ("alone", "standby")
# A paused broker stays paused past every client timeout (``REQUEST_TIMEOUT_S``) and the
# broker session timeout (9 s), so that the cluster fences it and clients give it up.
BROKER_PAUSE_S = 2 * REQUEST_TIMEOUT_S

KIND_NAMES = tuple(KINDS)
