"""What a standby broker knows of the log: the bucket's topics, read again every few
seconds, and nothing it could write or read records from.

A standby also follows the WAL objects' indexes (:func:`~.state.follow_wal`, one LIST
and one small ranged GET per new WAL object every :data:`REFRESH_S`): the writer it may
become reads only those written since, which at 2,000 records/s were hundreds of
reads, most of a second of the failover.

A standby (a cluster member waiting for the writer lease) listens for clients only to
point them at the writer: clients that know the standby can still find the writer after
the broker they knew died (aiokafka and kafka-python refresh metadata only from the
brokers a Metadata response named), and clients whose metadata is stale get Kafka's
errors, never a closed connection: reading or writing a partition refuses with
``NOT_LEADER_OR_FOLLOWER``, changing topics with ``NOT_CONTROLLER``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable, Mapping
from typing import NoReturn

from floe.config import BrokerConfig
from floe.config.topic import ResolvedTopicConfig
from floe.storage.interface import (
    NotControllerError,
    NotOwnerError,
    PartitionLog,
    TopicMeta,
    UnknownTopicOrPartitionError,
)
from floe.storage.local.meta import topics_from_doc
from floe.storage.object import layout
from floe.storage.object.bucket import Bucket, describe
from floe.storage.object.state import WalIndexes, follow_wal
from floe.storage.object.store import stored_cluster_id
from floe.types import PartitionId, TopicName

log = logging.getLogger(__name__)

REFRESH_S = 2.0
"""How often the standby reads the bucket's topics and WAL indexes again."""


class StandbyStore:
    """See the module docstring. Owned by the event loop; :meth:`start_background_flush`
    starts the refresh task, :meth:`close` stops it."""

    def __init__(self, bucket: Bucket, config: BrokerConfig) -> None:
        self.bucket = bucket
        self._broker = config.explicit()
        self._topics: dict[TopicName, TopicMeta] = {}
        self._task: asyncio.Task[None] | None = None
        self._reading: asyncio.Future[None] | None = None
        self.wal_indexes: WalIndexes = {}
        """The WAL objects' indexes as last followed, replaced whole (read from any
        thread): what this broker's store starts from once it is the writer."""

    def refresh(self) -> None:
        """Read the bucket's topics now (blocking; the refresh task runs it off the loop).

        Raises:
            Exception: the bucket could not be read (the last topics stay).
        """
        try:
            self._topics = topics_from_doc(self.bucket.get(layout.TOPICS_KEY))
        except FileNotFoundError:
            self._topics = {}

    def cluster_id(self) -> str | None:
        """The log's cluster id, when the bucket has one yet."""
        return stored_cluster_id(self.bucket)

    async def refreshed(self) -> None:
        """Read the bucket's topics again now: a client asked for a topic this standby
        does not know, which the writer may have created since the last read. Callers
        meanwhile share one read; never raises (the last topics stay)."""
        if self._reading is None:
            self._reading = asyncio.ensure_future(self._read_once())
        await asyncio.shield(self._reading)

    async def _read_once(self) -> None:
        try:
            await asyncio.to_thread(self.refresh)
        except Exception as exc:
            log.warning("standby.topics_unreadable error=%s", describe(exc))
        finally:
            self._reading = None

    def start_background_flush(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._refresh_every(), name="floe-standby-topics")

    def follow(self) -> None:
        """Read the new WAL objects' indexes (blocking; the refresh task runs it off the
        loop).

        Raises:
            Exception: the bucket could not be read (the last indexes stay).
        """
        self.wal_indexes = follow_wal(self.bucket, self.wal_indexes)

    async def _refresh_every(self) -> None:
        failing = False
        while True:
            try:
                await asyncio.to_thread(self.refresh)
                await asyncio.to_thread(self.follow)
                failing = False
            except Exception as exc:
                if not failing:  # once per outage
                    log.warning("standby.bucket_unreadable error=%s", describe(exc))
                failing = True
            await asyncio.sleep(REFRESH_S)

    def topics(self) -> Mapping[TopicName, TopicMeta]:
        return self._topics

    def topic(self, name: TopicName) -> TopicMeta | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMeta | None:
        return next((m for m in self._topics.values() if m.topic_id == topic_id), None)

    def _refuse(self) -> NoReturn:
        raise NotOwnerError("this broker is a standby: the cluster's writer serves this")

    def _not_controller(self) -> NoReturn:
        raise NotControllerError("this broker is a standby: the cluster's writer changes topics")

    def create_topic(
        self,
        name: TopicName,
        partitions: int,
        configs: Mapping[str, str],
        *,
        internal: bool = False,
    ) -> TopicMeta:
        self._not_controller()

    def delete_topic(self, name: TopicName) -> None:
        self._not_controller()

    def create_partitions(self, name: TopicName, total: int) -> TopicMeta:
        self._not_controller()

    def set_topic_configs(self, name: TopicName, configs: Mapping[str, str]) -> TopicMeta:
        self._not_controller()

    def partition(self, name: TopicName, partition: PartitionId) -> PartitionLog:
        self._refuse()

    def topic_config(self, name: TopicName) -> ResolvedTopicConfig:
        """Raises: UnknownTopicOrPartitionError: no such topic in the bucket (yet)."""
        meta = self._topics.get(name)
        if meta is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name}")
        return ResolvedTopicConfig(meta.configs, self._broker)

    async def wait_durable(self, logs: Iterable[PartitionLog]) -> None:
        self._refuse()

    async def sync(self, logs: Iterable[PartitionLog]) -> None:
        self._refuse()

    def run_maintenance(self, now_ms: int) -> None:
        """Nothing to maintain: a standby holds no log."""

    async def maintain(self, now_ms: int) -> None:
        """Nothing to maintain: a standby holds no log."""

    def log_dir(self) -> str:
        return f"standby of {self.bucket.description}"

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
