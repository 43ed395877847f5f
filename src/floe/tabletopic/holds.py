"""Retention holds of the partitions a broker leads of table topics coordinated elsewhere.

A table topic's coordinator holds the partitions its broker leads
(:meth:`~floe.tabletopic.coordinator.TableCoordinator.hold`). In a cluster whose brokers
share partitions, the other partitions of a table topic are led by other brokers,
whose retention and compaction must keep what the table has not materialized either
(``table.topic.retention.wait``). Such a broker reads that from the table itself: before
each maintenance pass, :class:`TableHolds` recovers each such topic's commit state
from the catalog as the coordinator does (the committed offsets of the table's newest
Floe commit, for this incarnation of the topic) and holds each partition it leads at
its committed end. The table only moves forward, so a hold read a while ago keeps more,
never less; a partition whose table cannot be read (no catalog, no table yet, another
cluster's table) is held at its log start: nothing is deleted from it.

Ownership: one per broker of such a cluster, used on its event loop (catalog reads in
worker threads).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from floe.config import BrokerConfig
from floe.config import broker as keys
from floe.config.tabletopic import resolve_table_topic
from floe.errors import ConfigError
from floe.storage.interface import NotOwnerError, PartitionLog, Store, TopicMeta
from floe.tabletopic import catalog as cat
from floe.tabletopic.model import TopicIdentity
from floe.tabletopic.placement import Leads
from floe.types import Offset, PartitionId, TopicName

log = logging.getLogger("floe.tabletopic.holds")


class TableHolds:
    """The retention holds of the partitions of ``store`` this broker ``leads`` of the
    table topics it does not coordinate (``here``); ``cluster_id()`` (blocking) is the
    log's id, which the tables record with their offsets."""

    def __init__(
        self,
        store: Store,
        config: BrokerConfig,
        leads: Leads,
        here: Callable[[TopicMeta], bool],
        cluster_id: Callable[[], str | None],
    ) -> None:
        self._store = store
        self._config = config
        self._leads = leads
        self._here = here
        self._cluster_id = cluster_id
        self._catalog: cat.SharedCatalog | None = None
        self._committed: dict[TopicName, Mapping[PartitionId, Offset]] = {}
        """By topic: the committed ends its table recorded when last read."""
        self._failing: set[TopicName] = set()
        self._holding: set[tuple[TopicName, PartitionId]] = set()
        """The partitions given a hold here (released once their topic is not held)."""

    def _held_topics(self) -> dict[TopicName, tuple[str, str]]:
        """The table topics waiting for their table (``retention.wait``) coordinated on
        another broker, of which this broker leads a partition, with their tables."""
        from floe.tabletopic.convert import table_identifier

        broker = {keys.TABLE_TOPIC_NAMESPACE.name: self._config[keys.TABLE_TOPIC_NAMESPACE]}
        found = {}
        for name, meta in self._store.topics().items():
            if meta.internal:
                continue
            try:
                cfg = resolve_table_topic(meta.configs, broker)
            except ConfigError:
                continue  # the writer's coordinator logs it
            if not (cfg.enable and cfg.retention_wait) or self._here(meta):
                continue  # its coordinator holds those
            if any(self._leads(name, PartitionId(p)) for p in range(meta.partitions)):
                found[name] = table_identifier(cfg.namespace, name)
        return found

    async def refresh(self) -> None:
        """Read the committed ends of the tables of the topics held here."""
        held = self._held_topics()
        for name in list(self._committed):
            if name not in held:
                del self._committed[name]
        if not held:
            return
        cluster_id = await asyncio.to_thread(self._cluster_id)
        for name, table in held.items():
            meta = self._store.topic(name)
            if meta is None:
                continue
            identity = (
                TopicIdentity(cluster_id, str(meta.topic_id), int(meta.created_ms))
                if cluster_id is not None
                else None
            )
            try:
                committed = await asyncio.to_thread(self._read, name, table, identity)
            except Exception as exc:  # held at the log start (below) until it reads
                self._committed.pop(name, None)
                if name not in self._failing:
                    log.warning(
                        "tabletopic.hold_unknown topic=%s error=%s (its partitions here "
                        "keep every record until the table can be read)",
                        name, exc,
                    )  # fmt: skip
                    self._failing.add(name)
                continue
            self._failing.discard(name)
            self._committed[name] = committed

    def _read(
        self, topic: TopicName, table: tuple[str, str], identity: TopicIdentity | None
    ) -> Mapping[PartitionId, Offset]:
        from floe.tabletopic.rounds import recovered

        if self._catalog is None:
            self._catalog = cat.SharedCatalog(cat.CatalogSettings.from_config(self._config))
        return dict(recovered(self._catalog(), topic, table, identity).committed)

    def apply(self) -> None:
        """Hold every table topic partition led here at its table's committed end (at
        its log start while that is unknown), and release the holds of the others.
        Synchronous, so that a maintenance pass started right after sees a hold on
        every such partition, those opened since the last :meth:`refresh` too."""
        holding: set[tuple[TopicName, PartitionId]] = set()
        for name in self._held_topics():
            meta = self._store.topic(name)
            if meta is None:
                continue
            committed = self._committed.get(name)
            for p in map(PartitionId, range(meta.partitions)):
                plog = self._led(name, p)
                if plog is None:
                    continue
                hold = plog.log_start_offset if committed is None else committed.get(p, Offset(0))
                plog.set_retention_hold(hold)
                holding.add((name, p))
        for name, p in self._holding - holding:  # no longer a table topic waiting for it
            plog = self._led(name, p)
            if plog is not None:
                plog.set_retention_hold(None)
        self._holding = holding

    def _led(self, topic: TopicName, partition: PartitionId) -> PartitionLog | None:
        if not self._leads(topic, partition):
            return None
        try:
            return self._store.partition(topic, partition)
        except NotOwnerError:
            return None
