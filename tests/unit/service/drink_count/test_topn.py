from datetime import UTC, datetime

import orjson
from hypothesis import given
from hypothesis import strategies as st

from restorer.tasks import task_of
from service.drink_count.topn import Ranked, board_text, merged_top, next_seq, snapshot_record, snapshot_seq, top_n


def test_count_descending_then_name_ascending() -> None:
    counts = {"mocha": 5, "latte": 9, "americano": 5, "espresso": 1}
    assert top_n(counts, 3) == [Ranked(1, "latte", 9), Ranked(2, "americano", 5), Ranked(3, "mocha", 5)]


def test_n_larger_than_drinks_and_empty() -> None:
    assert [r.drink for r in top_n({"a": 1, "b": 2}, 10)] == ["b", "a"]
    assert top_n({}, 10) == []


def test_board_text_has_the_seed_header_and_rows() -> None:
    now = datetime(2026, 11, 22, 10, 0, 5, tzinfo=UTC)
    text = board_text(now, 1234, 10, [Ranked(1, "latte", 310), Ranked(2, "mocha", 7)])
    first, *rows = text.splitlines()
    assert first.endswith("processed=1234 top-10:")
    assert first.startswith("[") and first[9] == "]"
    assert rows[0].split() == ["1.", "latte", "310"]
    assert "no drinks" in board_text(now, 0, 10, [])


def test_snapshot_format() -> None:
    now = datetime(2026, 11, 22, 10, 0, 5, tzinfo=UTC)
    doc = orjson.loads(snapshot_record(17, now, 1234, [Ranked(1, "latte", 310)]))
    assert doc == {"seq": 17, "ts": "2026-11-22T10:00:05Z", "processed_orders": 1234,
                   "top": [{"rank": 1, "drink": "latte", "count": 310}]}
    with_batch = orjson.loads(snapshot_record(17, now, 1234, [Ranked(1, "latte", 310)], batch=12))
    assert with_batch == {**doc, "batch": 12}


# A sender's life: its start (the seq the topic held when it registered), then per snapshot
# the store's batch, which never goes back within one store, or a new sender taking over.
LIVES = st.lists(st.one_of(st.tuples(st.just("batch"), st.integers(0, 50)),
                           st.tuples(st.just("takeover"), st.integers(0, 50))), max_size=60)


@given(LIVES)
def test_seq_rises_with_every_snapshot_committed_whoever_sends_it(life: list[tuple[str, int]]) -> None:
    """Each registration fences every earlier sender, then reads back the highest seq committed;
    a takeover's store is at least as far as the last one committed (it caught up first)."""
    committed: list[int] = []
    last, batch = 0, 0
    for what, step in life:
        batch += step
        if what == "takeover":
            last = max(committed, default=0)  # what the new sender reads back
            continue
        seq = next_seq(last, batch)
        assert seq > last and seq >= batch
        committed.append(seq)
        last = seq
    assert committed == sorted(set(committed))


@given(st.integers(0, 2**62), st.integers(0, 2**62))
def test_next_seq(previous: int, batch: int) -> None:
    seq = next_seq(previous, batch)
    assert seq > previous and seq >= batch and seq in (previous + 1, batch)


@given(st.binary(max_size=200) | st.from_regex(rb'\A\{"seq": ?-?[0-9]{1,25}(\.5)?\}\Z'))
def test_any_bytes_have_a_seq_or_none(raw: bytes) -> None:
    seq = snapshot_seq(raw)
    assert seq is None or (isinstance(seq, int) and seq >= 0 and orjson.loads(raw)["seq"] == seq)


@given(st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1))
def test_a_snapshot_s_seq_reads_back(seq: int, batch: int) -> None:
    record = snapshot_record(seq, datetime(2026, 1, 1, tzinfo=UTC), 5, [Ranked(1, "latte", 3)], batch=batch)
    assert snapshot_seq(record) == seq
    assert snapshot_seq(b'{"seq": true}') is None and snapshot_seq(b'[{"seq": 1}]') is None
    assert snapshot_seq(b'{"seq": -1}') is None and snapshot_seq(None) is None


def test_a_snapshot_too_big_for_a_record_is_cut_from_the_bottom() -> None:
    from datetime import UTC, datetime

    import orjson

    from service.drink_count.topn import snapshot_record, top_n

    counts = {f"{'d' * 200}{i:04d}": 1000 - i for i in range(500)}
    ranked = top_n(counts, 500)
    full = snapshot_record(1, datetime(2026, 1, 1, tzinfo=UTC), 5, ranked)
    cut = snapshot_record(1, datetime(2026, 1, 1, tzinfo=UTC), 5, ranked, max_bytes=len(full) // 3)
    assert len(cut) <= len(full) // 3
    rows = orjson.loads(cut)["top"]
    assert 0 < len(rows) < 500 and [r["rank"] for r in rows] == list(range(1, len(rows) + 1))


@given(st.dictionaries(st.text(max_size=6), st.integers(0, 20), max_size=40), st.integers(1, 8), st.integers(-1, 12))
def test_the_top_merged_from_each_tasks_own_is_the_whole_stores(counts: dict[str, int], tasks: int, n: int) -> None:
    shares: list[dict[str, int]] = [{} for _ in range(tasks)]
    for drink, count in counts.items():
        shares[task_of(drink.encode(), tasks)][drink] = count
    assert merged_top((top_n(share, n) for share in shares), n) == top_n(counts, n)
