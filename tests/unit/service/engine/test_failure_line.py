"""A failed query is reported in one line naming its real cause."""

from hypothesis import given
from hypothesis import strategies as st

from service.engine.query import failure_line

PY4J = """An error occurred while calling o151.getResult.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 1.0 failed
	at org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2935)
Caused by: org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/x/worker.py", line 1, in main
TypeError: 'int' object is not iterable
"""


def test_the_python_error_of_a_worker_is_the_cause() -> None:
    assert failure_line(PY4J) == "TypeError: 'int' object is not iterable"


def test_a_java_cause_beneath_the_wrappers() -> None:
    text = (": org.apache.spark.SparkException: Job aborted\n"
            "org.apache.spark.sql.kafka010.KafkaIllegalStateException: Some data may have been lost\n")
    assert failure_line(text) == "KafkaIllegalStateException: Some data may have been lost"


def test_a_full_disk_says_what_to_do() -> None:
    line = failure_line("java.io.IOException: No space left on device\n\tat x")
    assert "No space left on device" in line and "free space" in line


def test_never_the_traceback_framing() -> None:
    assert failure_line("Return Message: Traceback (most recent call last):\nsomething odd") == "something odd"


def test_a_wrapper_that_names_nothing_below_it_gives_its_own_message() -> None:
    text = ("An error occurred while calling None.org.apache.spark.sql.classic.SparkSession.\n"
            ": org.apache.spark.SparkException: Could not parse Master URL: 'local[abc]'\n"
            "\tat org.apache.spark.SparkContext$.createTaskScheduler(SparkContext.scala:3300)\n")
    assert failure_line(text) == "SparkException: Could not parse Master URL: 'local[abc]'"


_LINES = st.sampled_from(["", ": ", "\tat x.y(Z.java:1)", "Caused by: ", "Traceback (most recent call last):",
                          "org.apache.spark.SparkException: ", "java.io.IOException: No space left on device",
                          "An error occurred while calling o1.x.", "TypeError: ", "Exception: "])


@given(st.lists(st.one_of(_LINES, st.text(), st.builds(str.__add__, _LINES, st.text())), max_size=8))
def test_any_text_gives_one_line(lines: list[str]) -> None:
    line = failure_line("\n".join(lines))
    assert line and "\n" not in line and "\r" not in line and len(line) <= 600


def test_kafka_refusing_the_source_is_named_with_the_settings_to_check() -> None:
    text = ("[STREAM_FAILED] Query [id = 1] terminated with exception: org.apache.kafka.common.errors."
            "SslAuthenticationException: SSL handshake failed SQLSTATE: XXKST\n=== Streaming Query ===\n"
            "cause: javax.net.ssl.SSLHandshakeException: PKIX path validation failed: java.security.cert."
            "CertPathValidatorException: signature check failed")
    line = failure_line(text)
    assert "certificate verification failed" in line and "ssl.ca.location" in line, line
    line = failure_line("org.apache.kafka.common.errors.SaslAuthenticationException: Authentication failed: "
                        "Invalid username or password")
    assert "authentication failed" in line and "java.sasl.jaas.config" in line, line
