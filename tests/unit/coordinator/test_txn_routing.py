"""The broker's transaction coordinator as Kafka places it: a transactional id's
coordinator is the leader of its ``__transaction_state`` partition, a broker loads and
unloads the transactional ids of the partitions it leads (completing what it finds
prepared, with its own coordinator epoch), and producer ids stay unique across shards
without the shards asking one another."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from floe.config.loader import load_config
from floe.coordinator.shards import partition_for
from floe.coordinator.txn.coordinator import TICK_S, TOPIC, TransactionCoordinator
from floe.coordinator.txn.shard import ID_BLOCK, TxnShard, lane_of, next_block
from floe.coordinator.txn.state import TxnState
from floe.errors import ErrorCode, KafkaError
from floe.storage.local import LocalStore
from floe.types import PartitionId, TopicName

OUT = TopicName("out")
TID = "my-app-42"  # partition 13 of 50


class Env:
    def __init__(self, data_dir: Path, partitions: int = 50) -> None:
        toml = data_dir.parent / "floe.toml"
        toml.touch()
        self.config = load_config(
            toml,
            {"log.flush.policy": "interval", "transaction.state.log.num.partitions": partitions},
            {},
        )
        self.store = LocalStore(data_dir, self.config)
        self.store.create_topic(OUT, 2, {})
        self.led: set[int] = set()
        self.epoch = 7
        self.groups: list[tuple[str, int, bool, int]] = []

    def coordinator(self, *, sharing: bool = True) -> TransactionCoordinator:
        async def complete(group: str, pid: int, _epoch: int, commit: bool, coord: int) -> None:
            self.groups.append((group, pid, commit, coord))

        return TransactionCoordinator(
            self.store,
            self.config,
            complete_group=complete,
            notify=lambda: None,
            leads=(lambda t, p: t == TOPIC and int(p) in self.led) if sharing else None,
            epoch_of=lambda _p: self.epoch,
        )

    def marker_epochs(self, partition: int) -> dict[int, int]:
        """Producer id -> coordinator epoch of its last marker in ``out-<partition>``."""
        plog = self.store.partition(OUT, PartitionId(partition))
        return {e.producer_id: e.coordinator_epoch for e in plog.producers()}


async def no_groups(*_: object) -> None:
    raise AssertionError("a transaction that stays prepared completes no group")


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path / "data")
    yield e
    e.store.close()


def test_the_controller_creates_the_topic_with_kafkas_partition_count(env: Env) -> None:
    env.coordinator()
    meta = env.store.topic(TOPIC)
    assert meta is not None and meta.partitions == 50 and meta.internal
    assert partition_for(TID, 50) == 13


def test_a_transactional_id_is_served_only_where_its_partition_is_led(env: Env) -> None:
    async def go() -> None:
        tc = env.coordinator()
        await tc.start()
        try:
            with pytest.raises(KafkaError) as refused:
                await tc.init_producer_id(TID, 10_000, -1, -1)
            assert refused.value.code is ErrorCode.not_coordinator
            env.led.add(13)  # opened here: served at once
            pid, epoch = await tc.init_producer_id(TID, 10_000, -1, -1)
            assert tc.held() == [13] and tc.coordinates(TID) and not tc.coordinates("g")
            env.led.clear()  # handed over
            await asyncio.sleep(3 * TICK_S)
            assert tc.held() == []
            with pytest.raises(KafkaError) as elsewhere:
                await tc.add_partitions(TID, pid, epoch, [(OUT, 0)])
            assert elsewhere.value.code is ErrorCode.not_coordinator

            # meanwhile its new coordinator decided a commit, and died before its markers
            shard = TxnShard(
                env.store, partition=13, partitions=50, complete_group=no_groups,
                notify=lambda: None, max_timeout_ms=60_000, abort_check_interval_ms=10_000,
                id_expiration_ms=86_400_000,
            )  # fmt: skip
            shard.load()
            await shard.add_partitions(TID, pid, epoch, [(OUT, 0)])
            await shard.add_offsets(TID, pid, epoch, "g")
            md = shard.state.txns[TID]
            await shard._put(md, replace(md, state=TxnState.PREPARE_COMMIT))
            assert env.marker_epochs(0) == {}

            env.epoch = 8  # the partition moved: its next owner's epoch
            env.led.add(13)  # led here again: loaded from the partition, commit completed
            await asyncio.sleep(3 * TICK_S)
            found = tc.describe(TID)
            assert found is not None and found.state is TxnState.COMPLETE_COMMIT
            assert env.marker_epochs(0) == {pid: 8}
            assert env.groups == [("g", pid, True, 8)]
        finally:
            await tc.stop()

    asyncio.run(go())


def test_producer_ids_are_unique_across_shards_and_restarts(env: Env) -> None:
    """Two brokers, each leading one partition, hand out ids from their own lanes of
    blocks: past a block's end, and after a restart, never one the other gave."""
    assert next_block(0, 0, 50) == 0 and next_block(0, 3, 50) == 3 * ID_BLOCK
    assert next_block(ID_BLOCK, 0, 50) == 50 * ID_BLOCK
    assert next_block(1, 0, 1) == ID_BLOCK  # one partition: the blocks of older versions

    async def ids(partition: int, count: int) -> list[int]:
        env.led = {partition}
        tc = env.coordinator()
        await tc.start()
        try:
            return [(await tc.init_producer_id(None, 0, -1, -1))[0] for _ in range(count)]
        finally:
            await tc.stop()

    first = asyncio.run(ids(0, ID_BLOCK + 5))
    second = asyncio.run(ids(1, ID_BLOCK + 5))
    again = asyncio.run(ids(0, 3))
    assert len(set(first) | set(second) | set(again)) == len(first) + len(second) + len(again)
    assert min(second) == ID_BLOCK and min(again) > max(first)


def test_a_broker_leading_no_partition_allocates_no_ids_and_checks_no_foreign_producer(
    env: Env,
) -> None:
    async def go() -> None:
        tc = env.coordinator()
        await tc.start()
        try:
            with pytest.raises(KafkaError) as none:
                await tc.init_producer_id(None, 0, -1, -1)
            assert none.value.code is ErrorCode.coordinator_not_available
            tc.check_produce(4242, 0, OUT, 0)  # coordinated elsewhere: the log checks it
        finally:
            await tc.stop()
        one = env.coordinator(sharing=False)
        await one.start()
        try:
            assert one.held() == list(range(50))
            with pytest.raises(KafkaError) as unknown:
                one.check_produce(4242, 0, OUT, 0)
            assert unknown.value.code is ErrorCode.invalid_txn_state
            pid, epoch = await one.init_producer_id(TID, 10_000, -1, -1)
            assert lane_of(pid, 50) == 13  # its transactional id's shard handed it out
            await one.add_partitions(TID, pid, epoch, [(OUT, 0)])
            one.check_produce(pid, epoch, OUT, 0)  # found through its lane
            with pytest.raises(KafkaError) as not_added:
                one.check_produce(pid, epoch, OUT, 1)
            assert not_added.value.code is ErrorCode.invalid_txn_state
        finally:
            await one.stop()

    asyncio.run(go())
