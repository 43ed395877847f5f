"""Exactly-once under operator actions, through real Spark and a real Iceberg catalog.

Each test runs table topics in this process (tests/helpers/tables.py) so it can reach
inside a round: a commit held back while the coordinator is restarted; two writer
generations at once; two clusters sharing one catalog; a topic deleted and recreated;
compaction, DELETE and snapshot expiry run on the table between rounds. In every case
the table holds each (partition, offset) of the topic exactly once, or Floe refuses to
write and says why.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from floe.config.tabletopic import resolve_table_topic
from floe.tabletopic.coordinator import TableCoordinator
from floe.tabletopic.model import FencedError, OffsetsMissingError
from floe.tabletopic.spark import job
from floe.types import TopicName
from helpers.spark import SPARK_WARNING_FILTERS
from helpers.tables import Lake, Node, unique

pytestmark = [*SPARK_WARNING_FILTERS, pytest.mark.timeout(300)]


class HeldCommit:
    """Holds the first ``commit_round`` call back until released (records the outcome
    of every call)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.outcomes: list[str] = []
        real = job.commit_round

        def commit_round(*args: Any, **kwargs: Any) -> Any:
            first = not self.entered.is_set()
            if first:
                self.entered.set()
                self.release.wait(120)
            try:
                done = real(*args, **kwargs)
            except FencedError:
                self.outcomes.append("fenced")
                raise
            self.outcomes.append("committed")
            return done

        monkeypatch.setattr(job, "commit_round", commit_round)

    async def wait_entered(self) -> None:
        assert await asyncio.to_thread(self.entered.wait, 120), "no round reached its commit"


def values(prefix: str, n: int) -> list[bytes | None]:
    return [f"{prefix}{i}".encode() for i in range(n)]


def test_a_coordinator_restarted_mid_round_never_commits_a_range_twice(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The round is held between its Spark job and its commit while a settings change
    restarts the coordinator; both generations' rounds land once, nothing twice."""
    held = HeldCommit(monkeypatch)

    async def scenario() -> None:
        node.create("handoff", 2)
        for p in (0, 1):
            node.produce("handoff", p, values("a", 50))
        await node.start()
        await held.wait_entered()
        node.alter("handoff", {"table.topic.commit.interval.ms": "2000"})
        node.manager.reconcile()  # cancels the first coordinator, starts the second
        for p in (0, 1):
            node.produce("handoff", p, values("b", 25))
        await asyncio.sleep(3)  # the second generation would run its round meanwhile
        held.release.set()
        rows = await node.wait_rows("handoff", 150)
        await asyncio.sleep(3)  # more rounds: they must not add anything
        rows = await asyncio.to_thread(node.rows, "handoff")
        await node.stop()
        assert unique(rows), "a (partition, offset) is in the table twice"
        assert len(rows) == 150
        assert [(p, o) for p, o, _ in rows] == [(p, o) for p in (0, 1) for o in range(75)]

    asyncio.run(scenario())


def test_a_second_writer_generation_is_fenced_at_its_commit(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two coordinators of one topic run at once (as two brokers could): the one whose
    starting point is stale when it commits is refused, then resumes from the table."""
    held = HeldCommit(monkeypatch)
    cfg = resolve_table_topic(
        {
            "table.topic.enable": "true",
            "table.topic.convert.value.type": "string",
            "table.topic.commit.interval.ms": "1000",
        }
    )

    def coordinator() -> TableCoordinator:
        return TableCoordinator(
            node.store, TopicName("gen"), cfg, node.manager.tables, cluster_id="cluster-a"
        )

    async def scenario() -> None:
        await node.listen()  # the rounds' Spark tasks fetch from it
        node.create("gen")
        node.produce("gen", 0, values("x", 40))
        first, second = coordinator(), coordinator()
        tasks = [asyncio.create_task(first.run())]
        await held.wait_entered()  # the first is about to commit [0, 40)
        tasks.append(asyncio.create_task(second.run()))
        await node.wait_rows("gen", 40)  # the second committed [0, 40) itself
        held.release.set()
        await node.wait_for(lambda: len(held.outcomes) >= 2)
        node.produce("gen", 0, values("y", 10))
        rows = await node.wait_rows("gen", 50)
        await asyncio.sleep(2)
        rows = await asyncio.to_thread(node.rows, "gen")
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await first.finished()
        await node.stop()
        assert held.outcomes[:2] == ["committed", "fenced"]
        assert unique(rows) and len(rows) == 50

    asyncio.run(scenario())


def test_two_clusters_on_one_catalog_never_both_write_a_table(lake: Lake) -> None:
    """Two `floe up`s (two data dirs, two cluster ids) with a topic of the same name
    and the same catalog: one writes the table, the other refuses and says why."""
    a = lake.node("two-clusters-a", cluster_id="cluster-a")
    b = lake.node("two-clusters-b", cluster_id="cluster-b")

    async def scenario() -> None:
        for n, prefix in ((a, "a"), (b, "b")):
            n.create("shared")
            n.produce("shared", 0, values(prefix, 20))
        await asyncio.gather(a.start(), b.start())
        rows = await a.wait_rows("shared", 20)
        await asyncio.sleep(4)  # both had several rounds
        a.produce("shared", 0, values("a", 5))
        b.produce("shared", 0, values("b", 5))
        await asyncio.sleep(3)
        rows = await asyncio.to_thread(a.rows, "shared")
        states = [n.coordinator("shared").state for n in (a, b)]
        await asyncio.gather(a.stop(), b.stop())
        owners = {v[0] for _, _, v in rows if v}
        assert len(owners) == 1, f"both clusters wrote the table: {owners}"
        winner, loser = (0, 1) if owners == {"a"} else (1, 0)
        assert unique(rows) and len(rows) == 25
        assert states[winner].last_error is None
        error = states[loser].last_error
        assert error is not None and "another Floe cluster" in error, error

    try:
        asyncio.run(scenario())
    finally:
        a.close()
        b.close()


def test_a_recreated_topic_starts_at_zero_in_the_same_table(node: Node) -> None:
    async def scenario() -> None:
        node.create("again")
        node.produce("again", 0, values("old", 30))
        await node.start()
        await node.wait_rows("again", 30)
        node.store.delete_topic(TopicName("again"))
        node.manager.reconcile()
        node.create("again")
        node.produce("again", 0, values("new", 10))
        node.manager.reconcile()
        rows = await node.wait_rows("again", 40)
        state = node.coordinator("again").state
        await node.stop()
        assert len(rows) == 40
        assert sorted(v for _, o, v in rows if o < 10 and v and v.startswith("new")) == sorted(
            f"new{i}" for i in range(10)
        )
        assert state.note is not None and "recreated" in state.note, state.note

    asyncio.run(scenario())


def test_compaction_delete_and_expiry_do_not_make_floe_forget_its_offsets(
    node: Node, lake: Lake
) -> None:
    """rewrite_data_files, DELETE and expire_snapshots(retain_last=1) leave no snapshot
    carrying Floe's offsets; a restarted broker resumes where it was (nothing
    re-ingested). With the offsets removed as well, it refuses to guess."""

    async def scenario() -> None:
        node.create("maint", 2)
        for p in (0, 1):
            node.produce("maint", p, values("m", 30))
        await node.start()
        await node.wait_rows("maint", 60)
        await node.stop()
        name = "{}.{}".format(*node.table_name("maint"))
        await asyncio.to_thread(
            lake.sql,
            f"CALL floe.system.rewrite_data_files(table => '{name}', "
            "options => map('min-input-files', '1'))",
        )
        await asyncio.to_thread(
            lake.sql, f"DELETE FROM floe.{name} WHERE _kafka_metadata.offset < 5"
        )
        await asyncio.to_thread(
            lake.sql,
            f"CALL floe.system.expire_snapshots(table => '{name}', "
            "older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)",
        )
        (snapshot,) = node.table("maint").metadata.snapshots
        assert "floe.offsets" not in (snapshot.summary.additional_properties or {})

        node.manager = type(node.manager)(
            node.store, node.config, spark_factory=lambda: lake.spark, cluster_id="cluster-a"
        )
        for p in (0, 1):
            node.produce("maint", p, values("n", 5))
        await node.start()
        rows = await node.wait_rows("maint", 60)
        await asyncio.sleep(2)
        rows = await asyncio.to_thread(node.rows, "maint")
        await node.stop()
        assert unique(rows) and len(rows) == 60  # 60 - 10 deleted + 10 new

        await asyncio.to_thread(
            lake.sql,
            f"ALTER TABLE floe.{name} UNSET TBLPROPERTIES ('floe.offsets', 'floe.commit-id')",
        )
        await asyncio.to_thread(
            lake.sql,
            f"CALL floe.system.rewrite_data_files(table => '{name}', "
            "options => map('min-input-files', '1'))",
        )
        await asyncio.to_thread(
            lake.sql,
            f"CALL floe.system.expire_snapshots(table => '{name}', "
            "older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)",
        )
        node.manager = type(node.manager)(
            node.store, node.config, spark_factory=lambda: lake.spark, cluster_id="cluster-a"
        )
        node.produce("maint", 0, values("z", 5))
        await node.start()
        coordinator = node.coordinator("maint")
        await node.wait_for(lambda: coordinator.state.last_error is not None)
        state = coordinator.state
        await asyncio.sleep(2)
        rows_after = await asyncio.to_thread(node.rows, "maint")
        await node.stop()
        assert state.pending and state.last_error is not None
        assert "will not guess" in state.last_error
        assert len(rows_after) == 60
        assert OffsetsMissingError.__name__ not in state.last_error  # a sentence, not a class

    asyncio.run(scenario())
