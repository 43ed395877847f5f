"""A cluster broker before it holds the writer lease: a standby answering Metadata on
its Kafka port and pointing clients at the writer (:func:`start_standby`), or a member
leading the partitions the writer assigned it (:class:`Member`), each with its small
admin API; and the wait for the lease (:func:`wait_for_writer_lease`). When the lease
comes, :mod:`floe.app` stops them (keeping the Kafka port's socket listening for the
writer) and opens the writer's store.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from floe.broker.core import Broker
from floe.config import BrokerConfig
from floe.config import broker as keys
from floe.coordination import table_placement, transaction_coordinator
from floe.coordinator.group import GroupCoordinator
from floe.coordinator.txn.coordinator import TransactionCoordinator
from floe.listeners import address
from floe.server.kafka import KafkaServer, listen
from floe.serving import http_tls, maintain_every
from floe.tasks import cancel_and_wait, first, retrieve

if TYPE_CHECKING:
    from floe.admin.cluster import Role
    from floe.cluster.membership import Membership
    from floe.server.http import HttpServer
    from floe.storage.interface import Store, TopicMeta
    from floe.storage.object import ObjectStore
    from floe.storage.object.sharing import PartitionSharing
    from floe.storage.object.standby import StandbyStore
    from floe.tabletopic.manager import TableTopicManager
    from floe.tabletopic.placement import Locate

log = logging.getLogger("floe.app")  # standby.listening, member.listening: the name they had


def _waiting_broker(
    store: Store,
    config: BrokerConfig,
    membership: Membership,
    cluster_id: str | None,
    refresh_topics: Callable[[], Awaitable[None]],
) -> Broker:
    """The Kafka side of a cluster member waiting for the writer lease (a standby, or a
    member leading partitions of its own): it names the writer for everything else."""
    return Broker(
        store=store,
        config=config,
        cluster_id=cluster_id or config[keys.CLUSTER_ID] or "",
        advertised_host=membership.me.host,
        advertised_port=membership.me.port,
        membership=membership,
        refresh_topics=refresh_topics,
        standby=True,
    )


async def start_standby(
    config: BrokerConfig, membership: Membership
) -> tuple[KafkaServer, StandbyStore, HttpServer | None] | None:
    """While this cluster member waits for the writer lease, answer Metadata on its Kafka
    port (the writer as every leader, every live broker), so that clients which know
    only this broker still find the writer (``floe.storage.object.standby``), and serve
    its small admin API (:func:`floe.admin.cluster.member_app`). None when the Kafka
    port is picked at start (0): there is no address to answer on yet.

    Raises:
        OSError: the Kafka port cannot be bound.
        MetadataUnavailableError: the metadata store cannot be read.
    """
    port = config[keys.KAFKA_PORT]
    if not port:
        return None
    from floe.storage.object.bucket import Bucket
    from floe.storage.object.standby import StandbyStore

    await asyncio.to_thread(_load_member_admin, config)  # before its registration's clock
    store = StandbyStore(Bucket.from_config(config), config)
    # connections wait in the backlog from the registration on: every broker lists this
    # one from then; it answers once every broker does, naming the writer from the first
    listening = listen(config[keys.HOST], port)
    try:
        await asyncio.sleep(await asyncio.to_thread(membership.announce))
        await asyncio.to_thread(membership.look)
        try:
            await asyncio.to_thread(store.refresh)
            cid = await asyncio.to_thread(store.cluster_id)
        except Exception as exc:  # the store's own open reports an unreadable bucket
            log.warning("standby.bucket_unreadable error=%s", exc)
            cid = None
        broker = _waiting_broker(store, config, membership, cid, store.refreshed)
        server = KafkaServer(broker, config[keys.HOST], port, config[keys.SOCKET_REQUEST_MAX_BYTES])
        await server.start(listening)
    except BaseException:
        listening.close()
        raise
    store.start_background_flush()
    log.info("standby.listening kafka=%s:%d", config[keys.HOST], port)
    return server, store, await _start_member_admin(broker, "standby")


class Member:
    """A cluster member that shares partitions, waiting for the writer lease
    (:func:`wait_for_writer_lease`): it leads the partitions the writer assigned it on
    its own object store and Kafka listener (``floe.storage.object.sharing``),
    coordinates the groups and the transactional ids of the ``__consumer_offsets`` and
    ``__transaction_state`` partitions among them, runs the table topics whose partition 0
    it leads (:class:`MemberTables`), holds the other table topics' partitions among them
    for their tables (``floe.tabletopic.holds``), and points clients at the writer for
    the rest."""

    def __init__(
        self,
        server: KafkaServer,
        store: ObjectStore,
        sharing: PartitionSharing,
        *,
        groups: GroupCoordinator,
        transactions: TransactionCoordinator,
        maintenance: asyncio.Task[None],
        admin: HttpServer | None,
        tables: MemberTables,
    ) -> None:
        self.server = server
        self.store = store
        self.sharing = sharing
        self.groups = groups
        self.transactions = transactions
        self.maintenance = maintenance
        self.admin = admin
        self.tables = tables

    @classmethod
    async def start(cls, data_dir: Path, config: BrokerConfig, membership: Membership) -> Member:
        """Join the cluster, open this broker's own partitions and listen.

        Raises:
            StorageError: the bucket cannot be read.
            OSError: the Kafka port cannot be bound.
            FloeError: the metadata store refused this broker.
        """
        from floe.storage.object import ObjectStore
        from floe.storage.object.bucket import Bucket
        from floe.storage.object.sharing import PartitionSharing, read_topics
        from floe.storage.object.store import stays_with_writer

        await asyncio.to_thread(_load_member_admin, config)
        # a member never claims the writer's partitions, at open (the topics the bucket
        # holds now) or later (the topics it mirrors)
        bucket = Bucket.from_config(config)
        known = await asyncio.to_thread(read_topics, bucket) or {}
        membership.writer_only = lambda t: (m := known.get(t)) is not None and stays_with_writer(m)
        # connections wait in the backlog from the registration (the store's open) on:
        # every broker lists this one from then, and it answers only once it is open
        listening = listen(config[keys.HOST], config[keys.KAFKA_PORT])
        try:
            store = await asyncio.to_thread(
                ObjectStore, data_dir, config, bucket=bucket, guard=membership, member=True
            )
        except BaseException:
            listening.close()
            raise
        sharing = PartitionSharing(
            store, membership, config[keys.NODE_ID], membership.interval_s,
            refusing=membership.refusing,
        )  # fmt: skip
        membership.writer_only = sharing.writer_only
        try:
            await sharing.refreshed()  # the writer's topics as they are now
            await asyncio.sleep(membership.listed_in())  # every broker lists this one
            cid = await asyncio.to_thread(store.stored_cluster_id)
            broker = _waiting_broker(store, config, membership, cid, sharing.refreshed)
            store.on_durable(broker.watch.notify)
            groups = broker.groups = GroupCoordinator(
                store, config, leads=store.leads, controller=False
            )
            groups.start()
            transactions = broker.transactions = transaction_coordinator(
                broker, store, controller=False, leads=store.leads
            )
            await transactions.start()
            server = KafkaServer(
                broker, config[keys.HOST], config[keys.KAFKA_PORT],
                config[keys.SOCKET_REQUEST_MAX_BYTES],
            )  # fmt: skip
            await server.start(listening)
        except BaseException:
            listening.close()
            store.close()
            raise
        if not config[keys.ADVERTISED_PORT]:
            broker.advertised_port = server.port
            if membership.me.port != server.port:
                membership.update_address(broker.advertised_host, server.port)
        store.start_background_flush()
        sharing.start()
        from floe.tabletopic.holds import TableHolds

        here, locate = table_placement(broker, store.leads, writer=False)
        maintenance = asyncio.create_task(
            maintain_every(
                store,
                config[keys.LOG_RETENTION_CHECK_INTERVAL_MS] / 1000,
                TableHolds(store, config, store.leads, here, store.stored_cluster_id),
            ),
            name="maintenance",
        )
        log.info("member.listening kafka=%s:%d", config[keys.HOST], server.port)
        tables = MemberTables(broker, store, cid, here, locate)
        admin = await _start_member_admin(broker, "member", tables.manager)
        tables.start()
        return cls(
            server, store, sharing, groups=groups, transactions=transactions,
            maintenance=maintenance, admin=admin, tables=tables,
        )  # fmt: skip

    async def stop(self, *, keep_listening: bool = False) -> socket.socket | None:
        """Stop serving and close the store (its last records go to the bucket): the
        writer's store opens the same cache next. With ``keep_listening`` the Kafka
        socket is kept and returned (see :meth:`KafkaServer.stop`)."""
        self.maintenance.cancel()
        if self.admin is not None:  # the writer's admin API takes its port next
            await self.admin.stop()
        await self.tables.stop()  # its rounds end before the store closes
        await self.groups.stop()  # first: waiting JoinGroup/SyncGroup calls end now
        await self.transactions.stop()
        await self.sharing.stop()
        listening = await self.server.stop(grace_s=1.0, keep_listening=keep_listening)
        self.store.close()
        return listening


class MemberTables:
    """A member's table topics: the coordinators of those whose partition 0 it leads
    (:func:`~floe.tabletopic.placement.coordinates_here`), with a read-only copy of the
    writer's Schema Registry followed from ``_schemas``
    (:class:`~floe.cluster.follow.TopicFollower`) for their schema modes. The
    coordinators start once that copy has caught up with the writer's once (a round
    planned on an older copy would miss schemas). Spark starts with the first one."""

    def __init__(
        self,
        broker: Broker,
        store: ObjectStore,
        cluster_id: str | None,
        here: Callable[[TopicMeta], bool],
        locate: Locate,
    ) -> None:
        from floe.cluster.follow import TopicFollower
        from floe.registry.core.service import TOPIC, Registry
        from floe.tabletopic.manager import TableTopicManager

        self.registry = Registry.follower()
        self.follower = TopicFollower(
            TOPIC, broker.writer, self.registry.follow, self.registry.reset
        )
        self.manager = TableTopicManager(
            store,
            broker.config,
            registry=self.registry,
            cluster_id=cluster_id,
            bootstrap=lambda: address(broker.me()),  # where its own partitions are read
            locate=locate,
            here=here,
            clustered=True,
        )
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self.follower.run(), name="registry-follower"),
            asyncio.create_task(self._start_manager(), name="member-tables"),
        ]

    async def _start_manager(self) -> None:
        await self.follower.caught_up.wait()
        await self.manager.start()

    async def stop(self) -> None:
        """Stop following and every coordinator, then Spark."""
        for task in self._tasks:
            await cancel_and_wait(task)
        await self.manager.stop()


async def wait_for_writer_lease(
    membership: Membership, stop: asyncio.Event, fenced: asyncio.Event
) -> bool:
    """Wait until this broker holds the writer lease (True), or until ``stop`` or
    ``fenced`` (False: the caller leaves the cluster).

    Raises:
        FloeError: the metadata store failed while it waited.
    """
    writer = asyncio.ensure_future(asyncio.to_thread(membership.acquire))
    # the wait may end with "this broker was fenced" before ``fenced`` is set (the
    # membership tells the loop last, after its calls to the store): fenced all the same
    if not await first(writer, stop, fenced) or membership.fenced is not None:
        writer.add_done_callback(retrieve)
        log.info("member.stopping reason=%s", "signal" if stop.is_set() else "fenced")
        return False
    writer.result()
    return True


def _load_member_admin(config: BrokerConfig) -> None:
    """Import what :func:`_start_member_admin` needs (Starlette, uvicorn, the metrics:
    seconds on a loaded machine), in a worker thread before the broker registers: on
    the event loop the import blocked a standby's Kafka answers, and outlasted its
    registration, which it renews only once it waits for the writer lease."""
    if config[keys.ADMIN_ENABLE]:
        import floe.admin.cluster
        import floe.observability.metrics
        import floe.server.http  # noqa: F401


async def _start_member_admin(
    broker: Broker, role: Role, tables: TableTopicManager | None = None
) -> HttpServer | None:
    """Serve the admin API of a broker that is not the writer
    (:func:`floe.admin.cluster.member_app`, and ``/metrics``, with the table topics a
    member coordinates, ``tables``) on the admin port, until
    the broker becomes the writer, whose admin API takes the port. None when the admin
    API is off, when it asks for authentication (only the writer knows the users, for
    now), or when the port is taken (logged: the broker serves Kafka all the same)."""
    from floe.admin.cluster import member_app
    from floe.config.security import ADMIN_AUTHENTICATION, ADMIN_SSL_ENABLE
    from floe.observability.metrics import Metrics
    from floe.server.http import HttpServer

    config = broker.config
    if not config[keys.ADMIN_ENABLE]:
        return None
    host, port = config[keys.ADMIN_HOST] or config[keys.HOST], config[keys.ADMIN_PORT]
    if config[ADMIN_AUTHENTICATION] != "none":
        log.info(
            "admin.writer_only role=%s (admin.authentication = %s: only the writer checks "
            "passwords, so only the writer serves the admin API and /metrics)",
            role, config[ADMIN_AUTHENTICATION],
        )  # fmt: skip
        return None
    app = member_app(broker, role)
    metrics = Metrics(broker, broker.groups)
    if tables is not None:  # the table topics it coordinates
        metrics.watch_tables(tables)
    metrics.mount(app)
    server = HttpServer(app, host, port, "admin", http_tls(config, ADMIN_SSL_ENABLE))
    try:
        await server.start()
    except OSError as exc:
        log.warning(
            "admin.unavailable role=%s bind=%s:%d error=%s (served again once this broker "
            "is the writer)",
            role, host, port, exc.strerror or exc,
        )  # fmt: skip
        return None
    return server


async def stop_standby(
    server: KafkaServer, store: StandbyStore, admin: HttpServer | None, *, keep_listening: bool
) -> socket.socket | None:
    """Stop a standby's listeners together (the writer's take their ports next), then
    close its store; with ``keep_listening`` its Kafka socket is kept and returned."""
    admin_stopped = asyncio.gather(*([admin.stop()] if admin else []))
    try:
        return await server.stop(grace_s=1.0, keep_listening=keep_listening)
    finally:
        await admin_stopped
        store.close()
