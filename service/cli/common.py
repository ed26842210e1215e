"""What every command shares: help settings, durations, the Kafka and topic options."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import click
from click.core import ParameterSource

from topics.clock import parse_duration
from topics.kafka import DEFAULT_BOOTSTRAP, KafkaConnection

F = TypeVar("F", bound=Callable[..., Any])

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class Duration(click.ParamType):
    """A flag's duration (``topics.clock.parse_duration``), in seconds."""

    name = "duration"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float):
            return value
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


DURATION = Duration()


def kafka_options(fn: F) -> F:
    """--bootstrap and --kafka-config; the command receives the connection as ``conn``."""
    @functools.wraps(fn)
    def with_connection(*args: Any, bootstrap: str, kafka_config: Path | None, **kwargs: Any) -> Any:
        # Only a --bootstrap the user gave competes with the file's bootstrap.servers; the
        # default gives way to it.
        source = click.get_current_context().get_parameter_source("bootstrap")
        given = {ParameterSource.COMMANDLINE: "--bootstrap", ParameterSource.ENVIRONMENT: "KAFKA_BOOTSTRAP"}
        given_as = given.get(source) if source is not None else None
        conn = KafkaConnection.from_file(bootstrap if given_as else None, kafka_config, given_as or "--bootstrap")
        return fn(*args, conn=conn, **kwargs)

    wrapped = click.option(
        "--kafka-config", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
        envvar="BREWSTREAM_KAFKA_CONFIG", show_envvar=True,
        help="librdkafka properties file (SASL/SSL settings) for every Kafka client, Spark's source "
             "included. Its values are never printed.",
    )(with_connection)
    wrapped = click.option(
        "--bootstrap", envvar="KAFKA_BOOTSTRAP", default=DEFAULT_BOOTSTRAP, show_default=True,
        show_envvar=True, help="Kafka bootstrap servers (host:port[,host:port…]); when not given, the "
                               "--kafka-config file's bootstrap.servers, if it sets one.",
    )(wrapped)
    return cast(F, wrapped)


def topic_prefix_option(fn: F) -> F:
    return click.option(
        "--topic-prefix", default="", show_default=True, envvar="BREWSTREAM_TOPIC_PREFIX", show_envvar=True,
        help="Prefix for every topic name, to run a separate pipeline on the same cluster.",
    )(fn)
