"""A member's read-only copy of the writer's Schema Registry, followed over the Kafka
protocol (floe.cluster.follow): a real Kafka listener on a real store holds the
registry's journal; the follower's copy answers as the leader's registry does, follows
its later writes and deletes, and starts over when the leader's log no longer holds
where it was."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from floe.broker.core import Broker
from floe.cluster.follow import TopicFollower
from floe.cluster.interface import BrokerInfo
from floe.config import broker as keys
from floe.config import load_config
from floe.registry.core.service import TOPIC, NewSchema, ReadOnlyRegistryError, Registry
from floe.server.kafka import KafkaServer
from floe.storage.journal import Journal
from floe.storage.local import LocalStore
from floe.types import PartitionId
from helpers.broker import free_port


def record(name: str) -> NewSchema:
    fields = [{"name": "id", "type": "long"}]
    return NewSchema(json.dumps({"type": "record", "name": name, "fields": fields}))


def answers(registry: Registry) -> list[tuple[str, int, int, str]]:
    """Every subject's versions as the registry answers them, deleted ones included."""
    return [
        (s, v.version, v.schema_id, v.schema)
        for s in registry.subjects(deleted=True)
        for v in registry.versions(s, deleted=True)
    ]


def test_a_follower_answers_as_the_leaders_registry(tmp_path: Path) -> None:
    async def scenario() -> None:
        config = load_config(None, {"data.dir": str(tmp_path)}, environ={})
        store = LocalStore(tmp_path, config)
        leader = Registry(Journal(store, TOPIC))
        leader.open()
        port = free_port()
        server = KafkaServer(
            Broker(store, config, "c", "127.0.0.1", port),
            "127.0.0.1", port, config[keys.SOCKET_REQUEST_MAX_BYTES],
        )  # fmt: skip
        await server.start()
        copy = Registry.follower()
        resets = []

        def reset() -> None:
            resets.append(follower.next)
            copy.reset()

        follower = TopicFollower(
            TOPIC,
            lambda: BrokerInfo(1, "127.0.0.1", port),
            copy.follow,
            reset,
            interval_s=0.05,
            wait_ms=50,
        )
        task = asyncio.create_task(follower.run())

        async def caught_up() -> None:
            end = store.partition(TOPIC, PartitionId(0)).log_end_offset
            while follower.next < end:
                await asyncio.sleep(0.02)
            await asyncio.wait_for(follower.caught_up.wait(), 10)

        try:
            for i in range(30):
                await leader.register(f"s{i}-value", record(f"R{i}"))
            await asyncio.wait_for(caught_up(), 10)
            assert answers(copy) == answers(leader) and len(answers(copy)) == 30
            await leader.delete_subject("s3-value")
            await leader.register("late-value", record("Late"), normalize=True)
            await asyncio.wait_for(caught_up(), 10)
            assert answers(copy) == answers(leader)
            assert copy.state.next_id == leader.state.next_id
            # the leader's log no longer holds where the copy is: read again from its start
            task.cancel()
            plog = store.partition(TOPIC, PartitionId(0))
            follower.next = int(plog.log_end_offset) + 5  # as after the leader's log shrank
            follower.caught_up.clear()
            task = asyncio.create_task(follower.run())
            await asyncio.wait_for(caught_up(), 10)
            assert resets and answers(copy) == answers(leader)
            with pytest.raises(ReadOnlyRegistryError):
                await copy.register("x-value", record("X"))
        finally:
            task.cancel()
            await server.stop(grace_s=1)
            store.close()

    asyncio.run(scenario())
