import time

from tests.support.helpers import brew
from topics.catalog import ALL_TOPICS, CHANGELOG
from topics.kafka import KafkaConnection, serving_problem


def test_create_twice_and_describe(kafka: KafkaConnection) -> None:
    first = brew(kafka, "topics", "create", check=True)
    second = brew(kafka, "topics", "create", check=True)
    assert all(line.split()[0] in ("created", "exists") for line in first.stdout.splitlines())
    assert [line.split() for line in second.stdout.splitlines()] == [["exists", t.name] for t in ALL_TOPICS]
    described = brew(kafka, "topics", "describe", check=True).stdout.splitlines()
    changelog = next(line for line in described if line.startswith(CHANGELOG + " "))
    assert "partitions=3" in changelog
    assert "cleanup.policy=compact" in changelog
    assert "min.cleanable.dirty.ratio=0.01" in changelog


def test_a_topic_missing_from_the_cluster_is_said_with_the_command_that_makes_it(kafka: KafkaConnection) -> None:
    """What a daemon waits on while a topic it needs is gone (deleted under it): the wait
    says so, and how to end it."""
    problem = serving_problem(kafka, [f"gone-{time.time_ns()}"])
    assert problem is not None and "is not in the cluster's metadata" in problem
    assert "`brewstream topics create` makes it again" in problem
