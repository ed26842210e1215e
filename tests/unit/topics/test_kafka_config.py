import json
import re
import tempfile
from collections.abc import Iterable, Iterator
from difflib import SequenceMatcher
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topics.errors import BrewError
from topics.kafka import DEFAULT_BOOTSTRAP, KafkaConnection, check_client_settings
from topics.kafka_config import (
    MIN_HIDDEN,
    OWNED_SETTINGS,
    ConfigError,
    check_owned_settings,
    choose_bootstrap,
    forget_values,
    hidden_values,
    hide_values,
    is_secret,
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
        # The message for the same key with a plain value is its own wording; a plain value
        # the key accepts ("0" for linger.ms) says nothing, so another plain one is tried.
        own = ""
        for plain_value in ("0", "x"):
            try:
                check_client_settings({key: plain_value}, None)
            except ConfigError as plain:
                own = str(plain)
                break
        assert not quotes(str(exc), value, own, KEYS), exc


@pytest.fixture
def registry() -> Iterator[None]:
    """A registry of secrets of this test's own (it is the process's, shared by every client)."""
    forget_values()
    yield
    forget_values()


def test_only_secrets_are_hidden_and_only_as_whole_words(registry: None) -> None:
    # The docs' own example (docs/production/secured-kafka.md): every value of 4+ characters
    # was hidden, inside any word, so `brew` blanked out the board's "cold brew", every topic
    # name and the `brewstream` of each hint. A user name, a client id, a server and a path
    # are not secrets: shown as they are.
    hide_values({"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "brew",
                 "sasl.password": "hunter2-long", "ssl.ca.location": "/etc/kafka/ca.pem", "client.id": "brew-ops"})
    text = ("cold brew 12; topic brew.orders.v1; start it with `brewstream sandbox up`; client brew-ops; "
            "ca /etc/kafka/ca.pem; login hunter2-long failed (hunter2-long)")
    assert redact(text) == text.replace("hunter2-long", "<sasl.password>")
    assert redact("hunter2-longer xhunter2-long hunter2-long_x") == "hunter2-longer xhunter2-long hunter2-long_x"
    assert hidden_values() == ["hunter2-long"]


def test_every_secret_key_and_java_line_is_hidden(registry: None) -> None:
    props = {"sasl.password": "p-one", "ssl.key.password": "p-two", "ssl.keystore.password": "p-three",
             "ssl.truststore.password": "p-four", "sasl.oauthbearer.client.secret": "p-five",
             "sasl.oauthbearer.config": "principal=p-six", "ssl.key.pem": "p-seven", "ssl_key": "p-eight",
             "my.api.token": "p-nine", "sasl.oauthbearer.assertion.private.key.passphrase": "p-ten",
             "java.request.timeout.ms": "31000", "java.client.id": "p-eleven",
             "java.sasl.jaas.config": 'x.PlainLoginModule required username="brew" password="p\\"twelve";'}
    hide_values(props)
    for key, value in props.items():
        assert redact(f"[{value}]") == f"[<{key}>]", key
    assert redact('said p"twelve') == "said <java.sasl.jaas.config>"  # a JAAS config's password alone
    assert redact("user brew") == "user brew"
    for key in ("sasl.username", "client.id", "ssl.ca.location", "ssl.key.location", "bootstrap.servers",
                "security.protocol", "group.id", "linger.ms"):
        assert not is_secret(key), key


def test_a_password_is_hidden_as_the_java_client_is_given_it(registry: None) -> None:
    props = {"sasl.mechanisms": "PLAIN", "sasl.username": "brew", "sasl.password": 'pa"ss\\word'}
    hide_values(props)
    jaas = java_options(props)["sasl.jaas.config"]
    assert 'pa\\"ss\\\\word' in jaas  # quoted for JAAS
    assert redact(jaas).endswith(' password="<sasl.password>";'), redact(jaas)


def test_a_secret_is_hidden_in_a_json_log_line_too(registry: None) -> None:
    # --log-format json escapes a quote, a backslash and letters beyond ASCII: the escaped
    # form showed, which reads back as the secret.
    secret = 'pa"ss\\wörd'
    hide_values({"sasl.password": secret})
    for ascii_only in (True, False):
        line = json.dumps({"message": f"login with {secret} failed"}, ensure_ascii=ascii_only)
        shown = redact(line)
        assert json.loads(shown)["message"] == "login with <sasl.password> failed", shown


def test_overlapping_secrets_are_hidden_whole(registry: None) -> None:
    hide_values({"a.password": "abcd-ef", "b.password": "ef-ghij"})
    assert redact("x abcd-ef-ghij y") == "x <a.password> y"  # no half of either shows
    assert redact("ef-ghij abcd-ef") == "<b.password> <a.password>"


def test_short_and_mode_like_values_are_not_hidden(registry: None) -> None:
    hide_values({"sasl.password": "abc", "java.security.protocol": "SASL_SSL",
                 "java.isolation.level": "read_committed"})
    assert hidden_values() == []


_MODES = {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL", "TRUE", "FALSE", "NONE", "HTTPS", "READ_COMMITTED", "ALL",
          "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER"}
_SECRET = st.text(st.characters(codec="ascii", categories=("L", "N", "P", "S"), exclude_characters="<>"),
                  min_size=MIN_HIDDEN, max_size=16).filter(lambda v: v.upper() not in _MODES)
_TEXT = st.text(st.characters(codec="ascii", exclude_characters="<>"), max_size=40)


def whole_occurrences(value: str, text: str) -> list[int]:
    """Independently of the module: where ``value`` stands in ``text`` with no word character
    glued to an edge of it that is a word character itself."""
    def word(c: str) -> bool:
        return c.isalnum() or c == "_"

    found = []
    at = text.find(value)
    while at >= 0:
        before = text[at - 1] if at > 0 else ""
        after = text[at + len(value)] if at + len(value) < len(text) else ""
        if not (word(value[0]) and before and word(before)) and not (word(value[-1]) and after and word(after)):
            found.append(at)
        at = text.find(value, at + 1)
    return found


@settings(max_examples=400, deadline=None)
@given(secrets=st.lists(_SECRET, min_size=1, max_size=4, unique=True), data=st.data())
def test_text_without_a_whole_secret_is_never_changed(secrets: list[str], data: st.DataObject) -> None:
    # Texts built of the secrets themselves and anything around them, glued or not: many
    # hold a secret inside a longer word, which must stay as it is.
    pieces = data.draw(st.lists(st.sampled_from(secrets) | _TEXT | st.sampled_from(["x", "_", "9", " ", "."]),
                                max_size=8))
    text = "".join(pieces)
    forget_values()
    hide_values({f"k{i}.password": v for i, v in enumerate(secrets)})
    shown = redact(text)
    forget_values()
    if not any(whole_occurrences(v, text) for v in secrets):
        assert shown == text


@settings(max_examples=300, deadline=None)
@given(secrets=st.lists(_SECRET, min_size=1, max_size=4, unique=True),
       fillers=st.lists(_TEXT, min_size=4, max_size=4),
       seps=st.lists(st.sampled_from(list(" .,:;=\"'()[]/@-")), min_size=8, max_size=8))
def test_a_secret_that_stands_as_a_whole_word_never_survives(secrets: list[str], fillers: list[str],
                                                             seps: list[str]) -> None:
    forget_values()
    hide_values({f"k{i}.password": v for i, v in enumerate(secrets)})
    text = "".join(f + seps[2 * i] + v + seps[2 * i + 1] for i, (f, v) in enumerate(zip(fillers, secrets,
                                                                                           strict=False)))
    shown = redact(text)
    forget_values()
    # Outside the placeholders (<k0.password> …), no secret stands as a whole word: not the
    # ones the text was built with, nor one a filler happened to hold.
    for part in re.split(r"<k\d\.password>", shown):
        for v in secrets:
            assert not whole_occurrences(v, part), (v, text, shown)
