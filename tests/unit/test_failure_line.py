"""A failed query is reported in one line naming its real cause."""

from service.query import failure_line

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
