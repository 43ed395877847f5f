"""The broker's group coordinator as Kafka places it: a group's coordinator is the
leader of its ``__consumer_offsets`` partition (Java's hash of the group id, as Kafka
computes it), and a broker loads and unloads the groups of the partitions it leads."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from floe.config.loader import load_config
from floe.coordinator.group.api import JoinRequest, OffsetCommit
from floe.coordinator.group.coordinator import (
    DELETED_TOPICS_S,
    TICK_S,
    TOPIC,
    GroupCoordinator,
    partition_for,
)
from floe.errors import ErrorCode, KafkaError
from floe.storage.local import LocalStore
from floe.types import PartitionId, TopicName

T = TopicName("t")


@pytest.mark.parametrize(
    ("key", "partition"),
    [  # java.lang.String.hashCode() as Kafka's Utils.abs(...) % 50, computed by Java 17
        ("g", 3),
        ("hello", 22),
        ("polygenelubricants", 0),  # hashCode() is Integer.MIN_VALUE
        ("\U0001f600 group", 6),  # a surrogate pair, and a negative hash
        ("consumer-group-\u00dcn\u00efcode", 41),
        ("my-app-42", 13),
    ],
)
def test_a_group_has_the_partition_kafka_gives_it(key: str, partition: int) -> None:
    assert partition_for(key, 50) == partition


class Env:
    def __init__(self, data_dir: Path, partitions: int = 50) -> None:
        toml = data_dir.parent / "floe.toml"
        toml.touch()
        self.config = load_config(
            toml,
            {
                "log.flush.policy": "interval",
                "group.initial.rebalance.delay.ms": 60_000,
                "offsets.topic.num.partitions": partitions,
            },
            {},
        )
        self.store = LocalStore(data_dir, self.config)
        self.store.create_topic(T, 1, {})
        self.led: set[int] = set()

    def coordinator(self) -> GroupCoordinator:
        return GroupCoordinator(
            self.store, self.config, leads=lambda t, p: t == TOPIC and int(p) in self.led
        )


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path / "data")
    yield e
    e.store.close()


def join_req(group: str = "g") -> JoinRequest:
    return JoinRequest(
        group_id=group,
        member_id="",
        instance_id=None,
        client_id="c",
        client_host="/127.0.0.1",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        protocol_type="consumer",
        protocols=[("range", b"")],
        require_known_member_id=False,
    )


async def commit(gc: GroupCoordinator, group: str, offset: int) -> None:
    errors = await gc.commit_offsets(
        group,
        generation=-1,
        member_id="",
        instance_id=None,
        offsets=[OffsetCommit(T, 0, offset, -1, None)],
    )
    assert errors == {(T, 0): ErrorCode.none}


def test_the_controller_creates_the_topic_with_kafkas_partition_count(env: Env) -> None:
    env.coordinator()
    meta = env.store.topic(TOPIC)
    assert meta is not None and meta.partitions == 50 and meta.internal


def test_an_existing_topic_keeps_its_partition_count(tmp_path: Path) -> None:
    one = Env(tmp_path / "data", partitions=1)
    one.coordinator()
    one.store.close()
    fifty = Env(tmp_path / "other", partitions=50)
    fifty.store.close()
    reopened = LocalStore(tmp_path / "data", fifty.config)
    try:
        GroupCoordinator(reopened, fifty.config)
        meta = reopened.topic(TOPIC)
        assert meta is not None and meta.partitions == 1
    finally:
        reopened.close()


def test_a_group_is_served_only_where_its_partition_is_led(env: Env) -> None:
    async def go() -> None:
        gc = env.coordinator()
        gc.start()
        try:
            with pytest.raises(KafkaError) as refused:
                await commit(gc, "g", 5)
            assert refused.value.code is ErrorCode.not_coordinator
            env.led.add(partition_for("g", 50))  # opened here: served at once
            await commit(gc, "g", 5)
            assert gc.held() == [3]
            assert not gc.coordinates("hello") and gc.coordinates("g")
            waiting = asyncio.create_task(gc.join(join_req()))  # the initial delay holds it
            await asyncio.sleep(0.01)
            env.led.clear()  # handed over
            assert (await waiting).error is ErrorCode.not_coordinator
            assert gc.held() == []
            with pytest.raises(KafkaError) as moved:
                gc.fetch_offsets("g", None, False)
            assert moved.value.code is ErrorCode.not_coordinator
            env.led.add(3)  # back here: loaded again from the partition
            await asyncio.sleep(2 * TICK_S)
            assert gc.held() == [3]
            assert gc.fetch_offsets("g", None, False)[(T, 0)].offset == 5
        finally:
            await gc.stop()

    asyncio.run(go())


def test_stop_ends_waiting_joins(env: Env) -> None:
    async def go() -> None:
        env.led.add(3)
        gc = env.coordinator()
        gc.start()
        waiting = asyncio.create_task(gc.join(join_req()))
        await asyncio.sleep(0.01)
        assert not waiting.done()  # held by the initial rebalance delay
        await gc.stop()
        assert (await waiting).error is ErrorCode.coordinator_not_available
        with pytest.raises(KafkaError) as late:
            await gc.join(join_req())
        assert late.value.code is ErrorCode.coordinator_not_available

    asyncio.run(go())


def test_a_marker_completes_every_group_of_its_partition(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """WriteTxnMarkers to a ``__consumer_offsets`` partition commits the offsets the
    producer staged in each of its groups, and only in its own."""
    a, b = "g", "polygenelubricants"  # partitions 3 and 0
    env.led.update({0, 3})

    async def go() -> None:
        gc = env.coordinator()
        gc.start()
        try:
            for group in (a, b):
                await gc.stage_txn_offsets(
                    group,
                    producer_id=7,
                    producer_epoch=0,
                    generation=-1,
                    member_id="",
                    instance_id=None,
                    offsets=[OffsetCommit(T, 0, 11, -1, None)],
                )
            caplog.set_level(logging.INFO, "floe.coordinator.group")
            assert await gc.complete_partition(3, 7, 0, True) == 1
            assert "producer_id=7 epoch=0 commit=True partitions=1" in caplog.text
            assert gc.fetch_offsets(a, None, False)[(T, 0)].offset == 11
            assert not gc.shard(a).pending_transaction(a, 7)
            assert gc.shard(b).pending_transaction(b, 7)
            assert gc.fetch_offsets(b, None, False) == {}
            assert await gc.complete_partition(3, 7, 0, True) == 0  # again: nothing left
            with pytest.raises(KafkaError) as elsewhere:
                await gc.complete_partition(9, 7, 0, True)
            assert elsewhere.value.code is ErrorCode.not_coordinator
        finally:
            await gc.stop()

    asyncio.run(go())


def test_a_group_partition_of_a_one_node_broker_is_always_here(env: Env) -> None:
    async def go() -> None:
        gc = GroupCoordinator(env.store, env.config)
        gc.start()
        try:
            assert gc.held() == list(range(50))
            await commit(gc, "hello", 1)
            assert env.store.partition(TOPIC, PartitionId(22)).log_end_offset == 1
        finally:
            await gc.stop()

    asyncio.run(go())


def test_a_topic_deleted_and_created_again_between_two_looks_loses_its_offsets(
    env: Env,
) -> None:
    """A member learns of deletions from its topic list, not from DeleteTopics: a topic
    deleted and created again between two looks is a new topic (a new id), and the old
    one's committed offsets must not carry over to it (a consumer would skip records)."""
    env.led.add(3)

    async def go() -> None:
        gc = env.coordinator()
        gc.start()
        try:
            await commit(gc, "g", 5)
            await asyncio.sleep(2 * TICK_S)  # the sweep has seen the topic
            env.store.delete_topic(T)
            env.store.create_topic(T, 1, {})
            await asyncio.sleep(DELETED_TOPICS_S + 3 * TICK_S)
            assert gc.fetch_offsets("g", None, False) == {}
        finally:
            await gc.stop()

    asyncio.run(go())
