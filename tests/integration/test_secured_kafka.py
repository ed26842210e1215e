"""A secured Kafka, as docs/production/secured-kafka.md sets one up: SASL over TLS with
SCRAM-SHA-512 and a CA file, ACLs on, and what goes wrong there named for what it is. One
broker for the module: a plaintext listener for the tests' own clients (a super user), a
SASL_PLAINTEXT listener with PLAIN users, and a SASL_SSL listener presenting a self-signed
certificate for 127.0.0.1."""

from __future__ import annotations

import re
import secrets
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from sandbox.broker import Sandbox, down, free_port, up
from tests.support.helpers import brew, oracle, read_topic, spawn_brew
from tests.support.tls import add_scram_user, self_signed
from topics.catalog import Topics
from topics.kafka import KafkaConnection
from topics.orders_gen import OrderGenerator

pytestmark = pytest.mark.spark

USER = "brew"  # the docs' own example: a word every topic name, hint and board holds


@dataclass(frozen=True)
class Secured:
    box: Sandbox
    admin: KafkaConnection  # the plaintext listener: a super user, for the tests' own clients
    password: str  # of USER (PLAIN and SCRAM-SHA-512), allowed everything by ACLs
    ca: Path  # the broker certificate's CA (itself)
    other_ca: Path  # a CA that did not sign it
    reader_password: str  # of "reader": topics and groups allowed, no transactional id
    nobody_password: str  # of "nobody": no ACL at all

    @property
    def sasl_ssl(self) -> str:
        return f"127.0.0.1:{self.box.sasl_ssl_port}"

    @property
    def sasl_plaintext(self) -> str:
        return f"127.0.0.1:{self.box.sasl_port}"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    d = tmp_path_factory.mktemp("secured")
    tls, ca = self_signed(d / "tls")
    _, other_ca = self_signed(d / "other", "other")
    password, reader, nobody = (f"pw-{secrets.token_hex(8)}" for _ in range(3))
    box = Sandbox(free_port(), d / "kafka", sasl_port=free_port(),
                  sasl_users={USER: password, "reader": reader, "nobody": nobody},
                  sasl_ssl_port=free_port(), tls=tls,
                  extra_properties=("authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                                    "super.users=User:ANONYMOUS"))
    up(box)
    try:
        admin = KafkaConnection(box.bootstrap)
        add_scram_user(admin, USER, password)
        allow(admin, USER, [ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID,
                            ResourceType.BROKER])
        allow(admin, "reader", [ResourceType.TOPIC, ResourceType.GROUP])
        brew(admin, "topics", "create", check=True)  # the docs' topic names: brew.orders.v1 …
        yield Secured(box, admin, password, ca, other_ca, reader, nobody)
    finally:
        down(box)


def allow(conn: KafkaConnection, user: str, kinds: list[ResourceType]) -> None:
    """Every operation on every resource of ``kinds`` for ``user``."""
    bindings = [AclBinding(kind, "kafka-cluster" if kind == ResourceType.BROKER else "*", ResourcePatternType.LITERAL,
                           f"User:{user}", "*", AclOperation.ALL, AclPermissionType.ALLOW) for kind in kinds]
    admin = conn.admin()  # must outlive its futures
    for future in admin.create_acls(bindings).values():
        future.result()


def config(tmp_path: Path, name: str, **settings: str) -> Path:
    path = tmp_path / f"{name}.properties"
    path.write_text("".join(f"{k.replace('_', '.')}={v}\n" for k, v in settings.items()))
    return path


def documented(s: Secured, tmp_path: Path, password: str | None = None, ca: Path | None = None) -> Path:
    """docs/production/secured-kafka.md's client.properties, pointed at this broker."""
    return config(tmp_path, "client", security_protocol="SASL_SSL", sasl_mechanisms="SCRAM-SHA-512",
                  sasl_username=USER, sasl_password=password or s.password,
                  ssl_ca_location=str(ca or s.ca))


def secured_brew(s: Secured, cfg: Path, *args: str, bootstrap: str | None = None,
                 timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return brew(s.admin, *args, "--bootstrap", bootstrap or s.sasl_ssl, "--kafka-config", str(cfg), timeout=timeout)


def one_line_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode not in (0, None), out[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    # One error line, the last; a daemon's own INFO lines on its way may come before it, but
    # no trace and no wait for Kafka to heal.
    errors = [ln for ln in lines if not re.match(r"\d\d:\d\d:\d\d INFO ", ln)]
    assert len(errors) == 1 and errors[0] == lines[-1] and errors[0].startswith("brewstream: error: "), out[-3000:]
    last = errors[0]
    for fragment in fragments:
        assert fragment in last, last
    assert "cannot reach" not in last and "sandbox up" not in last, last
    return last


def get(port: int, path: str) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return str(response.read().decode())
    except urllib.error.HTTPError as exc:
        return str(exc.read().decode())
    except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
        return str(exc)


# ---------------------------------------------------------------- what is shown, what is hidden

def test_the_documented_example_shows_every_word_and_hides_the_password(secured: Secured, tmp_path: Path) -> None:
    """The docs' client.properties with sasl.username=brew: before, every config value of 4+
    characters was hidden inside any word, so the board read `cold <sasl.username>`, topic
    names `<sasl.username>.orders.v1` and hints `<sasl.username>stream sandbox up`. Now only
    secrets are hidden, as whole words; the password still shows nowhere."""
    s, topics = secured, Topics()
    cfg = documented(s, tmp_path)
    state, port, log = tmp_path / "state", free_port(), tmp_path / "daemon.log"
    seeded = secured_brew(s, cfg, "seed-orders", "--count", "500", "--rate", "0", "--seed", "9")
    assert seeded.returncode == 0, seeded.stderr
    daemon = spawn_brew(s.admin, "run", "--bootstrap", s.sasl_ssl, "--kafka-config", str(cfg), "--state-dir",
                        str(state), "--checkpoint-dir", str(tmp_path / "ckpt"), "--http-port", str(port),
                        "--flush", "1s", log=log)
    bodies = [seeded.stdout, seeded.stderr]
    try:
        daemon.wait_for("processed=500", 300)
        for path in ("/metrics", "/api/status", "/api/counts", "/api/top", "/readyz", "/healthz"):
            bodies.append(get(port, path))
        described = secured_brew(s, cfg, "topics", "describe")
        status = secured_brew(s, cfg, "status", "--state-dir", str(state))
        unreachable = secured_brew(s, cfg, "status", "--state-dir", str(state), bootstrap=f"127.0.0.1:{free_port()}",
                                   timeout=60)
        bodies += [p.stdout + p.stderr for p in (described, status, unreachable)]
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(120) == 0, daemon.text()[-3000:]
    text = daemon.text()
    expected = oracle(islice(OrderGenerator(9), 500))
    # The board, the topic names, the hints: as they are.
    assert re.search(rf"\d+\. cold brew +{expected['cold brew']}\b", text), text[-3000:]
    assert f"input={topics.orders} changelog={topics.changelog}" in text, text[-3000:]
    assert described.returncode == 0 and f"{topics.orders} " in described.stdout, described.stdout + described.stderr
    assert status.returncode == 0 and f"total lag on {topics.orders}: 0" in status.stdout, status.stdout
    assert "start it with `brewstream sandbox up`" in unreachable.stderr, unreachable.stderr
    assert "<sasl.username>" not in "".join(bodies) + text
    # The password: nowhere, not even in Spark's log or the topics.
    bodies.append(text)
    bodies += [p.read_text(errors="replace") for p in state.glob("spark.log*")]
    for topic in (topics.changelog, topics.counts, topics.dlq, topics.instances):
        for msg in read_topic(s.admin, topic):
            headers: Any = msg.headers() or []
            bodies.append(repr((msg.key(), msg.value(), headers)))
    leaks = [b[max(0, b.find(s.password) - 80):b.find(s.password) + 80] for b in bodies if s.password in b]
    assert not leaks, leaks[:3]


# ---------------------------------------------------------------- refused, not unreachable

def test_a_wrong_password_is_named_as_a_failed_login(secured: Secured, tmp_path: Path) -> None:
    """Before, a wrong password read `cannot reach Kafka at …; start it with brewstream
    sandbox up or pass --bootstrap`: the broker was up and answering."""
    s, wrong = secured, f"wrong-{secrets.token_hex(6)}"
    cfg = documented(s, tmp_path, password=wrong)
    plain = config(tmp_path, "plain", security_protocol="SASL_PLAINTEXT", sasl_mechanisms="PLAIN",
                   sasl_username=USER, sasl_password=wrong)
    for proc in (secured_brew(s, cfg, "topics", "describe", timeout=60),
                 secured_brew(s, cfg, "status", "--state-dir", str(tmp_path / "s"), timeout=60),
                 secured_brew(s, plain, "status", "--state-dir", str(tmp_path / "s"), bootstrap=s.sasl_plaintext,
                              timeout=60),
                 secured_brew(s, cfg, "run", "--state-dir", str(tmp_path / "s"), "--checkpoint-dir",
                              str(tmp_path / "c"), timeout=120)):
        line = one_line_error(proc, "authentication failed", "sasl.username", "sasl.password")
        assert wrong not in proc.stdout + proc.stderr and s.password not in line, line


def test_an_untrusted_broker_certificate_is_named_as_such(secured: Secured, tmp_path: Path) -> None:
    s = secured
    cfg = documented(s, tmp_path, ca=s.other_ca)  # a CA that did not sign the broker's certificate
    for proc in (secured_brew(s, cfg, "topics", "describe", timeout=60),
                 secured_brew(s, cfg, "run", "--state-dir", str(tmp_path / "s"), "--checkpoint-dir",
                              str(tmp_path / "c"), timeout=120)):
        one_line_error(proc, "certificate verification failed", "ssl.ca.location")


def test_a_tls_client_at_a_plaintext_listener_is_named_as_such(secured: Secured, tmp_path: Path) -> None:
    s = secured
    cfg = documented(s, tmp_path)
    one_line_error(secured_brew(s, cfg, "topics", "describe", bootstrap=s.sasl_plaintext, timeout=60),
                   "does not speak TLS", "security.protocol")


def test_spark_sources_failed_login_and_certificate_end_the_run_in_one_line(secured: Secured,
                                                                             tmp_path: Path) -> None:
    """librdkafka's clients log in, Spark's Java source does not (a java. line gives it other
    settings): the query fails at once, named for what it is, and is not waited out as
    Kafka's trouble."""
    s = secured
    wrong = f"wrong-{secrets.token_hex(6)}"
    jaas = ("org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{USER}" password="{wrong}";')
    cases = {"login": (dict(java_sasl_jaas_config=jaas), ("authentication failed", "sasl.password",
                                                          "java.sasl.jaas.config")),
             "certificate": (dict(java_ssl_truststore_location=str(s.other_ca)),
                             ("certificate verification failed", "ssl.ca.location"))}
    for name, (java, fragments) in cases.items():
        (tmp_path / name).mkdir()
        base = documented(s, tmp_path / name).read_text()
        cfg = tmp_path / name / "java.properties"
        cfg.write_text(base + "".join(f"{k.replace('_', '.')}={v}\n" for k, v in java.items()))
        proc = secured_brew(s, cfg, "run", "--state-dir", str(tmp_path / name / "s"), "--checkpoint-dir",
                            str(tmp_path / name / "c"), timeout=300)
        last = proc.stderr.strip().splitlines()[-1]
        assert proc.returncode == 1, proc.stderr[-3000:]
        assert "Kafka cannot serve this instance now" not in proc.stderr, proc.stderr[-3000:]
        for fragment in fragments:
            assert fragment in last, last
        assert wrong not in proc.stdout + proc.stderr, proc.stderr[-3000:]
        spark_log = "".join(p.read_text(errors="replace") for p in (tmp_path / name / "s").glob("spark.log*"))
        assert wrong not in spark_log


def test_a_missing_acl_is_named_with_the_principal_to_check(secured: Secured, tmp_path: Path) -> None:
    """Before, a principal without ACLs on the topics read `topic … does not exist; create
    the topics`, and one without its transactional id failed the run with the broker's words."""
    s = secured
    nobody = config(tmp_path, "nobody", security_protocol="SASL_PLAINTEXT", sasl_mechanisms="PLAIN",
                    sasl_username="nobody", sasl_password=s.nobody_password)
    reader = config(tmp_path, "reader", security_protocol="SASL_PLAINTEXT", sasl_mechanisms="PLAIN",
                    sasl_username="reader", sasl_password=s.reader_password)
    for args in (["topics", "describe"], ["dlq", "show"], ["run", "--state-dir", str(tmp_path / "n")]):
        one_line_error(secured_brew(s, nobody, *args, bootstrap=s.sasl_plaintext, timeout=120),
                       "not authorized to use the topic brew.", "check the ACLs of the principal")
    one_line_error(secured_brew(s, reader, "run", "--state-dir", str(tmp_path / "r"), "--checkpoint-dir",
                                str(tmp_path / "c"), bootstrap=s.sasl_plaintext, timeout=300),
                   "not authorized to use the transactional id", "check the ACLs of the principal")
