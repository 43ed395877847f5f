"""Table-topic commit state: ranges contiguous, offsets only from the table, every
skipped offset counted once, the table's topic identity checked."""

from __future__ import annotations

from dataclasses import replace

import pytest

from floe.tabletopic.model import (
    AHEAD_PROP,
    CLUSTER_ID_PROP,
    COMMIT_ID_PROP,
    LOST_PROP,
    OFFSETS_PROP,
    SKIPPED_PROP,
    TOPIC_CREATED_PROP,
    TOPIC_ID_PROP,
    OffsetsMissingError,
    PartitionRange,
    Recorded,
    RoundResult,
    StateError,
    TableOwnedError,
    TableState,
    TopicIdentity,
    decode_offsets,
    encode_offsets,
)
from floe.types import Offset, PartitionId, TopicName

P0, P1 = PartitionId(0), PartitionId(1)
T = TopicName("t")
TABLE = ("default", "t")
ME = TopicIdentity("cluster-a", "topic-1", 1000)


def o(n: int) -> Offset:
    return Offset(n)


def result(rows: int = 1, lost: int = 0, skipped: int = 0) -> RoundResult:
    return RoundResult("c1", 1000, 0.5, rows, 1, skipped, lost)


def fresh() -> TableState:
    return TableState(T, TABLE)


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
        state.apply_round((), result())  # nothing to record either
    with pytest.raises(StateError):
        PartitionRange(P0, o(3), o(3))


def test_deleted_records_are_counted_lost_once_and_recorded() -> None:
    state, lines = fresh().observe_log({P0: o(10)}, {P0: o(12)})
    assert state.committed == {P0: 10} and state.lost_total == 10 and state.unrecorded
    assert lines and "records_lost" in lines[0] and "from=0 to=10" in lines[0]
    again, more = state.observe_log({P0: o(10)}, {P0: o(12)})
    assert again == state and more == []  # the same gap is not counted twice
    # a round without data still commits the skip, so a restart does not count it again
    after = state.apply_round((), result(rows=0))
    assert not after.unrecorded
    recorded = Recorded.read(after.record())
    assert recorded.committed == {P0: 10} and recorded.lost == 10


def test_round_gaps_and_skips_add_to_the_recorded_counts() -> None:
    state = TableState.recovered(T, TABLE, Recorded(committed={P0: o(3)}, lost=2, skipped=1))
    after = state.apply_round((PartitionRange(P0, o(3), o(9)),), result(lost=4, skipped=5))
    assert (after.lost_total, after.skipped_total) == (6, 6)
    record = after.record()
    assert (record[LOST_PROP], record[SKIPPED_PROP]) == ("6", "6")


def test_offsets_ahead_of_the_log_wait_and_are_counted_when_the_log_passes() -> None:
    state = TableState.recovered(T, TABLE, Recorded(committed={P0: o(120), P1: o(5)}))
    state, lines = state.observe_log({}, {P0: o(100), P1: o(9)})
    assert state.ahead == {P0: 100} and state.unrecorded
    assert "offsets_ahead" in lines[0]
    assert state.plan({P0: o(100), P1: o(9)}) == (PartitionRange(P1, o(5), o(9)),)
    state = state.apply_round((PartitionRange(P1, o(5), o(9)),), result())
    assert Recorded.read(state.record()).ahead == {P0: 100}  # survives a restart
    state, lines = state.observe_log({}, {P0: o(90), P1: o(9)})
    assert state.ahead == {P0: 90}  # the lowest log end seen
    state, lines = state.observe_log({}, {P0: o(125), P1: o(9)})
    assert state.ahead == {} and state.lost_total == 30  # offsets 90..119 never reach it
    assert state.plan({P0: o(125)}) == (PartitionRange(P0, o(120), o(125)),)


def test_offsets_round_trip() -> None:
    text = encode_offsets({P1: o(7), P0: o(3)})
    assert text == '{"0":3,"1":7}'
    assert decode_offsets(text) == {P0: 3, P1: 7}
    with pytest.raises(StateError):
        decode_offsets("[1]")
    with pytest.raises(StateError):
        decode_offsets('{"0": -1}')


def test_recorded_prefers_properties_and_falls_back_to_summaries() -> None:
    props = {OFFSETS_PROP: '{"0":4}', COMMIT_ID_PROP: "x", LOST_PROP: "3"}
    old = ({OFFSETS_PROP: '{"0":1}', COMMIT_ID_PROP: "old"}, 5)
    got = Recorded.read(props, [old])
    assert (got.committed, got.commit_id, got.lost, got.legacy) == ({P0: 4}, "x", 3, False)
    legacy = Recorded.read({}, [({"operation": "replace"}, 9), old], has_rows=True)
    assert (legacy.committed, legacy.commit_id, legacy.commit_ms) == ({P0: 1}, "old", 5)
    assert legacy.legacy
    assert Recorded.read({}, [], has_rows=False) == Recorded()


def test_offsets_that_cannot_be_found_stop_instead_of_guessing() -> None:
    with pytest.raises(OffsetsMissingError, match="will not guess"):
        Recorded.read({}, [({"operation": "replace"}, 9)], has_rows=True)
    with pytest.raises(OffsetsMissingError):
        Recorded.read({COMMIT_ID_PROP: "x"}, [], has_rows=False)


def identity_props(identity: TopicIdentity) -> dict[str, str]:
    return {
        OFFSETS_PROP: '{"0":50}',
        COMMIT_ID_PROP: "c9",
        CLUSTER_ID_PROP: identity.cluster_id,
        TOPIC_ID_PROP: identity.topic_id,
        TOPIC_CREATED_PROP: str(identity.created_ms),
    }


def test_same_topic_resumes_and_a_legacy_table_is_adopted() -> None:
    same = TableState.recovered(T, TABLE, Recorded.read(identity_props(ME)), ME)
    assert same.committed == {P0: 50} and not same.unrecorded and same.note is None
    legacy = TableState.recovered(T, TABLE, Recorded.read({OFFSETS_PROP: '{"0":7}'}), ME)
    assert legacy.committed == {P0: 7} and legacy.unrecorded  # the next commit adopts it
    assert legacy.record()[TOPIC_ID_PROP] == ME.topic_id


def test_recreated_topic_starts_at_zero_in_the_same_table() -> None:
    newer = TopicIdentity(ME.cluster_id, "topic-2", ME.created_ms + 1)
    state = TableState.recovered(T, TABLE, Recorded.read(identity_props(ME)), newer)
    assert state.committed == {} and state.unrecorded
    assert state.last_commit_id == "c9"  # its first commit must follow the table's newest
    assert state.note is not None and "recreated" in state.note and "offset 0" in state.note
    assert state.record()[TOPIC_ID_PROP] == "topic-2"


def test_another_cluster_or_an_older_topic_is_refused() -> None:
    recorded = Recorded.read(identity_props(ME))
    with pytest.raises(TableOwnedError, match="another Floe cluster"):
        TableState.recovered(T, TABLE, recorded, TopicIdentity("cluster-b", "x", 99999))
    with pytest.raises(TableOwnedError, match="newer topic"):
        TableState.recovered(T, TABLE, recorded, TopicIdentity(ME.cluster_id, "topic-0", 10))


def test_recovery_keeps_the_process_counters_and_takes_the_table_counts() -> None:
    props = {OFFSETS_PROP: '{"0":5}', COMMIT_ID_PROP: "c1", LOST_PROP: "4", AHEAD_PROP: "{}"}
    before = replace(
        TableState.recovered(T, TABLE, Recorded.read(props)),
        rounds=3,
        last_rows=7,
        lost_total=99,  # counted in memory, never committed: the table's count wins
    ).with_error("RuntimeError: spark died")
    kept = TableState.recovered(T, TABLE, Recorded.read(props)).carrying(before)
    assert (kept.rounds, kept.last_rows, kept.lost_total) == (3, 7, 4)
    assert kept.last_error == "RuntimeError: spark died" and kept.failed_rounds == 1
    newer = TableState.recovered(
        T, TABLE, Recorded.read({OFFSETS_PROP: '{"0":9}', COMMIT_ID_PROP: "c2"})
    ).carrying(before)
    assert newer.last_rows == 0 and newer.committed == {0: 9}  # another commit's details
    starting = TableState.starting(T, TABLE).with_error("catalog down")
    assert starting.pending and starting.last_error == "catalog down"
