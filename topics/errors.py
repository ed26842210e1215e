"""The one error type the CLI turns into a one-line message and a non-zero exit."""


class BrewError(Exception):
    """A failure the user can act on; its message says what to do next."""


class KafkaUnavailable(BrewError):
    """Kafka cannot serve a request now but will once the cluster heals: no broker answers,
    a partition has no leader yet, a coordinator is moving, too few replicas are in sync.
    A command stops on it in one line; a running daemon waits it out (``service.engine.outage``)."""


class KafkaRefused(BrewError):
    """Kafka answers but refuses this client (a failed login, an unverified certificate, TLS
    against a plaintext listener, an ACL): a setting or a permission to fix, never an outage
    to wait out (``topics.auth``)."""


_DISK_HINTS = (
    ("No space left on device", "the disk is full: free space on it (or move --state-dir / --checkpoint-dir) "
                                "and start again"),
    ("Disk quota exceeded", "the disk quota is used up: free space and start again"),
    ("Read-only file system", "the file system is read-only: remount it read-write or pick another folder"),
    ("Permission denied", "this user may not write there: fix the permissions or pick another folder"),
)


def disk_problem(text: str) -> str | None:
    """What to do about a file-system error named anywhere in ``text``, or None."""
    for needle, hint in _DISK_HINTS:
        if needle.lower() in text.lower():
            return hint
    return None


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message``, for an error nothing more specific explains."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:300]}" if text else type(exc).__name__
