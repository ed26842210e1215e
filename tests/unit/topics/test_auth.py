"""Kafka refusing a client is named as such, with the settings to check and no value: the
texts below are what librdkafka's error callback and Spark's Java source said against a
real SASL and TLS broker (tests/integration/test_secured_kafka.py)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError
from hypothesis import given
from hypothesis import strategies as st

from topics.auth import ACL, CERTIFICATE, KINDS, LOGIN, MECHANISM, PROTOCOL, TLS, Refusal, from_java, from_librdkafka
from topics.kafka import KafkaConnection, Refusals

LIBRDKAFKA = [
    (KafkaError._AUTHENTICATION, "sasl_plaintext://127.0.0.1:12333/bootstrap: SASL authentication error: "
     "Authentication failed: Invalid username or password (after 303ms in state AUTH_REQ)", LOGIN),
    (KafkaError._AUTHENTICATION, "sasl_ssl://127.0.0.1:20315/bootstrap: SASL authentication error: Authentication "
     "failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 (after 323ms in "
     "state AUTH_REQ)", LOGIN),
    (KafkaError._SSL, "sasl_ssl://127.0.0.1:20315/bootstrap: SSL handshake failed: error:0A000086:SSL routines::"
     "certificate verify failed: broker certificate could not be verified, verify that ssl.ca.location is correctly "
     "configured or root CA certificates are installed (install ca-certificates package) (after 6ms in state "
     "SSL_HANDSHAKE)", CERTIFICATE),
    (KafkaError._TRANSPORT, "ssl://127.0.0.1:26354/bootstrap: SSL handshake failed: Disconnected: SSL connection "
     "closed by peer: connecting to a PLAINTEXT broker listener? (after 3ms in state SSL_HANDSHAKE)", PROTOCOL),
    (KafkaError._AUTHENTICATION, "sasl_plaintext://127.0.0.1:15852/bootstrap: SASL SCRAM-SHA-512 mechanism "
     "handshake failed: Broker: Unsupported SASL mechanism: broker's supported mechanisms: PLAIN (after 326ms in "
     "state AUTH_HANDSHAKE)", MECHANISM),
    (KafkaError.UNSUPPORTED_SASL_MECHANISM, "Broker: Unsupported SASL mechanism", MECHANISM),
    (KafkaError._SSL, "ssl://h:9093/bootstrap: SSL handshake failed: error:0A00010B:SSL routines::wrong version "
     "number", TLS),
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, "Broker: Topic authorization failed", ACL),
    (KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "Broker: Transactional Id authorization failed", ACL),
    (KafkaError.GROUP_AUTHORIZATION_FAILED, "Broker: Group authorization failed", ACL),
]
NOT_REFUSALS = [
    (KafkaError._TRANSPORT, "Failed to get metadata: Local: Broker transport failure"),
    (KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"),
    (KafkaError._TRANSPORT, "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused"),
    (KafkaError._TIMED_OUT, "Failed to get metadata: Local: Timed out"),
    (KafkaError.LEADER_NOT_AVAILABLE, "Broker: Leader not available"),
]
JAVA = [
    ("terminated with exception: org.apache.kafka.common.errors.SaslAuthenticationException: Authentication failed "
     "during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512", LOGIN),
    ("terminated with exception: org.apache.kafka.common.errors.SslAuthenticationException: SSL handshake failed\n"
     "cause: javax.net.ssl.SSLHandshakeException: PKIX path validation failed: java.security.cert."
     "CertPathValidatorException: signature check failed", CERTIFICATE),
    ("SslAuthenticationException: SSL handshake failed\ncause: javax.net.ssl.SSLHandshakeException: PKIX path "
     "building failed: unable to find valid certification path to requested target", CERTIFICATE),
    ("SslAuthenticationException: SSL handshake failed\ncause: javax.net.ssl.SSLHandshakeException: No subject "
     "alternative names matching IP address 127.0.0.1 found", CERTIFICATE),
    ("org.apache.kafka.common.errors.SslAuthenticationException: SSL handshake failed", TLS),
    ("javax.net.ssl.SSLException: Unrecognized SSL message, plaintext connection?", PROTOCOL),
    ("org.apache.kafka.common.errors.UnsupportedSaslMechanismException: Client SASL mechanism 'SCRAM-SHA-512' not "
     "enabled in the server, enabled mechanisms are [PLAIN]", MECHANISM),
    ("org.apache.kafka.common.errors.TopicAuthorizationException: Not authorized to access topics: "
     "[brew.orders.v1]", ACL),
    ("org.apache.kafka.common.errors.GroupAuthorizationException: Not authorized to access group: x", ACL),
]
NOT_JAVA = [
    "org.apache.kafka.common.errors.TimeoutException: Timeout of 60000ms expired before the position for partition "
    "brew.orders.v1-0 could be determined",
    "java.io.IOException: No space left on device",
    "org.apache.spark.SparkException: Job aborted due to stage failure",
    "Authentication of the HTTP token failed",  # no exception class named
]


@pytest.mark.parametrize(("code", "text", "kind"), LIBRDKAFKA)
def test_librdkafkas_refusals_are_named(code: int, text: str, kind: str) -> None:
    refusal = from_librdkafka(code, text)
    assert refusal is not None and refusal.kind == kind


@pytest.mark.parametrize(("code", "text"), NOT_REFUSALS)
def test_an_unreachable_or_healing_cluster_is_no_refusal(code: int, text: str) -> None:
    assert from_librdkafka(code, text) is None


@pytest.mark.parametrize(("text", "kind"), JAVA)
def test_the_java_sources_refusals_are_named(text: str, kind: str) -> None:
    refusal = from_java(text)
    assert refusal is not None and refusal.kind == kind


@pytest.mark.parametrize("text", NOT_JAVA)
def test_other_java_failures_are_no_refusal(text: str) -> None:
    assert from_java(text) is None


@pytest.mark.parametrize(("kind", "settings", "words"), [
    (LOGIN, ("sasl.username", "sasl.password"), "authentication failed"),
    (MECHANISM, ("sasl.mechanisms",), "SASL mechanism"),
    (CERTIFICATE, ("ssl.ca.location",), "certificate verification failed"),
    (PROTOCOL, ("security.protocol",), "does not speak TLS"),
    (TLS, ("security.protocol", "ssl.*"), "TLS handshake"),
    (ACL, ("sasl.username",), "not authorized"),
])
def test_each_line_names_the_failure_and_the_settings_to_check(kind: str, settings: tuple[str, ...],
                                                               words: str) -> None:
    line = Refusal(kind, "topic", "brew.orders.v1").line("kafka-1:9093", "/etc/brew/client.properties")
    assert words in line and "kafka-1:9093" in line and "/etc/brew/client.properties" in line, line
    assert all(s in line for s in settings), line
    assert "cannot reach" not in line and "sandbox up" not in line and "\n" not in line


@given(code=st.sampled_from([c for c, _t, _k in LIBRDKAFKA] + [c for c, _t in NOT_REFUSALS]) | st.integers(-300, 200),
       text=st.text(max_size=300))
def test_the_librdkafka_classifier_is_total(code: int, text: str) -> None:
    refusal = from_librdkafka(code, text)
    assert refusal is None or (refusal.kind in KINDS and "\n" not in refusal.line("h:1", "f"))


@given(text=st.text(max_size=400) | st.sampled_from([t for t, _k in JAVA] + NOT_JAVA))
def test_the_java_classifier_is_total(text: str) -> None:
    refusal = from_java(text)
    assert refusal is None or (refusal.kind in KINDS and "\n" not in refusal.line(java=True))


def test_a_connection_remembers_what_its_clients_callbacks_said_for_a_while() -> None:
    """librdkafka fails the request itself as a transport failure; the callback says why."""
    conn = KafkaConnection("h:1")
    assert conn.refused() is None
    conn.refusals(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert conn.refused() is None
    conn.refusals(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: Authentication failed"))
    refused = conn.refused()
    assert refused is not None and "refused the login" in str(refused)
    assert conn.refusals.recent(within_s=-1) is None  # older than asked for: not an explanation
    assert isinstance(Refusals().__reduce__()[0](), Refusals)
