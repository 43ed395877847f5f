"""The admin facade's table-topic status: the pure assembly, and reads from a real store
and an empty SQLite catalog (no Spark, no coordinator)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from floe.admin import NotFoundError, TableStatusService
from floe.admin import tables as t
from floe.config import load_config
from floe.config.tabletopic import TableTopicConfig, resolve_table_topic
from floe.protocol.batch import scan
from floe.protocol.records import Record, encode_batch
from floe.storage.local import LocalStore
from floe.tabletopic.coordinator import MaintenanceState
from floe.tabletopic.model import MaintenanceResult, PartitionRange, RoundResult, TableState
from floe.types import Offset, PartitionId, TopicName

T = TopicName("a-b.c")
P0, P1 = PartitionId(0), PartitionId(1)
CFG = resolve_table_topic(
    {"table.topic.enable": "true", "table.topic.convert.value.type": "string"}
)


def pos(p: int, end: int, newest: int | None = 5000, ref: int | None = 2000) -> t.LogPosition:
    return t.LogPosition(PartitionId(p), Offset(0), Offset(end), Offset(end), newest, ref)


def test_lag_seconds_is_newest_minus_last_committed_and_zero_when_caught_up() -> None:
    assert t.lag_seconds(10, 10, 9000, 1000) == 0.0
    assert t.lag_seconds(12, 10, None, None) == 0.0
    assert t.lag_seconds(5, 10, 9000, 1000) == 8.0
    assert t.lag_seconds(5, 10, 1000, 9000) == 0.0  # CreateTime going backwards
    assert t.lag_seconds(5, 10, None, 1000) is None
    assert t.lag_seconds(5, 10, 9000, -1) is None  # no timestamp on the record


def test_partition_status_counts_records_behind() -> None:
    s = t.partition_status(pos(1, 40), Offset(30))
    assert (s.partition, s.committed_offset, s.log_end_offset) == (1, 30, 40)
    assert (s.lag_records, s.lag_seconds) == (10, 3.0)
    unknown = t.partition_status(pos(1, 40), None)
    assert (unknown.committed_offset, unknown.lag_records, unknown.lag_seconds) == (
        None,
        None,
        None,
    )


def test_explicitly_disabled_in_either_spelling() -> None:
    for name in ("table.topic.enable", "automq.table.topic.enable"):
        configs = {name: "false"}
        assert t.explicitly_disabled(configs, resolve_table_topic(configs))
    assert not t.explicitly_disabled({}, resolve_table_topic({}))
    assert not t.explicitly_disabled({"table.topic.enable": "true"}, CFG)


def build(
    state: TableState | None, info: t.TableInfo, cfg: TableTopicConfig = CFG
) -> t.TableStatus:
    return t.build_status(
        T,
        cfg,
        catalog_name="floe",
        state=state,
        info=info,
        positions=[pos(0, 10), pos(1, 4)],
    )


def test_before_recovery_the_table_gives_offsets_and_last_commit() -> None:
    info = t.TableInfo(
        exists=True,
        snapshots=3,
        committed={P0: Offset(10)},
        commit_id="c1",
        commit_ms=1_700_000_000_000,
        rows=7,
        files=2,
    )
    s = build(None, info)
    assert s.status == "starting"
    assert s.table == "default.a_b_c_fb187eed"  # the name mapping of table_identifier
    assert s.catalog_table == "floe.default.a_b_c_fb187eed"
    assert [(p.committed_offset, p.lag_records) for p in s.partitions] == [(10, 0), (0, 4)]
    assert (s.last_commit_id, s.last_commit_rows, s.last_commit_files) == ("c1", 7, 2)
    assert s.last_commit_time == "2023-11-14T22:13:20.000+00:00"
    assert s.last_commit_duration_s is None
    assert s.snapshots == 3
    assert s.settings.convert_value_type == "string"


def test_a_round_made_here_reports_its_own_numbers() -> None:
    state = TableState(T, ("default", "t")).apply_round(
        (PartitionRange(P0, Offset(0), Offset(10)),),
        RoundResult("c2", 1_700_000_000_000, 1.23456, rows=10, files=1, skipped=2),
    )
    s = build(state, t.TableInfo(exists=True, snapshots=1, commit_id="c2", rows=99, files=9))
    assert s.status == "ok"
    assert (s.last_commit_rows, s.last_commit_files, s.last_commit_duration_s) == (10, 1, 1.235)
    assert (s.skipped_records, s.rounds, s.last_error) == (2, 1, None)
    assert [p.lag_records for p in s.partitions] == [0, 4]
    failing = build(state.with_error("RuntimeError: boom"), t.TableInfo(exists=True))
    assert (failing.status, failing.last_error) == ("failing", "RuntimeError: boom")
    stopped = build(state.with_error("bad record", stopped=True), t.TableInfo(exists=True))
    assert (stopped.status, stopped.last_error) == ("stopped", "bad record")


def test_a_failed_start_and_a_partition_ahead_of_its_log_are_failing() -> None:
    starting = TableState.starting(T, ("default", "t"))
    assert build(starting, t.TableInfo(exists=False)).status == "starting"
    failed = build(
        starting.with_error("the table holds data but no Floe offsets"), t.TableInfo(exists=False)
    )
    assert (failed.status, failed.last_error) == (
        "failing",
        "the table holds data but no Floe offsets",
    )
    ahead = TableState(T, ("default", "t"), committed={P0: Offset(15)}, note="recreated")
    s = build(ahead, t.TableInfo(exists=True))
    assert s.status == "failing" and s.note == "recreated"
    error = s.partitions[0].error
    assert error is not None and "up to 14 but the log ends at 10" in error
    assert s.partitions[1].error is None


def test_the_table_counts_show_before_the_coordinator_has_state() -> None:
    s = build(None, t.TableInfo(exists=True, committed={P0: Offset(10)}, skipped=3, lost=4))
    assert (s.skipped_records, s.lost_records) == (3, 4)


def test_unreadable_table_without_state_leaves_offsets_unknown() -> None:
    s = build(None, t.TableInfo(exists=False, error="OperationalError: locked"))
    assert s.table_error == "OperationalError: locked"
    assert all(p.committed_offset is None and p.lag_records is None for p in s.partitions)
    nothing = build(None, t.TableInfo(exists=False))
    assert [p.committed_offset for p in nothing.partitions] == [0, 0]


def test_disabled_topic_status() -> None:
    cfg = resolve_table_topic({"table.topic.enable": "false"})
    s = build(None, t.TableInfo(exists=True, snapshots=1, committed={P0: Offset(10)}), cfg)
    assert (s.status, s.enabled) == ("disabled", False)


# --- reads from a real store and an empty catalog -------------------------------------


@pytest.fixture
def service(tmp_path: Path) -> Iterator[TableStatusService]:
    config = load_config(None, {"data.dir": str(tmp_path / "data")}, {})
    store = LocalStore(tmp_path / "data", config)
    try:
        yield TableStatusService(store, config, manager=None)
    finally:
        store.close()


def append(store: LocalStore, topic: str, partition: int, timestamps: list[int]) -> None:
    plog = store.partition(TopicName(topic), PartitionId(partition))
    base = plog.log_end_offset
    records = [Record(base + i, ts, None, b"v") for i, ts in enumerate(timestamps)]
    buf = bytearray(encode_batch(records, base_offset=base))
    plog.append(buf, scan(buf), 0)


def test_record_timestamps_and_log_position(service: TableStatusService) -> None:
    store = service.store
    assert isinstance(store, LocalStore)
    store.create_topic(T, 1, {})
    append(store, T, 0, [1000, 3000, 2000])
    append(store, T, 0, [4000])
    plog = store.partition(T, P0)
    assert [t.record_timestamp(plog, Offset(o)) for o in range(4)] == [1000, 3000, 2000, 4000]
    assert t.record_timestamp(plog, Offset(9)) is None
    behind = t.log_position(plog, Offset(2))  # last committed: offset 1 at 3000
    assert (behind.newest_ts, behind.reference_ts, behind.log_end) == (4000, 3000, 4)
    assert t.partition_status(behind, Offset(2)).lag_seconds == 1.0
    nothing = t.log_position(plog, Offset(0))  # first uncommitted stands in
    assert nothing.reference_ts == 1000
    caught_up = t.log_position(plog, Offset(4))
    assert caught_up.newest_ts is None
    assert t.partition_status(caught_up, Offset(4)).lag_seconds == 0.0


def test_status_lists_table_topics_only(service: TableStatusService) -> None:
    store = service.store
    assert isinstance(store, LocalStore)
    store.create_topic(T, 2, {"table.topic.enable": "true"})
    store.create_topic(TopicName("plain"), 1, {})
    store.create_topic(TopicName("off"), 1, {"automq.table.topic.enable": "false"})
    append(store, T, 1, [1000, 2000])

    (only,) = asyncio.run(service.status())
    assert (only.topic, only.status, only.snapshots) == (T, "starting", None)
    assert [(p.committed_offset, p.log_end_offset, p.lag_records) for p in only.partitions] == [
        (0, 0, 0),
        (0, 2, 2),
    ]
    assert only.partitions[1].lag_seconds == 1.0
    assert asyncio.run(service.status(T)) == [only]
    with pytest.raises(NotFoundError, match="'plain' is not a table topic"):
        asyncio.run(service.status("plain"))
    with pytest.raises(NotFoundError, match="'off' is not a table topic"):  # no table
        asyncio.run(service.status("off"))
    with pytest.raises(NotFoundError, match="unknown topic 'nope'"):
        asyncio.run(service.status("nope"))


def maintenance_run(started_ms: int) -> MaintenanceResult:
    return MaintenanceResult(
        started_ms=started_ms,
        duration_s=1.0,
        rewritten_files=2,
        added_files=1,
        rewritten_bytes=10,
        expired_snapshots=0,
        deleted_files=0,
        orphan_files=0,
        rewritten_manifests=0,
        added_manifests=0,
    )


@pytest.mark.parametrize(
    ("coordinator_ms", "table_ms", "shown_ms"),
    [
        (None, None, None),
        (None, 5, 5),  # no coordinator run (another broker's, or before a restart)
        (7, None, 7),  # the table not read yet
        (7, 5, 7),
        (5, 7, 7),  # a run recorded in the table since (another broker's)
    ],
)
def test_maintenance_status_shows_the_newer_run(
    coordinator_ms: int | None, table_ms: int | None, shown_ms: int | None
) -> None:
    cfg = resolve_table_topic({"table.topic.enable": "true"})
    mine = MaintenanceState(
        last=None if coordinator_ms is None else maintenance_run(coordinator_ms)
    )
    info = t.TableInfo(True, maintenance=None if table_ms is None else maintenance_run(table_ms))
    shown = t.maintenance_status(cfg, info, mine)
    assert (None if shown.last is None else shown.last.started_ms) == shown_ms
