"""Where `make install` put the Maven jars, and the classpaths built from them."""

from __future__ import annotations

import os
from pathlib import Path

from topics.errors import BrewError

REPO_ROOT = Path(__file__).resolve().parent.parent


def jars_dir() -> Path:
    return Path(os.environ.get("BREWSTREAM_JARS", REPO_ROOT / ".cache" / "jars"))


def _jars(kind: str) -> list[Path]:
    folder = jars_dir() / kind
    found = sorted(folder.glob("*.jar"))
    if not found:
        raise BrewError(f"no {kind} jars in {folder}; run `make install` first")
    return found


def broker_classpath() -> str:
    return os.pathsep.join(str(j) for j in _jars("broker"))


ORDER_GATE_JAR = "brewstream-order-gate.jar"  # built by `make install` (service/drink_count/jvm/)


def spark_jars() -> list[Path]:
    """What every Spark session gets through spark.jars: the Kafka source and its
    dependencies, and the order gate."""
    found = _jars("spark")
    if not any(j.name == ORDER_GATE_JAR for j in found):
        raise BrewError(f"no {ORDER_GATE_JAR} in {jars_dir() / 'spark'}; run `make install` first")
    return found
