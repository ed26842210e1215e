from pathlib import Path

import pytest

from topics.errors import BrewError
from topics.kafka import KafkaConnection
from topics.kafka_config import java_options, librdkafka_properties, load_properties


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
    with pytest.raises(BrewError, match="--bootstrap"):
        load_properties(write(tmp_path, "bootstrap.servers=x:1\n"))


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
