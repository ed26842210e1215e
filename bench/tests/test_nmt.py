"""The memory figures' parsers (bench.nmt) and the variant settings of bench.memory."""

from __future__ import annotations

import click
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.memory import JAVA_KEY, NMT_OPTION, variant
from bench.nmt import (
    HeapInfo,
    Mapping,
    NmtError,
    NmtSummary,
    parse_heap_info,
    parse_jstat,
    parse_nmt,
    parse_smaps,
    parse_smaps_rollup,
    resident_within,
)

# A JDK 17 summary, cut short (the shape `jcmd PID VM.native_memory summary` prints).
SUMMARY = """5922:

Native Memory Tracking:

(Omitting categories weighting less than 1KB)

Total: reserved=2456821KB, committed=888433KB
-                 Java Heap (reserved=1048576KB, committed=594432KB)
                            (mmap: reserved=1048576KB, committed=594432KB)

-                     Class (reserved=1056859KB, committed=19355KB)
                            (classes #20123)
                            (  instance classes #19010, array classes #1113)

-                    Thread (reserved=24830KB, committed=24830KB)
                            (thread #182)
                            (stack: reserved=24384KB, committed=24384KB)

-                      Code (reserved=253740KB, committed=23348KB)
                            (malloc=2540KB #9117)

-Native Memory Tracking (reserved=11162KB, committed=11162KB)
"""

KIB = 1024


def test_totals_and_categories_in_bytes() -> None:
    summary = parse_nmt(SUMMARY)
    assert summary.reserved == 2456821 * KIB
    assert summary.committed == 888433 * KIB
    assert summary.committed_of("Java Heap") == 594432 * KIB
    assert summary.categories["Thread"].reserved == 24830 * KIB
    assert summary.committed_of("Native Memory Tracking") == 11162 * KIB
    assert summary.committed_of("Metaspace") == 0  # not listed: the JVM omits tiny categories
    # The indented detail lines ("(mmap: reserved=…)") are not categories of their own.
    assert set(summary.categories) == {"Java Heap", "Class", "Thread", "Code", "Native Memory Tracking"}


def test_other_scales() -> None:
    summary = parse_nmt("Total: reserved=10MB, committed=3MB\n-  Java Heap (reserved=8MB, committed=2MB)\n")
    assert (summary.reserved, summary.committed) == (10 * KIB * KIB, 3 * KIB * KIB)
    assert summary.committed_of("Java Heap") == 2 * KIB * KIB


@pytest.mark.parametrize("text", ["", "5922:\n\nNative memory tracking is not enabled\n", "Total: nothing\n"])
def test_no_summary_is_an_nmt_error(text: str) -> None:
    with pytest.raises(NmtError):
        parse_nmt(text)


@given(st.text())
def test_nmt_parser_is_total(text: str) -> None:
    try:
        summary = parse_nmt(text)
    except NmtError:
        return
    assert isinstance(summary, NmtSummary)


_LINES = st.sampled_from([*SUMMARY.splitlines(), "Total: reserved=1KB, committed=",
                          "- (reserved=1KB, committed=1KB)", "-   X (reserved=99999999999999999999GB, committed=0B)",
                          "Native memory tracking is not enabled", "\x00", "Total: reserved=5, committed=7"])


@given(st.lists(st.one_of(_LINES, st.text(max_size=20)), max_size=30))
def test_nmt_parser_is_total_on_near_summaries(lines: list[str]) -> None:
    try:
        summary = parse_nmt("\n".join(lines))
    except NmtError:
        return
    assert summary.committed >= 0 and all(c.committed >= 0 for c in summary.categories.values())


def test_smaps_rollup() -> None:
    text = ("55d4a8e0c000-7ffd5a1f2000 ---p 00000000 00:00 0                          [rollup]\n"
            "Rss:              156012 kB\nPss:              150000 kB\nPss_Anon:          87000 kB\n")
    assert parse_smaps_rollup(text) == {"Rss": 156012 * KIB, "Pss": 150000 * KIB, "Pss_Anon": 87000 * KIB}


@given(st.text())
def test_smaps_rollup_parser_is_total(text: str) -> None:
    out = parse_smaps_rollup(text)
    assert all(isinstance(v, int) and v % KIB == 0 for v in out.values())


HEAP = """5922:
 PSYoungGen      total 333312K, used 301897K [0x00000000eab00000, 0x0000000100000000, 0x0000000100000000)
  eden space 317440K, 90% used [0x00000000eab00000,0x00000000fc2560e8,0x00000000fe100000)
 ParOldGen       total 258048K, used 37531K [0x00000000c0000000, 0x00000000cfc00000, 0x00000000eab00000)
  object space 258048K, 14% used [0x00000000c0000000,0x00000000c24a6e00,0x00000000cfc00000)
 Metaspace       used 12476K, committed 13184K, reserved 1114112K
"""


def test_heap_info_sums_the_generations() -> None:
    # The metaspace line is not heap; the "space" lines detail a generation already counted.
    assert parse_heap_info(HEAP) == HeapInfo((333312 + 258048) * KIB, (301897 + 37531) * KIB,
                                             0xc0000000, 0x100000000)
    assert parse_heap_info(" garbage-first heap   total 262144K, used 48261K [0x…") == HeapInfo(262144 * KIB,
                                                                                           48261 * KIB)
    assert parse_heap_info("jcmd: no such process") is None


@given(st.text())
def test_heap_info_parser_is_total(text: str) -> None:
    out = parse_heap_info(text)
    assert out is None or isinstance(out, HeapInfo)


SMAPS = """c0000000-d0000000 rw-p 00000000 00:00 0
Size:             262144 kB
Rss:               40000 kB
7f00000000-7f00001000 r-xp 00001000 08:01 1234                       /usr/lib/libc.so.6
Rss:                   4 kB
garbage line
"""


def test_smaps_mappings_and_the_heap_range() -> None:
    maps = parse_smaps(SMAPS)
    assert maps == [Mapping(0xc0000000, 0xd0000000, "", 40000 * KIB),
                    Mapping(0x7f00000000, 0x7f00001000, "/usr/lib/libc.so.6", 4 * KIB)]
    assert resident_within(maps, 0xc0000000, 0x100000000) == 40000 * KIB
    # A mapping half inside the range counts half its resident bytes.
    assert resident_within(maps, 0xc8000000, 0x100000000) == 20000 * KIB


@given(st.text(), st.integers(0, 2**64), st.integers(0, 2**64))
def test_smaps_parser_is_total(text: str, low: int, high: int) -> None:
    assert resident_within(parse_smaps(text), low, high) >= 0


def test_variants_combine_and_pass_java_options_as_default_options() -> None:
    v = variant("serialgc+heap256+arena2")
    args = v.args(nmt=True)
    # brewstream puts its own Java options first and gives way to a collector named here.
    assert args[0] == f"--conf={JAVA_KEY}=-XX:+UseSerialGC {NMT_OPTION}"
    assert "--conf=spark.driver.memory=256m" in args
    assert dict(v.env) == {"MALLOC_ARENA_MAX": "2"}
    assert variant("default").args(nmt=False) == []


def test_an_unknown_variant_is_refused() -> None:
    with pytest.raises(click.BadParameter):
        variant("serialgc+bigger")


def test_jstat_columns() -> None:
    text = ("  S0     S1     E      O      M     CCS    YGC     YGCT     FGC    FGCT     CGC    CGCT       GCT\n"
            " 98.81   0.00  62.40  14.01  97.11  92.35    412    1.977     3    0.412     -        -    2.389\n")
    out = parse_jstat(text)
    assert (out["YGC"], out["YGCT"], out["FGC"], out["FGCT"]) == (412, 1.977, 3, 0.412)
    assert "CGC" not in out  # the parallel collector has no concurrent cycles
    assert parse_jstat("12345 not found\n") == {}


@given(st.text())
def test_jstat_parser_is_total(text: str) -> None:
    assert all(isinstance(v, float) for v in parse_jstat(text).values())
