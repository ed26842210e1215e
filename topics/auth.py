"""Kafka refusing a client, told apart from a Kafka that cannot be reached (pure).

A broker that answers but refuses the login (SASL), presents a certificate the client cannot
verify, speaks plaintext where the client asks for TLS, or whose ACLs do not allow a request
is up and reachable: starting a broker or waiting for the cluster to heal would not help.
Each is a setting or a permission to fix, so each is named as such, with the settings to
check, and never waited out as an outage. Messages name settings, never their values.

librdkafka says why only in its error callback (a request fails as a broker transport
failure); ``topics.kafka`` records what its clients' callbacks say (``from_librdkafka``).
The Java client of Spark's source names an exception class in the failed query's text
(``from_java``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from confluent_kafka import KafkaError

LOGIN, MECHANISM, CERTIFICATE, TLS, PROTOCOL, ACL = "login", "mechanism", "certificate", "tls", "protocol", "acl"
KINDS = (LOGIN, MECHANISM, CERTIFICATE, TLS, PROTOCOL, ACL)

_ACL_CODES = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "topic",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "consumer group",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "cluster",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "transactional id",
}
_LOGIN_CODES = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED,
                          KafkaError.ILLEGAL_SASL_STATE})
# librdkafka's words for a broker certificate that does not verify (OpenSSL's, and its own
# hint), for a TLS client at a plaintext listener, and for a mechanism the broker lacks.
_CERT_TEXT = re.compile(r"certificate verify failed|broker certificate could not be verified", re.IGNORECASE)
_PLAINTEXT_LISTENER = re.compile(r"connecting to a PLAINTEXT broker listener", re.IGNORECASE)
_MECHANISM_TEXT = re.compile(r"unsupported SASL mechanism|mechanism \S+ (?:is )?not (?:supported|enabled)",
                             re.IGNORECASE)

# The Java client's exceptions, as a failed query's text names them. The certificate's
# own failures come as an SSLHandshakeException whose message says which check failed.
_JAVA_ACL = re.compile(r"\b(Topic|Group|Cluster|TransactionalId)AuthorizationException\b")
_JAVA_ACL_WHAT = {"Topic": "topic", "Group": "consumer group", "Cluster": "cluster",
                  "TransactionalId": "transactional id"}
_JAVA_MECHANISM = re.compile(r"\bUnsupportedSaslMechanismException\b")
_JAVA_CERT = re.compile(r"PKIX path (?:building|validation) failed|unable to find valid certification path|"
                        r"No subject alternative (?:names|DNS name)|No name matching|certificate_unknown|"
                        r"CertificateExpiredException|CertificateNotYetValidException|"
                        r"CertPathValidatorException|bad_certificate")
_JAVA_TLS = re.compile(r"\b(?:SslAuthenticationException|SSLHandshakeException|SSLException)\b")
_JAVA_PLAINTEXT = re.compile(r"Unrecognized SSL message, plaintext connection\?")
_JAVA_LOGIN = re.compile(r"\b(?:SaslAuthenticationException|IllegalSaslStateException|AuthenticationException)\b")


@dataclass(frozen=True)
class Refusal:
    """Why a broker that answers refuses this client; ``what`` is the kind of resource an ACL
    denied, ``name`` its name when known."""

    kind: str
    what: str = ""
    name: str = ""

    def line(self, where: str | None = None, config: str = "the --kafka-config file", java: bool = False) -> str:
        """One line naming the failure and the settings to check: ``where`` the servers (None:
        not known here), ``config`` the settings file; ``java`` for Spark's source, which also
        takes ``java.`` lines."""
        at = f" at {where}" if where else ""
        jaas, truststore = (" (or java.sasl.jaas.config)", " (or java.ssl.truststore.location)") if java else ("", "")
        if self.kind == LOGIN:
            return (f"Kafka{at} refused the login: SASL authentication failed; check sasl.username and "
                    f"sasl.password{jaas} in {config} (values are not shown), and sasl.mechanisms")
        if self.kind == MECHANISM:
            return (f"Kafka{at} does not offer the SASL mechanism asked for: SASL authentication failed; "
                    f"check sasl.mechanisms in {config}")
        if self.kind == CERTIFICATE:
            return (f"cannot verify the certificate of Kafka{at}: certificate verification failed; check "
                    f"ssl.ca.location{truststore} in {config}: it must name the CA certificate that signed the "
                    "broker's, and the broker's certificate must name the host given in --bootstrap")
        if self.kind == PROTOCOL:
            return (f"Kafka{at} does not speak TLS there: the TLS handshake met a plaintext listener; check "
                    f"security.protocol in {config} and the port in --bootstrap")
        if self.kind == ACL:
            return (f"Kafka{at} refused a request: not authorized to use the {self.what or 'resource'} "
                    f"{self.name or 'asked for'}; check the ACLs of the principal this client logs in as "
                    f"(sasl.username in {config}; docs/production/secured-kafka.md lists what brewstream needs)")
        return (f"the TLS handshake with Kafka{at} failed; check security.protocol and the ssl.* "
                f"settings in {config}")


def from_librdkafka(code: int, text: str) -> Refusal | None:
    """What a librdkafka error (its code and text) says about this client being refused, or
    None when it says nothing of the kind (a broker down or unreachable, say)."""
    if code in _ACL_CODES:
        return Refusal(ACL, _ACL_CODES[code])
    if _CERT_TEXT.search(text):
        return Refusal(CERTIFICATE)
    if _PLAINTEXT_LISTENER.search(text):
        return Refusal(PROTOCOL)
    if code == KafkaError.UNSUPPORTED_SASL_MECHANISM or (code in _LOGIN_CODES and _MECHANISM_TEXT.search(text)):
        return Refusal(MECHANISM)
    if code in _LOGIN_CODES:
        return Refusal(LOGIN)
    if code == KafkaError._SSL:
        return Refusal(TLS)
    return None


def from_java(text: str) -> Refusal | None:
    """What the text of a failure of the Java client (a failed query's, with its causes)
    says about it being refused, or None."""
    acl = _JAVA_ACL.search(text)
    if acl:
        return Refusal(ACL, _JAVA_ACL_WHAT[acl.group(1)])
    if _JAVA_MECHANISM.search(text):
        return Refusal(MECHANISM)
    if _JAVA_CERT.search(text):
        return Refusal(CERTIFICATE)
    if _JAVA_PLAINTEXT.search(text):
        return Refusal(PROTOCOL)
    if _JAVA_TLS.search(text):
        return Refusal(TLS)
    if _JAVA_LOGIN.search(text):
        return Refusal(LOGIN)
    return None
