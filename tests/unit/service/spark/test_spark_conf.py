"""Spark settings: --conf parsing, spark-defaults.conf, who wins, which master and which
Python the executors get."""

import os
import re
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.spark.conf import (
    DEFAULTS,
    ConfError,
    defaults_file,
    driver_class_path,
    executor_python,
    is_loopback,
    java_options,
    merged,
    parse_conf,
    picks_collector,
    read_defaults,
    resolve_master,
    spark_home_problem,
    their_java_options,
)


def test_conf_pairs_split_on_the_first_equals_and_a_later_key_wins() -> None:
    pairs = ["spark.executor.memory=2g", "spark.executorEnv.OPTS=a=b", "spark.x=", "spark.executor.memory=1g"]
    assert parse_conf(pairs) == {"spark.executor.memory": "1g", "spark.executorEnv.OPTS": "a=b", "spark.x": ""}


@pytest.mark.parametrize(("pair", "says"), [
    ("spark.executor.memory", "is not KEY=VALUE"),
    ("=2g", "empty key"),
    ("  =2g", "empty key"),
    ("executor.memory=2g", "is not a Spark setting"),
])
def test_bad_conf_says_what_is_wrong(pair: str, says: str) -> None:
    with pytest.raises(ConfError, match=says):
        parse_conf([pair])


def test_spark_defaults_conf_in_every_properties_form(tmp_path: Path) -> None:
    path = tmp_path / "spark-defaults.conf"
    path.write_text("# a comment\n! another\n\nspark.executor.memory   700m\nspark.a=1\nspark.b : x y\n"
                    "spark.flag\nnot.spark 3\n   spark.indented\t\t4\n")
    assert read_defaults(path) == {"spark.executor.memory": "700m", "spark.a": "1", "spark.b": "x y",
                                   "spark.flag": "", "spark.indented": "4"}
    assert read_defaults(None) == {}


def test_the_defaults_file_is_found_like_spark_submit_does(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    assert defaults_file({"SPARK_CONF_DIR": str(conf)}) is None
    (conf / "spark-defaults.conf").write_text("spark.a 1\n")
    assert defaults_file({"SPARK_CONF_DIR": str(conf)}) == conf / "spark-defaults.conf"
    assert defaults_file({"SPARK_HOME": str(tmp_path)}) == conf / "spark-defaults.conf"


def test_user_conf_beats_the_file_which_beats_ours() -> None:
    ours = {**DEFAULTS, "spark.jars": "/k/kafka.jar"}
    from_file = {"spark.sql.shuffle.partitions": "7", "spark.executor.memory": "700m", "spark.jars": "/f/a.jar"}
    user = {"spark.executor.memory": "600m", "spark.ui.enabled": "true", "spark.jars": "/u/b.jar"}
    out = merged(ours, from_file, user)
    # The file's keys are not passed at all: spark-submit reads the file itself.
    assert "spark.sql.shuffle.partitions" not in out
    assert out["spark.executor.memory"] == "600m"
    assert out["spark.ui.enabled"] == "true"
    assert out["spark.python.worker.reuse"] == DEFAULTS["spark.python.worker.reuse"]
    # The Kafka source always travels; the others' jars are added.
    assert out["spark.jars"] == "/k/kafka.jar,/f/a.jar,/u/b.jar"


def test_master_comes_from_the_flag_then_conf_then_the_file() -> None:
    assert resolve_master("local[2]", {"spark.master": "yarn"}, {"spark.master": "k8s://x"}) == "local[2]"
    assert resolve_master(None, {"spark.master": "yarn"}, {"spark.master": "k8s://x"}) == "yarn"
    assert resolve_master(None, {}, {"spark.master": "k8s://x"}) == "k8s://x"
    assert resolve_master(None, {}, {}) == "local[*]"


@pytest.mark.parametrize("master", ["nonsense", "", "spark:/x", "Local[2]", "yarn-cluster", "mesos://x:5050"])
def test_a_master_spark_submit_would_refuse_is_refused_before_a_jvm_starts(master: str) -> None:
    with pytest.raises(ConfError, match="not a Spark master URL"):
        resolve_master(None, {"spark.master": master} if master else {}, {"spark.master": master or "x"})


@pytest.mark.parametrize(("master", "loopback"), [
    ("spark://127.0.0.1:7077", True), ("spark://localhost:7077", True), ("spark://127.0.0.1:1,localhost:2", True),
    ("spark://10.0.0.5:7077", False), ("spark://127.0.0.1:1,db1:2", False), ("yarn", False), ("local[*]", False),
])
def test_loopback_masters(master: str, loopback: bool) -> None:
    assert is_loopback(master) is loopback


def test_executors_python_is_the_users_choice_off_local_masters() -> None:
    cluster = "spark://h:7077"
    assert executor_python("local[2]", {"spark.pyspark.python": "/x"}, {}, {"PYSPARK_PYTHON": "/y"}) == sys.executable
    assert executor_python(cluster, {"spark.pyspark.python": "/file"}, {"spark.pyspark.python": "/conf"},
                           {"PYSPARK_PYTHON": "/env"}) == "/conf"
    assert executor_python(cluster, {"spark.pyspark.python": "/file"}, {}, {"PYSPARK_PYTHON": "/env"}) == "/file"
    assert executor_python(cluster, {}, {}, {"PYSPARK_PYTHON": "/env"}) == "/env"
    assert executor_python(cluster, {}, {}, {}) is None  # Spark's own default, never the driver's path


def test_java_options_are_ours_then_the_users_which_replace_the_files() -> None:
    key = "spark.driver.defaultJavaOptions"
    assert their_java_options(key, {key: "-Da=file"}, {}) == "-Da=file"
    assert their_java_options(key, {key: "-Da=file"}, {key: " -Da=user "}) == "-Da=user"
    assert their_java_options(key, {}, {}) == ""
    assert their_java_options(key, {key: "-Da=file"}, {key: ""}) == ""  # --conf KEY= drops the file's, as in Spark
    # The JVM takes the later of two options that set the same thing: the user's.
    assert java_options("-Dlog=ours -XX:+UseParallelGC", "-Dlog=theirs") == "-Dlog=ours -XX:+UseParallelGC -Dlog=theirs"
    assert java_options("", "") == ""
    assert java_options("-Dx=1", " ") == "-Dx=1"


@pytest.mark.parametrize(("options", "picks"), [
    ("-XX:+UseG1GC", True), ("-Xmx2g -XX:+UseZGC -Dx=1", True), ("\t-XX:+UseShenandoahGC\n", True),
    ("-XX:+UseSerialGC", True), ("-XX:-UseG1GC", False), ("-XX:+UseGCOverheadLimit", False),
    ("-Dopt=-XX:+UseG1GC", False), ("-XX:+UseG1GCx", False), ("", False), ("-Xlog:gc", False),
])
def test_a_collector_of_the_users_is_recognised(options: str, picks: bool) -> None:
    assert picks_collector(options) is picks


_OPTION = st.text(alphabet=st.characters(blacklist_categories=["Zs", "Cc"]), min_size=1, max_size=30)


@given(st.lists(_OPTION, max_size=6), st.sampled_from(["Serial", "Parallel", "G1", "Z", "Shenandoah"]),
       st.integers(min_value=0, max_value=6))
def test_a_collector_anywhere_among_any_options_is_found(options: list[str], gc: str, at: int) -> None:
    """Total on any text, and agrees with its oracle: an option that is exactly -XX:+Use<name>GC."""
    assert picks_collector(" ".join(options)) is any(re.fullmatch(r"-XX:\+Use\w*GC", o) for o in options)
    with_gc = [*options[:at], f"-XX:+Use{gc}GC", *options[at:]]
    assert picks_collector("  ".join(with_gc)) is True


def test_the_driver_class_path_is_what_spark_submit_adds_to_its_jars(tmp_path: Path) -> None:
    env = {"SPARK_CONF_DIR": str(tmp_path / "conf"), "HADOOP_CONF_DIR": "/etc/hadoop",
           "SPARK_DIST_CLASSPATH": "/opt/h/lib/*:/opt/h/etc"}
    settings = {"spark.driver.defaultExtraClassPath": "hive-jackson/*", "spark.driver.extraClassPath": "/x.jar:/cls"}
    assert driver_class_path(settings, env) == [Path("/x.jar"), Path("/cls"), tmp_path / "conf", Path("/etc/hadoop"),
                                                Path("/opt/h/etc")]
    assert driver_class_path({}, {"SPARK_HOME": "/spark"}) == [Path("/spark/conf")]


entry = st.text(st.characters(blacklist_characters=os.pathsep, blacklist_categories=["Cs"]), max_size=12)


@given(st.lists(entry, max_size=5), st.lists(entry, max_size=5), st.lists(entry, max_size=5))
def test_the_driver_class_path_keeps_every_entry_but_globs_in_order(extra: list[str], hadoop: list[str],
                                                                     dist: list[str]) -> None:
    env = {"SPARK_CONF_DIR": "/c", "HADOOP_CONF_DIR": os.pathsep.join(hadoop), "SPARK_DIST_CLASSPATH":
           os.pathsep.join(dist)}
    kept = [Path(e) for e in extra if e.strip() and not e.endswith("*")] + [Path("/c")]
    kept += [Path(e) for e in [*hadoop, *dist] if e.strip() and not e.endswith("*")]
    assert driver_class_path({"spark.driver.extraClassPath": os.pathsep.join(extra)}, env) == kept


def spark_home(root: Path, jars: list[str], submit: bool = True) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "jars").mkdir()
    if submit:
        (root / "bin" / "spark-submit").write_text("#!/bin/sh\n")
    for jar in jars:
        (root / "jars" / jar).write_bytes(b"PK")
    return root


def test_a_spark_home_of_another_version_or_none_at_all_is_named_with_the_fix(tmp_path: Path) -> None:
    assert spark_home_problem("4.2.0", {}) is None
    assert (spark_home_problem("4.2.0", {"SPARK_HOME": ""}) or "").startswith("SPARK_HOME is set but empty: unset")
    same = spark_home(tmp_path / "same", ["spark-core_2.13-4.2.0.jar", "spark-sql_2.13-4.2.0.jar"])
    assert spark_home_problem("4.2.0", {"SPARK_HOME": str(same)}) is None
    old = spark_home(tmp_path / "old", ["spark-core_2.12-3.5.1.jar"])
    assert spark_home_problem("4.2.0", {"SPARK_HOME": str(old)}) == (
        f"SPARK_HOME={old} is Spark 3.5.1, but brewstream runs on pyspark 4.2.0: unset SPARK_HOME to use "
        "pyspark's own Spark, or point it at a Spark 4.2.0 installation")
    problem = spark_home_problem("4.2.0", {"SPARK_HOME": str(tmp_path / "missing")})
    assert problem is not None and problem.startswith(f"SPARK_HOME={tmp_path / 'missing'} holds no bin/spark-submit")
    bare = spark_home(tmp_path / "bare", ["spark-core_2.13-4.2.0.jar"], submit=False)
    assert "holds no bin/spark-submit" in (spark_home_problem("4.2.0", {"SPARK_HOME": str(bare)}) or "")


version = st.from_regex(r"[0-9]\.[0-9]\.[0-9](-SNAPSHOT)?", fullmatch=True)
other_jar = st.text(st.characters(whitelist_categories=["L", "N"], whitelist_characters="-_."), min_size=1,
                    max_size=30).filter(lambda t: not t.startswith("spark-core_")).map(lambda t: t + ".jar")


@given(st.sets(st.tuples(st.sampled_from(["2.12", "2.13"]), version), max_size=3), st.sets(other_jar, max_size=4))
def test_a_spark_home_is_refused_exactly_when_its_core_jar_names_another_version(
        cores: set[tuple[str, str]], others: set[str]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        jars = [f"spark-core_{scala}-{v}.jar" for scala, v in cores] + sorted(others)
        problem = spark_home_problem("4.2.0", {"SPARK_HOME": str(spark_home(Path(d) / "spark", jars))})
        versions = {v for _, v in cores}
        assert (problem is not None) == bool(versions and "4.2.0" not in versions), (jars, problem)
