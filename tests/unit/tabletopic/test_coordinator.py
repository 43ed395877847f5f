"""Commit-round coordination without Spark: a fake table records what is committed.

A failed round is retried from the offsets recorded in the table, also when the failure
came after the commit landed (no duplicates); an idle topic commits nothing; the manager
starts and stops coordinators as topic configs change.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from floe.config import load_config
from floe.config.tabletopic import resolve_table_topic
from floe.tabletopic import coordinator as co
from floe.tabletopic.model import (
    OFFSETS_PROP,
    PartitionRange,
    RoundResult,
    TableState,
    encode_offsets,
)
from floe.tabletopic.schemas import SchemaNotCoveredError
from floe.tabletopic.spark.job import BadRecordError
from floe.types import Offset, PartitionId, TopicName

T = TopicName("t")


@dataclass
class FakeLog:
    last_stable_offset: Offset
    log_start_offset: int = 0

    def aborted_transactions(self, start: Offset, end: Offset) -> list[Any]:
        return []


@dataclass
class FakeMeta:
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False


class FakeStore:
    def __init__(self, ends: list[int], configs: dict[str, str] | None = None) -> None:
        self.logs = [FakeLog(Offset(e)) for e in ends]
        self.meta = FakeMeta(len(ends), configs or {})

    def topic(self, name: str) -> FakeMeta | None:
        return self.meta if name == T else None

    def topics(self) -> dict[str, FakeMeta]:
        return {T: self.meta}

    def partition(self, name: str, p: int) -> FakeLog:
        return self.logs[p]

    def log_dir(self) -> str:
        return "/nonexistent"


class FakeTables:
    """The table: a list of committed (partition, start, end) ranges and its summary."""

    def __init__(self, fail: list[str]) -> None:
        self.fail = fail  # per round: "" ok, "before" fails uncommitted, "after" committed
        self.rows: list[tuple[int, int, int]] = []
        self.summary: dict[str, str] | None = None
        self.recoveries = 0
        self.parts: list[Any] = []

    def recover(self, topic: TopicName, table: tuple[str, str]) -> TableState:
        self.recoveries += 1
        return TableState.recovered(topic, table, self.summary)

    def run_round(
        self,
        state: TableState,
        cfg: Any,
        ranges: tuple[PartitionRange, ...],
        aborted: Any,
        **schemas: Any,
    ) -> RoundResult:
        self.parts.append(schemas["parts"])
        mode = self.fail.pop(0) if self.fail else ""
        if mode == "before":
            raise RuntimeError("spark died")
        if mode == "new-schema":
            raise SchemaNotCoveredError("value", 7)
        if mode == "bad-record":
            raise BadRecordError("topic t partition 0 offset 3: not UTF-8")
        self.rows += [(r.partition, r.start, r.end) for r in ranges]
        self.summary = {OFFSETS_PROP: encode_offsets(state.next_offsets(ranges))}
        if mode == "after":
            raise RuntimeError("commit state unknown")
        return RoundResult("c", 0, 0.01, sum(r.end - r.start for r in ranges), 1, 0)


def cfg(**over: Any) -> Any:
    return replace(
        resolve_table_topic({"table.topic.enable": "true"}), commit_interval_ms=1, **over
    )


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(co, "BACKOFF_MIN_S", 0.01)
    monkeypatch.setattr(co, "BACKOFF_MAX_S", 0.02)


def test_failed_rounds_are_redone_once_from_the_table() -> None:
    store = FakeStore([5, 3])
    tables = FakeTables(["before", "after"])
    c = co.TableCoordinator(store, T, cfg(), lambda: tables)  # type: ignore[arg-type]

    async def scenario() -> None:
        task = asyncio.create_task(c.run())
        await asyncio.sleep(0.3)
        store.logs[0].last_stable_offset = Offset(9)  # new records after the commit
        await asyncio.sleep(0.3)
        task.cancel()

    asyncio.run(scenario())
    # the "after" failure committed [0,5) and [0,3); recovery found it: not redone
    assert tables.rows == [(0, 0, 5), (1, 0, 3), (0, 5, 9)]
    assert tables.recoveries == 3  # start, and after each failed round
    assert c.state is not None and c.state.committed == {PartitionId(0): 9, PartitionId(1): 3}
    assert c.state.last_error is None


def run_for(c: co.TableCoordinator, seconds: float) -> None:
    async def scenario() -> None:
        task = asyncio.create_task(c.run())
        await asyncio.sleep(seconds)
        task.cancel()

    asyncio.run(scenario())


def test_schema_mode_without_registry_fails_the_round_and_says_why() -> None:
    tables = FakeTables([])
    c = co.TableCoordinator(
        FakeStore([5]),  # type: ignore[arg-type]
        T,
        cfg(convert_value_type="by_schema_id"),
        lambda: tables,  # type: ignore[arg-type,return-value]
    )
    run_for(c, 0.2)
    assert tables.rows == []
    assert c.state is not None and c.state.last_error is not None
    assert "registry.enable=false" in c.state.last_error


def test_unknown_schema_id_from_workers_redoes_the_round_at_once() -> None:
    tables = FakeTables(["new-schema"])
    c = co.TableCoordinator(FakeStore([5]), T, cfg(), lambda: tables)  # type: ignore[arg-type]
    run_for(c, 0.2)
    assert tables.rows == [(0, 0, 5)]  # redone, committed once
    assert c.state is not None and c.state.last_error is None
    assert c._seen["value"] == {7}  # the next rounds plan for the reported id


def test_bad_record_under_tolerance_none_stops_the_table() -> None:
    store = FakeStore([5])
    tables = FakeTables(["bad-record"])
    c = co.TableCoordinator(store, T, cfg(), lambda: tables)  # type: ignore[arg-type]
    run_for(c, 0.3)
    assert tables.rows == []
    assert len(tables.parts) == 1  # no retry: stopped until the settings change
    assert c.state is not None and c.state.stopped
    assert c.state.last_error is not None and "offset 3" in c.state.last_error


def test_manager_follows_topic_configs() -> None:
    store = FakeStore([0], {"table.topic.enable": "true"})
    manager = co.TableTopicManager(store, load_config(None, {}, environ={}))  # type: ignore[arg-type]

    async def scenario() -> None:
        manager.reconcile()
        first = manager.coordinators[T]
        manager.reconcile()
        assert manager.coordinators[T] is first  # unchanged config: same coordinator
        store.meta.configs["table.topic.commit.interval.ms"] = "2000"
        manager.reconcile()
        assert manager.coordinators[T] is not first  # changed: restarted
        store.meta.configs["table.topic.enable"] = "false"
        manager.reconcile()
        assert T not in manager.coordinators
        await manager.stop()

    asyncio.run(scenario())
