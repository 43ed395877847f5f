"""Table-topic commit state: ranges contiguous, offsets only from the table."""

from __future__ import annotations

from dataclasses import replace

import pytest

from floe.tabletopic.model import (
    COMMIT_ID_PROP,
    OFFSETS_PROP,
    PartitionRange,
    RoundResult,
    StateError,
    TableState,
    decode_offsets,
    encode_offsets,
)
from floe.types import Offset, PartitionId, TopicName

P0, P1 = PartitionId(0), PartitionId(1)


def o(n: int) -> Offset:
    return Offset(n)


def result(rows: int = 1) -> RoundResult:
    return RoundResult("c1", 1000, 0.5, rows, 1, 0)


def fresh() -> TableState:
    return TableState(TopicName("t"), ("default", "t"))


def test_plan_takes_committed_end_to_lso_and_skips_empty() -> None:
    state = fresh()
    assert state.plan({P0: o(0), P1: o(0)}) == ()
    ranges = state.plan({P0: o(5), P1: o(0)})
    assert ranges == (PartitionRange(P0, o(0), o(5)),)
    after = state.apply_round(ranges, result(5))
    assert after.committed == {P0: 5}
    assert after.plan({P0: o(5), P1: o(2)}) == (PartitionRange(P1, o(0), o(2)),)
    assert after.rounds == 1 and after.last_rows == 5 and after.last_commit_id == "c1"


def test_ranges_must_be_contiguous() -> None:
    state = fresh().apply_round((PartitionRange(P0, o(0), o(5)),), result())
    with pytest.raises(StateError, match="gap or overlap"):
        state.apply_round((PartitionRange(P0, o(6), o(8)),), result())
    with pytest.raises(StateError, match="gap or overlap"):
        state.apply_round((PartitionRange(P0, o(4), o(8)),), result())
    with pytest.raises(StateError, match="two ranges"):
        state.apply_round(
            (PartitionRange(P0, o(5), o(6)), PartitionRange(P0, o(6), o(8))), result()
        )
    with pytest.raises(StateError):
        state.apply_round((), result())
    with pytest.raises(StateError):
        PartitionRange(P0, o(3), o(3))


def test_skip_deleted_counts_lost_records() -> None:
    state = fresh().skip_deleted(P0, o(10))
    assert state.committed == {P0: 10} and state.lost_total == 10
    with pytest.raises(StateError):
        state.skip_deleted(P0, o(10))


def test_split_and_offsets_round_trip() -> None:
    pieces = PartitionRange(P1, o(0), o(25)).split(10)
    assert [(p.start, p.end) for p in pieces] == [(0, 10), (10, 20), (20, 25)]
    text = encode_offsets({P1: o(7), P0: o(3)})
    assert text == '{"0":3,"1":7}'
    assert decode_offsets(text) == {P0: 3, P1: 7}
    with pytest.raises(StateError):
        decode_offsets("[1]")
    with pytest.raises(StateError):
        decode_offsets('{"0": -1}')


def test_recovered_from_summary_and_error() -> None:
    state = TableState.recovered(
        TopicName("t"), ("default", "t"), {OFFSETS_PROP: '{"0":4}', COMMIT_ID_PROP: "x"}, 99
    )
    assert state.committed == {P0: 4} and state.last_commit_id == "x"
    assert TableState.recovered(TopicName("t"), ("default", "t"), None) == fresh()
    failed = state.with_error("boom")
    assert failed.last_error == "boom" and failed.committed == state.committed
    assert failed.apply_round((PartitionRange(P0, o(4), o(5)),), result()).last_error is None


def test_recovery_keeps_the_process_counters_and_the_last_error() -> None:
    summary = {OFFSETS_PROP: '{"0":5}', COMMIT_ID_PROP: "c1"}
    before = replace(
        TableState.recovered(TopicName("t"), ("default", "t"), summary, 1000),
        rounds=3,
        skipped_total=2,
        lost_total=1,
        last_rows=7,
    ).with_error("RuntimeError: spark died")
    again = TableState.recovered(TopicName("t"), ("default", "t"), summary, 1000)
    kept = again.carrying(before)
    assert (kept.rounds, kept.skipped_total, kept.lost_total, kept.last_rows) == (3, 2, 1, 7)
    assert kept.last_error == "RuntimeError: spark died"
    assert kept.failed_rounds == 1
    assert kept.committed == again.committed
    newer = TableState.recovered(
        TopicName("t"), ("default", "t"), {OFFSETS_PROP: '{"0":9}', COMMIT_ID_PROP: "c2"}, 2000
    ).carrying(before)
    assert newer.last_rows == 0 and newer.last_commit_ms == 2000  # another commit's details
    assert newer.committed == {0: 9}
