"""Commit-round coordination without Spark: a fake table records what is committed.

A failed round is retried from the offsets recorded in the table, also when the failure
came after the commit landed (no duplicates); an idle topic commits nothing; rounds take
only durable offsets and are bounded; a failure before the first recovery is visible;
retention holds follow the committed ends; the manager starts and stops coordinators as
topic configs change, and a restarted coordinator waits for its predecessor's round.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from floe.config import load_config
from floe.config.tabletopic import resolve_table_topic
from floe.tabletopic import coordinator as co
from floe.tabletopic.manager import TableTopicManager
from floe.tabletopic.model import (
    FencedError,
    OffsetsMissingError,
    Recorded,
    RoundResult,
    TableState,
)
from floe.tabletopic.placement import Ends
from floe.tabletopic.rounds import Round
from floe.tabletopic.schemas import SchemaNotCoveredError
from floe.tabletopic.spark.job import BadRecordError
from floe.types import Offset, PartitionId, TopicName

T = TopicName("t")


ZERO = Offset(0)
ALL = Offset(1 << 62)


@dataclass
class FakeLog:
    last_stable_offset: Offset
    partition: PartitionId
    log_start_offset: Offset = ZERO
    durable_offset: Offset = ALL
    retention_hold: Offset | None = None
    record_bytes: int = 10

    @property
    def log_end_offset(self) -> Offset:
        return self.last_stable_offset

    def aborted_transactions(self, start: Offset, end: Offset) -> list[Any]:
        return []

    def set_retention_hold(self, offset: Offset | None) -> None:
        self.retention_hold = offset

    def end_for_bytes(self, start: Offset, end: Offset, max_bytes: int) -> Offset:
        return Offset(min(int(end), int(start) + max(1, max_bytes // self.record_bytes)))


@dataclass
class FakeMeta:
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False
    topic_id: uuid.UUID = field(default_factory=uuid.uuid4)
    created_ms: int = 1


class FakeStore:
    def __init__(self, ends: list[int], configs: dict[str, str] | None = None) -> None:
        self.logs = [FakeLog(Offset(e), partition=PartitionId(i)) for i, e in enumerate(ends)]
        self.meta = FakeMeta(len(ends), configs or {})
        self.syncs = 0

    def topic(self, name: str) -> FakeMeta | None:
        return self.meta if name == T else None

    def topics(self) -> dict[str, FakeMeta]:
        return {T: self.meta}

    def partition(self, name: str, p: int) -> FakeLog:
        return self.logs[p]

    async def sync(self, logs: list[FakeLog]) -> None:
        self.syncs += 1
        for plog in logs:
            plog.durable_offset = plog.last_stable_offset

    def log_dir(self) -> str:
        return "/nonexistent"


class FakeTables:
    """The table: a list of committed (partition, start, end) ranges and its record."""

    def __init__(self, fail: list[str]) -> None:
        self.fail = fail  # per round: "" ok, "before" fails uncommitted, "after" committed
        self.rows: list[tuple[int, int, int]] = []
        self.record: dict[str, str] = {}
        self.recoveries = 0
        self.plans: list[Round] = []
        self.recover_error: Exception | None = None

    def recover(self, topic: TopicName, table: tuple[str, str], identity: Any) -> TableState:
        self.recoveries += 1
        if self.recover_error is not None:
            raise self.recover_error
        return TableState.recovered(topic, table, Recorded.read(self.record), identity)

    def run_round(
        self, state: TableState, cfg: Any, plan: Round, on_start: Any = None
    ) -> RoundResult:
        self.plans.append(plan)
        mode = self.fail.pop(0) if self.fail else ""
        if mode == "before":
            raise RuntimeError("spark died")
        if mode == "fenced":
            raise FencedError("another writer committed")
        if mode == "new-schema":
            raise SchemaNotCoveredError("value", 7)
        if mode == "bad-record":
            raise BadRecordError("topic t partition 0 offset 3: not UTF-8")
        self.rows += [(r.partition, r.start, r.end) for r in plan.ranges]
        result = RoundResult(
            f"c{len(self.plans)}", 0, 0.01, sum(r.end - r.start for r in plan.ranges), 1, 0
        )
        self.record = state.apply_round(plan.ranges, result).record()
        if mode == "after":
            raise RuntimeError("commit state unknown")
        return result

    def cancel(self, commit_id: str) -> None:
        pass


def cfg(**over: Any) -> Any:
    return replace(
        resolve_table_topic({"table.topic.enable": "true"}), **{"commit_interval_ms": 1, **over}
    )


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(co, "BACKOFF_MIN_S", 0.01)
    monkeypatch.setattr(co, "BACKOFF_MAX_S", 0.02)


def coordinator(store: FakeStore, tables: FakeTables, **over: Any) -> co.TableCoordinator:
    return co.TableCoordinator(
        store,  # type: ignore[arg-type]
        T,
        cfg(**over),
        lambda: tables,  # type: ignore[arg-type,return-value]
        cluster_id="cluster-a",
    )


def run_for(c: co.TableCoordinator, seconds: float) -> None:
    async def scenario() -> None:
        task = asyncio.create_task(c.run())
        await asyncio.sleep(seconds)
        task.cancel()

    asyncio.run(scenario())


def test_failed_rounds_are_redone_once_from_the_table() -> None:
    store = FakeStore([5, 3])
    tables = FakeTables(["before", "after", "fenced"])
    c = coordinator(store, tables)

    async def scenario() -> None:
        task = asyncio.create_task(c.run())
        await asyncio.sleep(0.3)
        store.logs[0].last_stable_offset = Offset(9)  # new records after the commit
        await asyncio.sleep(0.3)
        task.cancel()

    asyncio.run(scenario())
    # "after" committed [0,5) and [0,3); recovery found it; "fenced" committed nothing
    assert tables.rows == [(0, 0, 5), (1, 0, 3), (0, 5, 9)]
    assert tables.recoveries == 4  # start, and after each failed or fenced round
    assert c.state.committed == {PartitionId(0): 9, PartitionId(1): 3}
    assert c.state.last_error is None


def test_rounds_take_only_durable_offsets_after_a_sync() -> None:
    store = FakeStore([5])
    store.logs[0].durable_offset = Offset(2)
    tables = FakeTables([])
    run_for(coordinator(store, tables), 0.2)
    assert store.syncs >= 1
    assert tables.rows == [(0, 0, 5)]  # synced first, then read up to the durable end


def test_a_backlog_catches_up_in_bounded_rounds_back_to_back() -> None:
    store = FakeStore([10_000])
    tables = FakeTables([])
    c = coordinator(store, tables, round_max_records=1000, commit_interval_ms=60_000)
    run_for(c, 0.5)  # one interval is a minute: only back-to-back rounds can finish
    assert tables.rows == [(0, i, i + 1000) for i in range(0, 10_000, 1000)]
    bytes_bound = coordinator(FakeStore([100]), FakeTables([]), round_max_bytes=300)
    assert bytes_bound.cfg.round_max_bytes == 300
    plan, more = bytes_bound.plan(TableState(T, bytes_bound.table), end_state(bytes_bound))
    assert plan is not None and more
    assert [(r.start, r.end) for r in plan.ranges] == [(0, 30)]  # 300 bytes of 10 each


def end_state(c: co.TableCoordinator) -> Ends:
    return asyncio.run(c.ends())


def test_tasks_are_cut_by_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(co, "TASK_MAX_BYTES", 100)
    c = coordinator(FakeStore([35]), FakeTables([]))
    plan, more = c.plan(TableState(T, c.table), end_state(c))
    assert plan is not None and not more
    assert [(r.start, r.end) for r in plan.pieces] == [(0, 10), (10, 20), (20, 30), (30, 35)]


def test_retention_holds_follow_the_committed_ends() -> None:
    store = FakeStore([5, 0])
    store.logs[1].log_start_offset = Offset(0)
    tables = FakeTables([])
    c = coordinator(store, tables)
    c.hold()
    assert [p.retention_hold for p in store.logs] == [0, 0]  # unknown yet: hold it all
    run_for(c, 0.2)
    assert [p.retention_hold for p in store.logs] == [5, 0]
    off = coordinator(store, tables, retention_wait=False)
    off.hold()
    assert [p.retention_hold for p in store.logs] == [None, None]


def test_a_failure_before_the_first_recovery_is_shown() -> None:
    tables = FakeTables([])
    tables.recover_error = OffsetsMissingError("the table holds data but no Floe offsets")
    c = coordinator(FakeStore([5]), tables)
    run_for(c, 0.2)
    assert tables.rows == []
    assert c.state.pending and c.state.last_error is not None
    assert c.state.last_error.startswith("the table holds data")  # no class name prefix
    assert c.state.failed_rounds >= 1


def test_schema_mode_without_registry_fails_the_round_and_says_why() -> None:
    tables = FakeTables([])
    c = coordinator(FakeStore([5]), tables, convert_value_type="by_schema_id")
    run_for(c, 0.2)
    assert tables.rows == []
    assert c.state.last_error is not None
    assert "registry.enable=false" in c.state.last_error


def test_unknown_schema_id_from_workers_redoes_the_round_at_once() -> None:
    tables = FakeTables(["new-schema"])
    c = coordinator(FakeStore([5]), tables)
    run_for(c, 0.2)
    assert tables.rows == [(0, 0, 5)]  # redone, committed once
    assert c.state.last_error is None
    assert c._seen["value"] == {7}  # the next rounds plan for the reported id


def test_bad_record_under_tolerance_none_stops_the_table() -> None:
    tables = FakeTables(["bad-record"])
    c = coordinator(FakeStore([5]), tables)
    run_for(c, 0.3)
    assert tables.rows == []
    assert len(tables.plans) == 1  # no retry: stopped until the settings change
    assert c.state.stopped
    assert c.state.last_error is not None and "offset 3" in c.state.last_error


def test_deleted_records_commit_without_data_and_are_not_counted_twice() -> None:
    store = FakeStore([8])
    store.logs[0].log_start_offset = Offset(8)  # everything deleted before materialized
    tables = FakeTables([])
    c = coordinator(store, tables)
    run_for(c, 0.2)
    assert tables.rows == []
    assert len(tables.plans) == 1 and tables.plans[0].ranges == ()  # one offsets-only commit
    assert Recorded.read(tables.record).lost == 8
    again = coordinator(store, tables)  # a restart: the table already counts them
    run_for(again, 0.2)
    assert again.state.lost_total == 8 and len(tables.plans) == 1


def test_manager_follows_topic_configs_and_hands_over_the_running_round() -> None:
    store = FakeStore([0], {"table.topic.enable": "true"})
    manager = TableTopicManager(store, load_config(None, {}, environ={}))  # type: ignore[arg-type]
    tables = FakeTables([])
    manager.tables = lambda: tables  # type: ignore[assignment,method-assign,return-value]
    release = threading.Event()

    async def scenario() -> None:
        manager.reconcile()
        first = manager.coordinators[T]
        manager.reconcile()
        assert manager.coordinators[T] is first  # unchanged config: same coordinator
        # a round of the first coordinator still runs in its thread
        first._inflight = asyncio.ensure_future(asyncio.to_thread(release.wait, 5))
        store.meta.configs["table.topic.commit.interval.ms"] = "2000"
        manager.reconcile()
        second = manager.coordinators[T]
        assert second is not first  # changed: restarted...
        await asyncio.sleep(0.2)
        assert second.state.pending  # ...but it waits for the first one's round
        release.set()
        await first.finished()
        store.meta.configs["table.topic.enable"] = "false"
        manager.reconcile()
        assert T not in manager.coordinators
        assert store.logs[0].retention_hold is None  # released with the table topic
        await manager.stop()

    asyncio.run(scenario())
