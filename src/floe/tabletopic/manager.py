"""Table topics on a broker: one :class:`~floe.tabletopic.coordinator.TableCoordinator`
per table topic this broker coordinates.

:class:`TableTopicManager` (owned by the broker's event loop) polls the store's topics
every second and keeps one coordinator task (and its maintenance task) per topic with
``table.topic.enable=true`` that this broker coordinates (every one, or in a cluster
whose brokers share partitions those whose partition 0 it leads:
:mod:`floe.tabletopic.placement`); disabling or deleting the topic, or losing its
partition 0, stops the task and keeps the table; changing the topic's table settings
restarts it. Spark and the catalog client are shared by the coordinators and created
with the first one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from floe.config import BrokerConfig
from floe.config import broker as keys
from floe.config.tabletopic import TableTopicConfig, resolve_table_topic
from floe.errors import ConfigError
from floe.storage.interface import Store, TopicMeta
from floe.tabletopic import catalog as cat
from floe.tabletopic.coordinator import PEER_TIMEOUT_S, RetentionHolds, TableCoordinator
from floe.tabletopic.placement import Locate, TopicPartitions
from floe.tabletopic.rounds import TableTopics
from floe.tabletopic.routes import route_records
from floe.tabletopic.schemas import RawSchema
from floe.tabletopic.spark.fetch import FetchAccess
from floe.types import TopicName

if TYPE_CHECKING:
    from floe.registry.core.service import Registry
    from floe.tabletopic.spark import SparkManager

log = logging.getLogger("floe.tabletopic.coordinator")  # the name its lines always had

WATCH_INTERVAL_S = 1.0
STOP_WAIT_S = 30.0


def advertised_address(config: BrokerConfig) -> str:
    """``host:port`` that clients are told to connect to, as ``config`` sets it."""
    host = config[keys.ADVERTISED_HOST] or config[keys.HOST]
    return f"{host}:{config[keys.ADVERTISED_PORT] or config[keys.KAFKA_PORT]}"


@dataclass
class _Running:
    cfg: TableTopicConfig
    coordinator: TableCoordinator
    task: asyncio.Task[None]
    maintenance: asyncio.Task[None]


class TableTopicManager:
    """Watches the topics and runs one :class:`TableCoordinator` per table topic.

    Owned by the broker's event loop: :meth:`start` after the store is open (it sets
    the retention holds before returning, so maintenance never deletes what a table has
    not materialized), :meth:`stop` before it closes (stops every coordinator, then
    Spark if it started). Spark and the catalog client are created on the first table
    topic only. ``cluster_id`` identifies this Floe cluster in the tables it writes;
    ``bootstrap()`` is the ``host:port`` the Spark tasks fetch records from (default: the
    advertised Kafka address of ``config``; the composition root passes the bound one),
    and ``access`` how they get in on a secured listener (TLS pin, the internal user).
    ``locate`` (a cluster whose brokers share partitions) names the broker leading a
    partition: the coordinators read the partitions other brokers lead from them
    (:mod:`floe.tabletopic.placement`); ``here`` says which table topics this broker
    coordinates (None: every one); ``clustered``: it is a broker of a cluster (whose
    brokers must share one catalog).
    """

    def __init__(
        self,
        store: Store,
        config: BrokerConfig,
        spark_factory: Callable[[], SparkManager] | None = None,
        registry: Registry | None = None,
        *,
        cluster_id: str | None = None,
        bootstrap: Callable[[], str] | None = None,
        access: FetchAccess | None = None,
        locate: Locate | None = None,
        here: Callable[[TopicMeta], bool] | None = None,
        clustered: bool = False,
    ) -> None:
        self.store = store
        self._clustered = clustered
        self._locate = locate
        self._here = here
        self.config = config
        self._bootstrap = bootstrap or (lambda: advertised_address(config))
        self._access = access or FetchAccess()
        self.registry = registry
        self.cluster_id = cluster_id
        self._spark_factory = spark_factory
        self._tables: TableTopics | None = None
        self._running: dict[tuple[TopicName, str | None], _Running] = {}
        """By (topic, record type of a route table; None for a topic's one table)."""
        self._holds: dict[TopicName, RetentionHolds] = {}
        self._planners: dict[TopicName, tuple[TableTopicConfig, TableCoordinator]] = {}
        """The table topics another broker coordinates (see :meth:`readers`)."""
        self._watch: asyncio.Task[None] | None = None

    def elsewhere(self, meta: TopicMeta) -> bool:
        """Whether another broker coordinates table topic ``meta`` (in a cluster whose
        brokers share partitions: :mod:`floe.tabletopic.placement`)."""
        return self._here is not None and not self._here(meta)

    def partitions_of(self, topic: TopicName) -> TopicPartitions:
        """``topic``'s partitions as this broker reads them (here or from their leaders)."""
        return TopicPartitions(self.store, topic, self._locate, PEER_TIMEOUT_S)

    @property
    def coordinators(self) -> Mapping[TopicName, TableCoordinator]:
        """The coordinator of each table topic with one table (not route tables)."""
        return {t: r.coordinator for (t, route), r in self._running.items() if route is None}

    def route_coordinators(self, topic: TopicName) -> list[TableCoordinator]:
        """The coordinators of ``topic``'s route tables, by record type."""
        found = [(route, r.coordinator) for (t, route), r in self._running.items() if t == topic]
        return [c for route, c in sorted(found, key=lambda rc: rc[0] or "") if route is not None]

    def all_coordinators(self) -> list[TableCoordinator]:
        """Every coordinator: one per table."""
        return [r.coordinator for r in self._running.values()]

    def readers(self) -> list[TableCoordinator]:
        """A coordinator per table this broker can plan a fresh read of: those running
        here, and one that runs no rounds per table topic another broker coordinates."""
        return [*self.all_coordinators(), *(c for _, c in self._planners.values())]

    def routes_of(self, topic: TopicName) -> list[str]:
        """``topic``'s record types: the subjects ``<topic>-<record full name>`` whose
        latest schema is an Avro record of that name (read on the loop)."""
        if self.registry is None:
            return []
        latest: list[tuple[str, RawSchema | None]] = []
        for subject in self.registry.subjects(prefix=f"{topic}-"):
            try:
                versions = self.registry.versions(subject)
            except Exception:  # deleted meanwhile
                continue
            sv = versions[-1] if versions else None
            raw = None if sv is None else RawSchema(sv.schema_id, sv.schema_type, sv.schema)
            latest.append((subject, raw))
        return route_records(topic, latest)

    def tables(self) -> TableTopics:
        """The shared catalog + Spark side, created on first use (cheap: starts nothing)."""
        if self._tables is None:
            from floe.tabletopic.spark import SparkManager

            spark = (
                self._spark_factory()
                if self._spark_factory
                else SparkManager.from_config(self.config)
            )
            settings = cat.CatalogSettings.from_config(self.config)
            if self._clustered:  # at the first table topic, once
                cat.warn_if_not_shared(settings)
            self._tables = TableTopics(
                settings,
                spark,
                self._bootstrap,
                access=self._access,
            )
        return self._tables

    async def start(self) -> None:
        """Stop a Spark driver that a killed broker on this data dir left running (so
        no stale commit can land once a coordinator has read the table's offsets), give
        the rounds their dead-letter writer, set the retention holds of every table
        topic, then watch the topic configs."""
        from floe.tabletopic.spark.session import SparkSettings, reap_previous_driver

        await asyncio.to_thread(
            reap_previous_driver, SparkSettings.from_config(self.config).work_dir
        )
        from floe.tabletopic.deadletter import DeadLetters

        self.tables().dead_letters = DeadLetters(self.store, asyncio.get_running_loop())
        self.reconcile()
        self._watch = asyncio.create_task(self._watch_topics(), name="table-topics")

    async def _watch_topics(self) -> None:
        while True:
            await asyncio.sleep(WATCH_INTERVAL_S)
            try:
                self.reconcile()
            except Exception:
                log.exception("tabletopic.watch_failed")

    def reconcile(self) -> None:
        """Start, restart or stop coordinators to match the topics' configs (a
        restarted coordinator waits for its predecessor's round to end)."""
        broker = {keys.TABLE_TOPIC_NAMESPACE.name: self.config[keys.TABLE_TOPIC_NAMESPACE]}
        wanted: dict[tuple[TopicName, str | None], TableTopicConfig] = {}
        elsewhere: dict[TopicName, TableTopicConfig] = {}
        for name, meta in self.store.topics().items():
            if meta.internal:
                continue
            try:
                cfg = resolve_table_topic(meta.configs, broker)
            except ConfigError as exc:
                log.warning("tabletopic.bad_config topic=%s error=%s", name, exc)
                continue
            if not cfg.enable:
                continue
            if self.elsewhere(meta):
                elsewhere[name] = cfg
                continue
            if cfg.routes:  # one table per record type
                for record in self.routes_of(name):
                    wanted[(name, record)] = cfg
            else:
                wanted[(name, None)] = cfg
        previous: dict[tuple[TopicName, str | None], TableCoordinator] = {}
        for key, running in list(self._running.items()):
            if wanted.get(key) != running.cfg:
                running.task.cancel()
                running.maintenance.cancel()
                del self._running[key]
                previous[key] = running.coordinator
                if key not in wanted:
                    running.coordinator.release()
                log.info("tabletopic.stopped topic=%s (table kept)", running.coordinator.label)
        for key, cfg in wanted.items():
            if key not in self._running:
                name, route = key
                holds = self._holds.setdefault(name, RetentionHolds()) if route else None
                coordinator = TableCoordinator(
                    self.store,
                    name,
                    cfg,
                    self.tables,
                    self.registry,
                    cluster_id=self.cluster_id,
                    previous=previous.get(key),
                    route=route,
                    holds=holds,
                    locate=self._locate,
                )
                coordinator.hold()
                label = coordinator.label
                task = asyncio.create_task(coordinator.run(), name=f"table-topic:{label}")
                maintenance = asyncio.create_task(
                    coordinator.maintain_on_schedule(), name=f"table-maintenance:{label}"
                )
                self._running[key] = _Running(cfg, coordinator, task, maintenance)
        for name in [t for t in self._holds if not any(k[0] == t for k in self._running)]:
            del self._holds[name]
        self._planners = {
            name: self._planners[name]
            if name in self._planners and self._planners[name][0] == cfg
            else (cfg, self._planner(name, cfg))
            for name, cfg in elsewhere.items()
        }

    def _planner(self, name: TopicName, cfg: TableTopicConfig) -> TableCoordinator:
        """A coordinator of ``name`` that runs no rounds: it plans fresh reads."""
        return TableCoordinator(
            self.store, name, cfg, self.tables, self.registry,
            cluster_id=self.cluster_id, locate=self._locate,
        )  # fmt: skip

    async def stop(self) -> None:
        """Stop watching and every coordinator, then Spark; idempotent."""
        coordinators = [r.coordinator for r in self._running.values()]
        tasks = [t for r in self._running.values() for t in (r.task, r.maintenance)]
        if self._watch is not None:
            tasks.append(self._watch)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for coordinator in coordinators:  # rounds cut short end before Spark stops
            await coordinator.finished(timeout=STOP_WAIT_S)
        self._running.clear()
        self._watch = None
        if self._tables is not None:
            await self._tables.spark.stop()
