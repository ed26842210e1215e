import re
import tempfile
from collections.abc import Iterable
from difflib import SequenceMatcher
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topics.errors import BrewError
from topics.kafka import DEFAULT_BOOTSTRAP, KafkaConnection, check_client_settings
from topics.kafka_config import (
    OWNED_SETTINGS,
    ConfigError,
    check_owned_settings,
    choose_bootstrap,
    hidden_values,
    hide_values,
    java_options,
    librdkafka_properties,
    load_properties,
    redact,
)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "client.properties"
    path.write_text(text)
    return path


def test_reads_properties_with_comments_and_both_separators(tmp_path: Path) -> None:
    path = write(tmp_path, "# cluster\n! also a comment\nsecurity.protocol = SASL_SSL\nsasl.mechanisms: PLAIN\n\n"
                           "sasl.password=a=b:c\n")
    assert load_properties(path) == {"security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN",
                                     "sasl.password": "a=b:c"}


def test_bad_lines_name_the_line_not_the_value(tmp_path: Path) -> None:
    with pytest.raises(BrewError, match="line 2 of") as exc:
        load_properties(write(tmp_path, "a=1\nsupersecretvalue\n"))
    assert "supersecretvalue" not in str(exc.value)


def test_sasl_scram_and_ca_reach_the_java_client() -> None:
    props = {"security.protocol": "sasl_ssl", "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "brew",
             "sasl.password": 'p"w', "ssl.ca.location": "/etc/ca.pem",
             "ssl.endpoint.identification.algorithm": "none", "java.ssl.truststore.password": "x"}
    java = java_options(props)
    assert java["security.protocol"] == "SASL_SSL"
    assert java["sasl.mechanism"] == "SCRAM-SHA-512"
    assert java["sasl.jaas.config"] == ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                                        'username="brew" password="p\\"w";')
    assert (java["ssl.truststore.type"], java["ssl.truststore.location"]) == ("PEM", "/etc/ca.pem")
    assert java["ssl.endpoint.identification.algorithm"] == ""
    assert java["ssl.truststore.password"] == "x"
    assert "java.ssl.truststore.password" not in librdkafka_properties(props)


def test_unknown_sasl_mechanism_asks_for_a_java_line() -> None:
    with pytest.raises(BrewError, match=r"java\.sasl\.jaas\.config"):
        java_options({"sasl.mechanisms": "OAUTHBEARER", "sasl.username": "u", "sasl.password": "p"})


def test_connection_repr_hides_the_properties(tmp_path: Path) -> None:
    conn = KafkaConnection.from_file("h:1", write(tmp_path, "sasl.password=hunter2\n"))
    assert "hunter2" not in repr(conn)
    assert conn.config()["sasl.password"] == "hunter2"
    assert conn.spark_options()["kafka.bootstrap.servers"] == "h:1"


# ---------------------------------------------------------------- bootstrap.servers in the file

def test_a_file_with_bootstrap_servers_is_used_when_none_is_given(tmp_path: Path) -> None:
    path = write(tmp_path, "bootstrap.servers=kafka-1:9092,kafka-2:9092\nsecurity.protocol=SASL_SSL\n"
                           "sasl.mechanisms=PLAIN\nsasl.username=brew\nsasl.password=pw\n")
    conn = KafkaConnection.from_file(None, path)
    assert conn.bootstrap == "kafka-1:9092,kafka-2:9092"
    assert conn.config()["bootstrap.servers"] == "kafka-1:9092,kafka-2:9092"
    assert conn.spark_options()["kafka.bootstrap.servers"] == "kafka-1:9092,kafka-2:9092"
    assert "bootstrap.servers" not in conn.properties  # one source of truth: conn.bootstrap
    # The same servers given again, in another order, agree with the file.
    assert KafkaConnection.from_file("KAFKA-2:9092, kafka-1:9092", path).bootstrap == "KAFKA-2:9092, kafka-1:9092"


def test_a_given_bootstrap_that_differs_from_the_file_names_both(tmp_path: Path) -> None:
    path = write(tmp_path, "bootstrap.servers=kafka-1:9092\nsasl.password=hunter2\n")
    with pytest.raises(BrewError) as exc:
        KafkaConnection.from_file("localhost:19092", path, "KAFKA_BOOTSTRAP")
    message = str(exc.value)
    assert "KAFKA_BOOTSTRAP localhost:19092" in message and "bootstrap.servers of" in message
    assert "kafka-1:9092" not in message  # no value of the file is ever shown
    assert str(path) in message and "hunter2" not in message and "\n" not in message


def test_without_either_the_default_is_used(tmp_path: Path) -> None:
    assert KafkaConnection.from_file(None, write(tmp_path, "client.id=x\n")).bootstrap == DEFAULT_BOOTSTRAP
    assert KafkaConnection.from_file(None, None).bootstrap == DEFAULT_BOOTSTRAP
    with pytest.raises(BrewError, match=r"empty bootstrap\.servers"):
        KafkaConnection.from_file(None, write(tmp_path, "bootstrap.servers= ,\n"))


# Keys and values a properties line can hold: no separator in a key, no line break anywhere,
# no surrounding blanks (they are stripped), and no comment character to start a key.
_KEY = st.from_regex(r"[a-z][a-z0-9._-]{0,20}", fullmatch=True).filter(lambda k: k not in OWNED_SETTINGS)
_VALUE = st.text(st.characters(blacklist_categories=["Cc", "Zl", "Zp", "Cs"],
                               blacklist_characters="\x85\x1c\x1d\x1e"), max_size=30).map(str.strip)
_SERVER = st.builds("{}:{}".format, st.from_regex(r"[a-z][a-z0-9.-]{0,15}", fullmatch=True),
                    st.integers(1, 65535))
_SERVERS = st.lists(_SERVER, min_size=1, max_size=4, unique=True)


@given(props=st.dictionaries(_KEY, _VALUE, max_size=8), servers=st.none() | _SERVERS,
       seps=st.lists(st.sampled_from(["=", " = ", ":", ": "]), min_size=9, max_size=9))
def test_any_properties_file_reads_back_and_picks_its_bootstrap(props: dict[str, str], servers: list[str] | None,
                                                                seps: list[str]) -> None:
    if servers is not None:
        props["bootstrap.servers"] = ",".join(servers)
    else:
        props.pop("bootstrap.servers", None)
    def text(values: dict[str, str]) -> str:
        return "# generated\n" + "".join(f"{k}{sep}{v}\n" for (k, v), sep in zip(values.items(), seps, strict=False))

    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp), text(props))
        assert load_properties(path) == props
        try:
            conn = KafkaConnection.from_file(None, path)
        except ConfigError as exc:  # a key librdkafka does not know: named, its value never shown
            said = str(exc).replace(str(path), "")
            assert "configuration error" in said
            own = _said(write(Path(tmp), text({k: "0" for k in props})))
            assert not [v for v in props.values() if quotes(said, v, own, props)], exc
            return
    expected = ",".join(servers) if servers is not None else DEFAULT_BOOTSTRAP
    assert conn.bootstrap == expected and conn.config()["bootstrap.servers"] == expected


def quotes(said: str, value: str, own: str, names: Iterable[str]) -> bool:
    """Oracle: whether a message ``said`` shows ``value``. A value can also be a piece of the
    message's own wording or of a setting's name it mentions: an occurrence that lies wholly
    within the wording (what ``own``, the message for the same keys with a plain value,
    shares with it, in pieces of 4 characters or more) or within a name in ``names`` shows
    nothing. Values shorter than 4 characters are not looked for."""
    if len(value) < 4:
        return False
    covered = [False] * len(said)
    for block in SequenceMatcher(None, said, own, autojunk=False).get_matching_blocks():
        if block.size >= 4:
            covered[block.a:block.a + block.size] = [True] * block.size
    for name in names:
        for m in re.finditer(re.escape(name), said):
            covered[m.start():m.end()] = [True] * len(name)
    return any(not all(covered[m.start():m.start() + len(value)])
               for m in re.finditer(f"(?={re.escape(value)})", said))


def test_the_oracle_tells_a_value_shown_from_the_messages_own_words() -> None:
    own = "librdkafka refuses client.id (values are not shown)"
    assert quotes("librdkafka refuses client.id (values are not shown) secret-1", "secret-1", own, ["client.id"])
    assert quotes("refuses client.id: client.id-secret", "client.id-secret", "refuses client.id: 0", ["client.id"])
    assert not quotes(own, "valu", own, ["client.id"])
    assert not quotes("refuses client.id and sasl.kerberos.keytab", "sasl.kerberos.keytab", "refuses client.id",
                      ["client.id", "sasl.kerberos.keytab"])
    assert not quotes(own, "abc", own, [])


def _said(path: Path) -> str:
    """What loading ``path`` says as a configuration error (the path left out), or nothing."""
    try:
        KafkaConnection.from_file(None, path)
    except (ConfigError, BrewError) as exc:
        return str(exc).replace(str(path), "")
    return ""


@given(given_servers=_SERVERS, file_servers=_SERVERS)
def test_given_and_file_servers_agree_exactly_when_they_name_the_same_set(given_servers: list[str],
                                                                          file_servers: list[str]) -> None:
    given_text, file_text = ",".join(given_servers), ",".join(file_servers)
    path = Path("client.properties")
    if set(given_servers) == set(file_servers):
        assert choose_bootstrap(given_text, "--bootstrap", file_text, path, DEFAULT_BOOTSTRAP) == given_text
    else:
        with pytest.raises(BrewError) as exc:
            choose_bootstrap(given_text, "--bootstrap", file_text, path, DEFAULT_BOOTSTRAP)
        assert f"--bootstrap {given_text}" in str(exc.value) and "bootstrap.servers of" in str(exc.value)
        assert file_text not in str(exc.value) or file_text in given_text  # the file's servers are never shown
    assert choose_bootstrap(None, "--bootstrap", file_text, path, DEFAULT_BOOTSTRAP) == file_text
    assert choose_bootstrap(given_text, "--bootstrap", None, None, DEFAULT_BOOTSTRAP) == given_text


def test_a_setting_brewstream_owns_is_refused_naming_the_key_not_the_value(tmp_path: Path) -> None:
    path = write(tmp_path, "security.protocol=SASL_SSL\njava.isolation.level = Read_Uncommitted\n")
    with pytest.raises(BrewError) as exc:
        KafkaConnection.from_file(None, path)
    message = str(exc.value)
    assert str(path) in message and "java.isolation.level" in message and "only committed input counts" in message
    assert "uncommitted" not in message.lower() and "set it to read_committed" in message
    with pytest.raises(BrewError, match=r"transactional\.id, which brewstream sets itself.*fence each other"):
        KafkaConnection.from_file(None, write(tmp_path, "transactional.id=shared\n"))


def test_brewstreams_own_values_may_be_repeated(tmp_path: Path) -> None:
    path = write(tmp_path, "acks=-1\nrequest.required.acks = all\nenable.idempotence=True\n"
                           "isolation.level=read_committed\njava.isolation.level=READ_COMMITTED\n")
    assert KafkaConnection.from_file(None, path).config()["acks"] == "-1"


def _refused(props: dict[str, str]) -> str | None:
    """The oracle: the first key whose value brewstream cannot run with."""
    for key, value in props.items():
        k, v = key.strip().lower(), value.strip().lower()
        if (k == "transactional.id"
                or (k in ("isolation.level", "java.isolation.level") and v != "read_committed")
                or (k == "enable.idempotence" and v not in ("true", "t", "1"))
                or (k in ("acks", "request.required.acks") and v not in ("all", "-1"))):
            return key
    return None


_OWNED_KEY = st.sampled_from(sorted(OWNED_SETTINGS)).flatmap(
    lambda k: st.sampled_from([k, k.upper(), f" {k} "]))
_OWNED_VALUE = st.sampled_from(["read_committed", "READ_COMMITTED", "read_uncommitted", "true", "t", "1", "false",
                                "0", "all", "-1", "1", "0", "", "x"]) | _VALUE


@given(props=st.dictionaries(_OWNED_KEY | _KEY, _OWNED_VALUE, max_size=6))
def test_owned_settings_are_refused_exactly_when_the_oracle_refuses(props: dict[str, str]) -> None:
    expected = _refused(props)
    if expected is None:
        check_owned_settings(props, None)
        return
    with pytest.raises(BrewError) as exc:
        check_owned_settings(props, None)
    assert f"sets {expected}," in str(exc.value)


# ---------------------------------------------------------------- values never shown

SECRET = "Zq7-s3cr3t-9Xv"
# Keys people use, and keys a secret gets pasted under by mistake.
KEYS = ["security.protocol", "sasl.mechanisms", "sasl.mechanism", "sasl.username", "sasl.password", "client.id",
        "ssl.ca.location", "ssl.key.password", "linger.ms", "socket.timeout.ms", "no.such.setting",
        "ssl.endpoint.identification.algorithm", "enable.ssl.certificate.verification", "queue.buffering.max.ms"]


@pytest.mark.parametrize("key", KEYS)
def test_a_refused_value_is_a_configuration_error_naming_the_key_only(key: str, tmp_path: Path) -> None:
    path = write(tmp_path, f"{key}={SECRET}\n")
    try:
        KafkaConnection.from_file(None, path)
    except BrewError as exc:
        text = str(exc)
        assert SECRET not in text
        assert "configuration error" in text and key in text, text
        assert "cannot reach" not in text and "sandbox up" not in text


@settings(max_examples=150, deadline=None)
@given(key=st.sampled_from(KEYS), value=st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1,
                                                 max_size=40).map(str.strip).filter(bool))
def test_checking_settings_is_total_and_never_quotes_a_value(key: str, value: str) -> None:
    try:
        check_client_settings({key: value}, None)
    except ConfigError as exc:
        assert key in str(exc)
        try:
            check_client_settings({key: "0"}, None)
            own = ""
        except ConfigError as plain:
            own = str(plain)
        assert not quotes(str(exc), value, own, KEYS), exc


def test_redaction_hides_every_registered_value_in_one_pass() -> None:
    hide_values({"sasl.password": "hunter2-long", "client.id": "hunter2", "security.protocol": "SASL_SSL"})
    text = "auth failed for hunter2-long as hunter2 over SASL_SSL"
    shown = redact(text)
    assert "hunter2" not in shown
    assert shown == "auth failed for <sasl.password> as <client.id> over SASL_SSL"


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.text(st.characters(codec="ascii", categories=("L", "N", "P")), min_size=6, max_size=20),
                       min_size=1, max_size=5, unique=True),
       filler=st.lists(st.text(max_size=10), max_size=6))
def test_no_registered_value_survives_redaction(values: list[str], filler: list[str]) -> None:
    hide_values({f"k{i}": v for i, v in enumerate(values)})
    text = "".join(f + v for f, v in zip([*filler, *[""] * len(values)], values, strict=False))
    shown = redact(text)
    placeholders = [f"<k{i}>" for i in range(len(values))]
    registered = set(hidden_values())
    for v in values:
        if v in registered and not any(v in p for p in placeholders):
            assert v not in shown.replace("<", "\0").replace(">", "\0") or all(
                v not in part for part in shown.split("\0")), (v, shown)
