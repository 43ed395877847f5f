"""The broker's shared state and the per-request context handlers receive.

Ownership: one :class:`Broker` per process, owned by the event loop that serves the
Kafka listener; created by the composition root (``floe.app``) after the store is
open, and closed with it. Handlers never keep references to it beyond a request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from floe.broker.stats import BrokerStats
from floe.config import BrokerConfig
from floe.config import broker as keys
from floe.coordinator.group import GroupCoordinator
from floe.coordinator.txn.coordinator import TransactionCoordinator
from floe.errors import ErrorCode, KafkaError
from floe.storage.interface import InvalidTopicError, PartitionLog, Store, TopicMeta
from floe.types import PartitionId, TopicName

log = logging.getLogger("floe.broker")

Reply = Any | None | Awaitable[Any | None]
"""What a handler returns: a kio response entity, ``None`` for no response (acks=0),
or an awaitable of either (answered later, in request order)."""


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What a handler knows about the request beyond its body."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: str
    response_class: type


class DataWatch:
    """Wakes long-polling fetches when records are appended.

    Ownership: the broker's event loop. Waiters are futures resolved (all at once) by
    :meth:`notify`; a waiter that times out simply stops waiting.
    """

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] = []

    def notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def wait(self, timeout_s: float) -> None:
        """Return on the next append or after ``timeout_s``, whichever is first."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await asyncio.wait_for(fut, timeout=max(timeout_s, 0.0))
        except TimeoutError:
            pass
        finally:
            if fut in self._waiters:
                self._waiters.remove(fut)


@dataclass
class Broker:
    """Broker-wide state the Kafka API handlers share."""

    store: Store
    config: BrokerConfig
    cluster_id: str
    advertised_host: str
    advertised_port: int
    watch: DataWatch = field(default_factory=DataWatch)
    started_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    stats: BrokerStats = field(default_factory=BrokerStats)
    """Traffic and request counters, exported at scrape time by ``floe.observability``."""
    groups: GroupCoordinator | None = None
    """Consumer groups and committed offsets; set and started by the composition root."""
    transactions: TransactionCoordinator | None = None
    """Producer ids and transactions; set and started by the composition root."""

    @property
    def node_id(self) -> int:
        return self.config[keys.NODE_ID]

    @property
    def flush_on_ack(self) -> bool:
        """acks=all waits for an fsync (``log.flush.policy=acks``)."""
        return self.config[keys.LOG_FLUSH_POLICY] == "acks"

    def auto_create(self, name: TopicName) -> TopicMeta:
        """Create ``name`` with the broker defaults (auto.create.topics.enable).

        Raises:
            KafkaError: UNKNOWN_TOPIC_OR_PARTITION when auto-creation is off,
                INVALID_TOPIC_EXCEPTION for an invalid name.
        """
        if not self.config[keys.AUTO_CREATE_TOPICS]:
            raise KafkaError(f"unknown topic {name}", ErrorCode.unknown_topic_or_partition)
        if name.startswith("__"):
            raise InvalidTopicError(f"{name}: names starting with __ are reserved")
        meta = self.store.create_topic(name, self.config[keys.NUM_PARTITIONS], {})
        log.info("topic.auto_created topic=%s partitions=%d", name, meta.partitions)
        return meta

    def partition_for_write(
        self, name: TopicName, partition: PartitionId, *, create: bool
    ) -> PartitionLog:
        """The log to append to, auto-creating the topic when allowed."""
        if create and self.store.topic(name) is None:
            self.auto_create(name)
        return self.store.partition(name, partition)


def now_ms() -> int:
    return int(time.time() * 1000)
