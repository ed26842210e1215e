"""Kafka client settings from a properties file, for librdkafka and for Spark's source (pure).

The file holds librdkafka properties (``security.protocol=SASL_SSL``,
``sasl.mechanisms=SCRAM-SHA-512``, ``sasl.username``, ``sasl.password``,
``ssl.ca.location`` …). Every confluent-kafka client takes them as they are; Spark's
source is a Java client, so the common security settings are translated to their Java
names, and lines starting with ``java.`` go to Spark only (prefix removed) for
anything without a translation.

Messages of brewstream's own name keys only, never a value of the file, whatever key it
sits under (people paste secrets into the wrong key). A value librdkafka refuses is found
when the file is loaded (``check_client_settings``), before any client quotes it back in its
own error text. And every secret of a loaded file (``is_secret``: passwords, keys, tokens,
JAAS configs, every ``java.`` line) is registered with ``redact``, which the CLI's output,
the log, the HTTP probes and the board pass their text through, so a secret that reaches a
message by any other way shows as ``<key>``: matched as a whole word only, so that a user
name, a client id or a path, which are not secrets, never blank out parts of other words.
A few settings are brewstream's own (``OWNED_SETTINGS``): a file may repeat brewstream's
value but not set another.

Most users' ``client.properties`` also set ``bootstrap.servers``: it is used when no
``--bootstrap`` (or ``KAFKA_BOOTSTRAP``) is given, and a given one that names other
servers is refused rather than silently preferred (``choose_bootstrap``).
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from topics.errors import BrewError

JAVA_PREFIX = "java."
BOOTSTRAP_SERVERS = "bootstrap.servers"
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def load_properties(path: Path) -> dict[str, str]:
    """``key=value`` (or ``key: value``) lines; ``#`` and ``!`` start comments."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise BrewError(f"cannot read the Kafka config {path}: {exc.strerror}") from None
    props: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if sep < 0:
            raise BrewError(f"line {n} of {path} is not key=value")
        props[line[:sep].strip()] = line[sep + 1:].strip()
    return props


# Settings brewstream gives each client itself, because its guarantees rest on them: the
# values a file may repeat, brewstream's first (None: no value at all), and why. Another
# value would reach every client that does not set the key itself (``KafkaConnection.
# config``) or win over Spark's source defaults (``java.``), quietly breaking exactly-once.
_COMMITTED_ONLY = "only committed input counts (aborted upstream transactions are skipped)"
_TRANSACTIONS = "the changelog is written in transactions, which need it"
OWNED_SETTINGS: dict[str, tuple[tuple[str, ...] | None, str]] = {
    "transactional.id": (None, "each transactional producer is named after what it guards (a changelog, a "
                               "replay ledger), and clients that share one id fence each other"),
    "isolation.level": (("read_committed",), _COMMITTED_ONLY),
    JAVA_PREFIX + "isolation.level": (("read_committed",), _COMMITTED_ONLY),
    "enable.idempotence": (("true", "t", "1"), _TRANSACTIONS),  # librdkafka's spellings of true
    "acks": (("all", "-1"), _TRANSACTIONS),
    "request.required.acks": (("all", "-1"), _TRANSACTIONS),  # librdkafka's alias of acks
}


def check_owned_settings(props: dict[str, str], path: Path | None) -> None:
    """Refuse, naming the key (never the value), a setting brewstream owns with a value it
    cannot run with; the same value as brewstream's is fine."""
    for key, value in props.items():
        owned = OWNED_SETTINGS.get(key.strip().lower())
        if owned is None:
            continue
        allowed, why = owned
        if allowed is None or value.strip().lower() not in allowed:
            keep = "" if allowed is None else f" (or set it to {allowed[0]})"
            raise BrewError(f"{path or 'the Kafka config'} sets {key}, which brewstream sets itself: {why}; "
                            f"drop that line{keep}")


def choose_bootstrap(given: str | None, given_as: str, from_file: str | None, path: Path | None,
                     default: str) -> str:
    """The bootstrap servers to use: the given ones (``--bootstrap`` or ``KAFKA_BOOTSTRAP``,
    named by ``given_as``), else the file's ``bootstrap.servers``, else ``default``. Given
    ones that name other servers than the file are an error naming both, since either
    choice would surprise someone."""
    if from_file is not None and not server_list(from_file):
        raise BrewError(f"{path} sets an empty {BOOTSTRAP_SERVERS}")
    if given is None:
        return from_file if from_file is not None else default
    if from_file is not None and server_list(given) != server_list(from_file):
        # The file's servers are not quoted: brewstream's own messages quote no value of the file.
        raise BrewError(f"{given_as} {given} and the {BOOTSTRAP_SERVERS} of {path} name different "
                        f"servers; drop one of them or make them agree")
    return given


def server_list(servers: str) -> frozenset[str]:
    """``host:port`` entries, whatever their order, spacing or host case."""
    return frozenset(s.strip().lower() for s in servers.split(",") if s.strip())


def librdkafka_properties(props: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in props.items() if not k.startswith(JAVA_PREFIX)}


def java_options(props: dict[str, str]) -> dict[str, str]:
    """The same settings as Java client properties (Spark adds the ``kafka.`` prefix)."""
    out: dict[str, str] = {}
    if "security.protocol" in props:
        out["security.protocol"] = props["security.protocol"].upper()
    mechanism = (props.get("sasl.mechanisms") or props.get("sasl.mechanism") or "").upper()
    if mechanism:
        out["sasl.mechanism"] = mechanism
    if "sasl.username" in props or "sasl.password" in props:
        module = _LOGIN_MODULES.get(mechanism or "PLAIN")
        if module is None:
            raise BrewError(f"sasl.mechanisms={mechanism} has no translation for Spark's source; "
                            "add a java.sasl.jaas.config line")
        user, password = _quoted(props.get("sasl.username", "")), _quoted(props.get("sasl.password", ""))
        out["sasl.jaas.config"] = f'{module} required username="{user}" password="{password}";'
    if "ssl.ca.location" in props:
        out["ssl.truststore.type"] = "PEM"
        out["ssl.truststore.location"] = props["ssl.ca.location"]
    if "ssl.certificate.location" in props and "ssl.key.location" in props:
        # Java reads a PEM key store inline: the chain and the key as text.
        out["ssl.keystore.type"] = "PEM"
        out["ssl.keystore.certificate.chain"] = _read(props["ssl.certificate.location"], "ssl.certificate.location")
        out["ssl.keystore.key"] = _read(props["ssl.key.location"], "ssl.key.location")
    if "ssl.key.password" in props:
        out["ssl.key.password"] = props["ssl.key.password"]
    if "ssl.endpoint.identification.algorithm" in props:
        algo = props["ssl.endpoint.identification.algorithm"]
        out["ssl.endpoint.identification.algorithm"] = "" if algo.lower() == "none" else algo
    for key, value in props.items():
        if key.startswith(JAVA_PREFIX):
            out[key[len(JAVA_PREFIX):]] = value
    return out


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _read(path: str, key: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise BrewError(f"cannot read the file named by {key}: {exc.strerror}") from None


# ---------------------------------------------------------------- refused settings

class ConfigError(BrewError):
    """A setting of the Kafka config file that a client refuses: a configuration error, not
    an unreachable cluster."""


# The SASL mechanisms the Kafka clients know; any other is refused here, since both clients
# would only refuse it later, quoting it.
SASL_MECHANISMS = frozenset({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER"})
# Settings librdkafka's messages name besides the file's own keys (``sasl.username and
# sasl.password must be set``); only these names, never anything else of a message, are quoted.
_NAMED_SETTINGS = frozenset({"security.protocol", "sasl.mechanisms", "sasl.mechanism", "sasl.username",
                             "sasl.password", "ssl.ca.location", "ssl.certificate.location", "ssl.key.location",
                             "ssl.key.password", "ssl.keystore.location", "ssl.keystore.password",
                             "sasl.oauthbearer.config", "sasl.oauthbearer.method", "sasl.kerberos.keytab"})
_NAME = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+")


def names_in(reason: str, settings: dict[str, str]) -> list[str]:
    """The setting names a librdkafka message mentions, in order, once each (no value)."""
    known = _NAMED_SETTINGS | set(settings)
    return list(dict.fromkeys(n for n in _NAME.findall(reason) if n in known))


# ---------------------------------------------------------------- redaction

# What a --kafka-config file's secret is, by its key: librdkafka's sensitive properties (its
# CONFIGURATION.md), the Java client's Password-typed settings, and any key that names a
# password, a secret, a token, a credential, a JAAS config or an inline PEM. A user name, a
# client id, a server or a file's path is not a secret: it is shown (librdkafka's own
# settings dump hides sasl.username too, but a user name is what an operator checks the
# ACLs of, and the docs' own ``brew`` would hide every word ``brew`` otherwise).
SECRET_KEYS = frozenset({"sasl.password", "ssl.key.password", "ssl.keystore.password", "ssl.truststore.password",
                         "sasl.oauthbearer.client.secret", "sasl.oauthbearer.config", "sasl.jaas.config",
                         "ssl.key.pem", "ssl.certificate.pem", "ssl.ca.pem", "ssl_key", "ssl.keystore.key",
                         "ssl.keystore.certificate.chain", "ssl.truststore.certificates",
                         "sasl.oauthbearer.assertion.private.key.pem",
                         "sasl.oauthbearer.assertion.private.key.passphrase"})
_SECRET_WORDS = ("password", "passphrase", "secret", "token", "credential", "jaas", "pem", "ssl_key")
# A JAAS config's own secrets (``password="…"``), hidden on their own as well as inside the whole line.
_JAAS_SECRET = re.compile(r"""\b\w*(?:password|secret|token|credential)\w*\s*=\s*"""
                          r"""(?:"((?:[^"\\]|\\.)*)"|'([^']*)'|([^\s;"']+))""", re.IGNORECASE)
# Words a value may be without being anything but a setting's name for a mode: shown as is.
_PLAIN_VALUES = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL", "TRUE", "FALSE", "NONE", "HTTPS",
                           "READ_COMMITTED", "ALL", *SASL_MECHANISMS})
# A secret shorter than this is not hidden: as a whole word it would still blank out
# ordinary text (a count of 123, say) and so show itself by where the blanks fall.
MIN_HIDDEN = 4
_hidden: dict[str, str] = {}
_table: _Table | None = None
_hidden_lock = threading.Lock()


def is_secret(key: str) -> bool:
    """Whether the value under ``key`` is a secret: a ``java.`` line's (it may carry a JAAS
    config), a key of ``SECRET_KEYS``, or one naming a secret (``_SECRET_WORDS``)."""
    k = key.strip().lower()
    return k.startswith(JAVA_PREFIX) or k in SECRET_KEYS or any(w in k for w in _SECRET_WORDS)


def secrets_of(props: dict[str, str]) -> dict[str, str]:
    """Pure: each secret value of ``props`` (``is_secret``), and the secrets inside a JAAS
    config, in every form an output may write them (as given, quoted for a JAAS line, escaped
    in a JSON string), each with the name it is shown as."""
    found: dict[str, str] = {}
    for key, value in props.items():
        if not is_secret(key):
            continue
        shown = f"<{key.strip()}>"
        forms = [value.strip()]
        if key.strip().lower() == "sasl.password":
            forms.append(_quoted(value.strip()))  # as the JAAS config for Spark's source writes it
        if "jaas" in key.lower():
            for m in _JAAS_SECRET.finditer(value):
                inner = next(g for g in m.groups() if g is not None)
                forms += [inner, inner.replace('\\"', '"').replace("\\\\", "\\")]
        # As a JSON string writes it too (--log-format json): a quote, a backslash or a
        # letter beyond ASCII is escaped there, and the escaped form would show instead.
        forms += [json.dumps(f, ensure_ascii=ascii)[1:-1] for f in list(forms) for ascii in (True, False)]
        for form in forms:
            if len(form) >= MIN_HIDDEN and form.upper() not in _PLAIN_VALUES:
                found.setdefault(form, shown)
    return found


def hide_values(props: dict[str, str]) -> None:
    """Register the secrets of a loaded config file (``secrets_of``): ``redact`` shows each
    as ``<key>`` wherever it stands as a whole word."""
    hide(secrets_of(props))


def hide(found: dict[str, str]) -> None:
    """Register secrets (value -> what it is shown as) that reach a client by another way
    than the file's lines."""
    global _table
    with _hidden_lock:
        for value, shown in found.items():
            if len(value) >= MIN_HIDDEN:
                _hidden.setdefault(value, shown)
        _table = _Table.of(_hidden) if _hidden else None


@dataclass(frozen=True)
class _Table:
    any: re.Pattern[str]  # finds whether a text holds a secret at all
    each: tuple[tuple[re.Pattern[str], str], ...]  # a secret's every occurrence, overlapping ones too

    @classmethod
    def of(cls, hidden: dict[str, str]) -> _Table:
        ordered = sorted(hidden, key=len, reverse=True)
        return cls(re.compile("|".join(whole_word(v) for v in ordered)),
                   tuple((re.compile(f"(?=({whole_word(v)}))"), hidden[v]) for v in ordered))


def whole_word(value: str) -> str:
    """A regex matching ``value`` only where it is not part of a longer run of word
    characters: an edge of the value that is a word character must meet a non-word one (or
    the text's end), so ``brew`` is found in ``user brew.`` but never in ``brewstream``. An
    edge that is punctuation needs nothing: the value itself is the boundary there."""
    head = r"(?<!\w)" if re.match(r"\w", value[0]) else ""
    tail = r"(?!\w)" if re.match(r"\w", value[-1]) else ""
    return f"{head}{re.escape(value)}{tail}"


def hidden_values() -> list[str]:
    """Every registered secret (for the same redaction done in Spark's JVM)."""
    with _hidden_lock:
        return list(_hidden)


def forget_values() -> None:
    """Drop every registered secret (tests that register their own)."""
    global _table
    with _hidden_lock:
        _hidden.clear()
        _table = None


def redact(text: str) -> str:
    """``text`` with every registered secret that stands as a whole word (``whole_word``)
    replaced by its key's name; where occurrences overlap (of one secret, or of two), the
    whole stretch they cover is replaced once, so no part of either shows. Anything else,
    however much it looks like a config value, is left as it is."""
    table = _table
    if table is None or table.any.search(text) is None:
        return text
    spans = sorted((m.start(), m.start() + len(m.group(1)), shown) for pattern, shown in table.each
                   for m in pattern.finditer(text))
    out: list[str] = []
    end = 0
    for start, stop, shown in spans:
        if start < end:  # overlaps the stretch being replaced: widen it
            end = max(end, stop)
            continue
        out += [text[end:start], shown]
        end = stop
    out.append(text[end:])
    return "".join(out)
