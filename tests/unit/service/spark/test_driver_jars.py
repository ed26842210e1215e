"""The driver's class path: Spark's jars named one by one, in the folder's order, less the
unused ones, each signed one as an unsigned copy made once (``service.spark.driver_jars``)."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.spark import driver_jars
from service.spark.driver_jars import is_signature, named, unsigned_copy

JARS = Path("/spark/jars")


def command(class_path: str) -> list[str]:
    return ["/jdk/bin/java", "-cp", class_path, "-Xmx1g", "org.apache.spark.deploy.SparkSubmit", "pyspark-shell"]


def same(jar: Path) -> Path:
    return jar


def test_the_wildcard_becomes_the_folder_s_jars_in_its_order_less_mllib() -> None:
    listed = ["b.jar", "spark-mllib_2.13-4.2.0.jar", "a.jar", "notes.txt", "spark-mllib-local_2.13-4.2.0.jar"]
    got = named(command(f"/ours/gate.jar:{JARS}/*:/after"), JARS, listed, same)
    assert got[2].split(os.pathsep) == ["/ours/gate.jar", f"{JARS}/b.jar", f"{JARS}/a.jar",
                                        f"{JARS}/spark-mllib-local_2.13-4.2.0.jar", "/after"]
    assert got[:2] + got[3:] == command("")[:2] + command("")[3:]


def test_a_command_without_spark_s_wildcard_is_left_alone() -> None:
    assert named(command("/other/jars/*"), JARS, ["a.jar"], same) == command("/other/jars/*")
    no_class_path = ["/jdk/bin/java", "Main"]
    assert named(no_class_path, JARS, ["a.jar"], same) == no_class_path
    assert named(["-cp"], JARS, ["a.jar"], same) == ["-cp"]


def test_a_class_path_too_long_for_one_argument_stays_a_wildcard() -> None:
    many = [f"{'x' * 200}-{i}.jar" for i in range(600)]
    assert named(command(f"{JARS}/*"), JARS, many, same) == command(f"{JARS}/*")


names = st.text(alphabet=st.characters(exclude_characters="/:\0", exclude_categories=["Cs"]), min_size=1,
                max_size=20)


@given(st.lists(st.one_of(names, names.map(lambda n: n + ".jar"), st.sampled_from(["spark-mllib_2.13.jar"])),
                max_size=30),
       st.lists(st.text(alphabet="/abc.", min_size=1, max_size=8), max_size=3))
def test_named_agrees_with_a_filter_of_the_listing(listed: list[str], before: list[str]) -> None:
    class_path = os.pathsep.join([*before, f"{JARS}/*"])
    got = named(command(class_path), JARS, listed, same)
    expected = [f"{JARS}/{n}" for n in listed if n.lower().endswith(".jar") and not n.startswith("spark-mllib_")]
    assert got == [*command("")[:2], os.pathsep.join([*before, *expected]), *command("")[3:]]


@given(st.text(max_size=60))
def test_is_signature_is_total(name: str) -> None:
    assert is_signature(name) in (True, False)


@given(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=30))
def test_is_signature_agrees_with_its_definition(name: str) -> None:
    """A file right inside META-INF named NAME.SF, .RSA, .DSA or .EC, any case."""
    folder, slash, file = name.partition("/")
    stem, dot, ext = file.rpartition(".")
    expected = (folder.upper() == "META-INF" and bool(slash) and "/" not in file and bool(dot) and bool(stem)
                and ext.upper() in ("SF", "RSA", "DSA", "EC"))
    assert is_signature(name) == expected


def test_signature_entries_of_a_real_signed_jar() -> None:
    assert is_signature("META-INF/JANINO.SF") and is_signature("META-INF/janino.rsa")
    assert not is_signature("META-INF/MANIFEST.MF") and not is_signature("META-INF/maven/x.SF")
    assert not is_signature("org/codehaus/janino/Parser.class")


def make_jar(path: Path, signed: bool) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as jar:
        jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
        jar.writestr("org/example/A.class", b"\xca\xfe\xba\xbe" + bytes(100))
        if signed:
            jar.writestr("META-INF/SIGNER.SF", "Signature-Version: 1.0\n")
            jar.writestr("META-INF/SIGNER.RSA", b"\x30\x82")
    return path


def test_a_signed_jar_is_copied_once_without_its_signature(tmp_path: Path) -> None:
    signed = make_jar(tmp_path / "janino-3.1.9.jar", signed=True)
    copies = tmp_path / "cache" / "jars"
    copy = unsigned_copy(copies)(signed)
    assert copy.parent == copies and copy.name.startswith("janino-3.1.9-")
    with zipfile.ZipFile(copy) as out, zipfile.ZipFile(signed) as original:
        assert out.namelist() == ["META-INF/MANIFEST.MF", "org/example/A.class"]
        assert out.read("org/example/A.class") == original.read("org/example/A.class")
    made = copy.stat().st_mtime_ns
    # The next start takes the same copy, untouched: the class archive checks its mtime.
    assert unsigned_copy(copies)(signed) == copy and copy.stat().st_mtime_ns == made
    assert not list(copies.glob("*.part"))


def test_spark_s_own_signed_jars_copy_whole(tmp_path: Path) -> None:
    """The real thing: pyspark's janino, as the driver loads it."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    janino = next(jars.glob("janino-*.jar"))
    copy = unsigned_copy(tmp_path)(janino)
    assert copy != janino
    with zipfile.ZipFile(copy) as out, zipfile.ZipFile(janino) as original:
        assert not any(is_signature(n) for n in out.namelist())
        assert out.namelist() == [n for n in original.namelist() if not is_signature(n)]
        assert out.testzip() is None


def test_unsigned_jars_and_no_folder_mean_the_jar_itself(tmp_path: Path) -> None:
    plain = make_jar(tmp_path / "plain.jar", signed=False)
    signed = make_jar(tmp_path / "signed.jar", signed=True)
    assert unsigned_copy(tmp_path / "copies")(plain) == plain
    assert unsigned_copy(None)(signed) == signed
    assert not (tmp_path / "copies").exists()


def test_a_jar_that_cannot_be_read_or_copied_is_loaded_as_it_is(tmp_path: Path) -> None:
    broken = tmp_path / "broken.jar"
    broken.write_bytes(b"not a zip")
    assert unsigned_copy(tmp_path / "copies")(broken) == broken
    signed = make_jar(tmp_path / "signed.jar", signed=True)
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    assert unsigned_copy(blocked)(signed) == signed


def test_only_the_newest_copies_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(driver_jars, "_KEPT_COPIES", 2)
    copies = tmp_path / "copies"
    made = []
    for i in range(4):
        jar = make_jar(tmp_path / f"j{i}.jar", signed=True)
        made.append(unsigned_copy(copies)(jar))
        os.utime(made[-1], (i, i))  # made in this order
    assert sorted(copies.glob("*.jar")) == sorted(made[-2:])


def test_a_kept_command_naming_a_removed_copy_is_not_present(tmp_path: Path) -> None:
    copy = make_jar(tmp_path / "janino-x.jar", signed=False)
    kept = command(f"/spark/jars/a.jar:{copy}:/missing/elsewhere.jar")
    assert driver_jars.copies_present(kept, tmp_path)
    copy.unlink()
    assert not driver_jars.copies_present(kept, tmp_path)
    assert driver_jars.copies_present(["java", "Main"], tmp_path)


def test_a_copy_another_start_made_meanwhile_is_kept_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two starts on an empty cache: the second's copy never replaces the first's, whose
    mtime a class archive may already hold."""
    signed = make_jar(tmp_path / "janino-3.1.9.jar", signed=True)
    copies = tmp_path / "copies"
    first = unsigned_copy(copies)(signed)
    made = first.stat().st_mtime_ns, first.stat().st_ino
    real_is_file = Path.is_file
    # The second start looked before the first had linked its copy.
    monkeypatch.setattr(Path, "is_file", lambda p: False if p == first else real_is_file(p))
    assert unsigned_copy(copies)(signed) == first
    assert (first.stat().st_mtime_ns, first.stat().st_ino) == made
    assert not list(copies.glob("*.part"))
