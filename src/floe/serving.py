"""What a broker serves once it writes, alone or as its cluster's writer (:class:`Writer`):
its coordinators (groups, transactions), users and ACLs, the Schema Registry, table
topics, the admin API and the Kafka listeners (:mod:`floe.listeners`), started in that
order and stopped in reverse. :mod:`floe.app`, the composition root, opens the store
first and hands it over.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import importlib
import logging
import os
import secrets
import socket
import ssl
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from floe import __version__
from floe.broker.core import SECURITY_TOPIC, Broker, now_ms
from floe.config import BrokerConfig
from floe.config import broker as keys
from floe.config.keys import ConfigKey
from floe.config.security import LISTENERS, listener_specs
from floe.coordination import table_placement, transaction_coordinator
from floe.coordinator.group import GroupCoordinator
from floe.errors import ConfigError
from floe.listeners import address, pipeline_access, pipeline_listener, start_listeners
from floe.security.sasl import PasswordCheck
from floe.security.users import PIPELINE_USER
from floe.server.kafka import KafkaServer
from floe.storage.local import LocalStore
from floe.tasks import unless_stopping
from floe.types import TopicName

if TYPE_CHECKING:
    from floe.cluster.membership import Membership
    from floe.observability.metrics import Metrics
    from floe.registry.api.server import RegistryServer
    from floe.registry.core.service import Registry
    from floe.security.acl import Authorizer
    from floe.security.acls import AclStore
    from floe.security.users import Users
    from floe.server.http import HttpServer
    from floe.storage.interface import Store, TopicMeta
    from floe.storage.object import ObjectStore
    from floe.storage.object.sharing import PartitionSharing
    from floe.tabletopic.holds import TableHolds
    from floe.tabletopic.manager import TableTopicManager
    from floe.tabletopic.placement import Locate

log = logging.getLogger("floe.app")


def cluster_id(data_dir: Path, configured: str) -> str:
    """The configured cluster id, else the one stored in the data dir (created once)."""
    if configured:
        return configured
    path = data_dir / "meta" / "cluster.id"
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    new = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(new)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return new


async def maintain_every(
    store: LocalStore | ObjectStore, interval_s: float, holds: TableHolds | None = None
) -> None:
    """Retention, rolling and compaction, every ``log.retention.check.interval.ms``; in a
    cluster whose brokers share partitions, after holding the partitions it leads of the
    table topics other brokers coordinate (``holds``)."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            if holds is not None:
                await holds.refresh()
                holds.apply()  # then at once, with no await between: every one is held
            await store.maintain(now_ms())
        except Exception:
            log.exception("maintenance.failed")


def _open_registry(store: Store) -> Registry:
    """The Schema Registry, replayed from ``_schemas`` (shared by its HTTP API and the
    table topics' schema modes)."""
    from floe.registry.core.service import TOPIC, Registry
    from floe.storage.journal import Journal

    registry = Registry(Journal(store, TOPIC))
    registry.open()
    return registry


async def _start_registry(
    registry: Registry,
    config: BrokerConfig,
    metrics: Metrics,
    passwords: PasswordCheck,
    authorizer: Authorizer | None,
) -> RegistryServer:
    """Start the Schema Registry's HTTP listener (its requests counted in ``metrics``,
    refused ones too; HTTPS with ``registry.ssl.enable``), with HTTP Basic checked by
    ``passwords`` when ``registry.authentication`` is ``basic`` and the subjects' topic
    ACLs checked by ``authorizer`` when there is one.

    Raises:
        OSError: the registry port cannot be bound.
        ConfigError: TLS settings that do not load.
    """
    from starlette.middleware import Middleware

    from floe.config import security as sec
    from floe.observability.metrics import HttpMetrics
    from floe.registry.api.app import RegistryApp
    from floe.registry.api.auth import RegistryAuth
    from floe.registry.api.server import RegistryServer

    middleware = [Middleware(HttpMetrics, metrics=metrics)]
    verify = passwords.check_async if config[sec.REGISTRY_AUTHENTICATION] == "basic" else None
    if verify is not None or authorizer is not None:
        middleware.append(Middleware(RegistryAuth, verify=verify, authorizer=authorizer))
    app = RegistryApp(registry, config[keys.REGISTRY_MAX_BODY_BYTES]).build(middleware)
    server = RegistryServer(
        app,
        config[keys.REGISTRY_HOST] or config[keys.HOST],
        config[keys.REGISTRY_PORT],
        http_tls(config, sec.REGISTRY_SSL_ENABLE),
    )
    await server.start()
    return server


def http_tls(config: BrokerConfig, switch: ConfigKey[bool]) -> ssl.SSLContext | None:
    """The server context of an HTTP port whose ``switch`` (``registry.ssl.enable``,
    ``admin.ssl.enable``) is on: the broker's certificate and key, no client
    certificates; None when it is off.

    Raises:
        ConfigError: the certificate or key is not set, or does not load.
    """
    from floe.config import security as sec
    from floe.security.tls import server_context

    if not config[switch]:
        return None
    cert, key = config[sec.SSL_CERTIFICATE_LOCATION], config[sec.SSL_KEY_LOCATION]
    if not cert or not key:
        raise ConfigError(
            f"{switch.name} needs {sec.SSL_CERTIFICATE_LOCATION.name} and "
            f"{sec.SSL_KEY_LOCATION.name}"
        )
    return server_context(cert, key, config[sec.SSL_KEY_PASSWORD] or None, None, "none")


async def _start_admin(
    broker: Broker, tables: TableTopicManager, registry: Registry | None
) -> HttpServer:
    """Start the admin HTTP API and the web console over the admin facade (HTTPS with
    ``admin.ssl.enable``).

    Raises:
        OSError: the admin port cannot be bound (the message names it).
        ConfigError: TLS settings that do not load.
    """
    from floe.admin import Admin, TableStatusService
    from floe.admin.api import build_app
    from floe.admin.history import History
    from floe.config.security import ADMIN_AUTHENTICATION, ADMIN_SSL_ENABLE
    from floe.console import install_console
    from floe.server.http import HttpServer

    config = broker.config
    admin = Admin(broker, TableStatusService(broker.store, config, tables), registry)
    admin.history = History(admin, config[keys.ADMIN_HISTORY_INTERVAL_MS] / 1000)
    app = build_app(admin)
    install_console(app, admin)
    host, port = config[keys.ADMIN_HOST] or config[keys.HOST], config[keys.ADMIN_PORT]
    if config[ADMIN_AUTHENTICATION] == "none" and not _loopback(host):
        log.warning(
            "admin.unauthenticated host=%s: anyone who reaches the admin API and console "
            "may change topics and run SQL; set admin.authentication = basic, or "
            "admin.host = 127.0.0.1 (docs/security.md)",
            host,
        )
    server = HttpServer(app, host, port, name="admin", tls=http_tls(config, ADMIN_SSL_ENABLE))
    try:
        await server.start()
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise OSError(exc.errno, f"cannot bind the admin API to {host}:{port}: {reason}") from exc
    server.background = admin.history
    admin.history.start()
    return server


def _loopback(host: str) -> bool:
    """Whether ``host`` (a bind address or name) is reachable from this machine only."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


WRITER_MODULES = (
    "floe.observability.metrics",
    "floe.registry.core.service",
    "floe.registry.api.app",
    "floe.registry.api.auth",
    "floe.registry.api.server",
    "floe.security.acl",
    "floe.security.acls",
    "floe.security.scram",
    "floe.storage.journal",
    "floe.storage.object",
    "floe.tabletopic.coordinator",
    "floe.tabletopic.manager",
    "floe.tabletopic.deadletter",
    "floe.tabletopic.validate",
    "floe.tabletopic.spark.readonly",
    "floe.admin",
    "floe.admin.api",
    "floe.admin.history",
    "floe.console",
    "floe.server.http",
    "floe.cluster.peers",
    "floe.storage.object.sharing",
    "pydantic.dataclasses",  # FastAPI's, at the first route
    "pydantic.v1",
    "uvicorn.lifespan.off",  # uvicorn's, at a server's start
    "uvicorn.protocols.http.auto",
    "uvicorn.protocols.websockets.auto",
)
"""What :meth:`Writer.start` imports on its way (FastAPI, the console, the registry's
API: most of a second on a loaded machine), loaded ahead by :func:`load_writer_modules`;
``tests/unit/test_writer_preload.py`` fails when the start imports anything more."""


def load_writer_modules() -> None:
    """Import :data:`WRITER_MODULES`: a broker waiting for the writer lease calls it in a
    worker thread, so that a failover does not spend its first second importing."""
    for name in WRITER_MODULES:
        importlib.import_module(name)


SECURITY_JOURNAL = TopicName(SECURITY_TOPIC)
"""The internal topic of the SCRAM users and the ACLs."""


async def _open_security(
    store: Store, config: BrokerConfig
) -> tuple[Users, AclStore | None, Authorizer | None]:
    """The SCRAM users and the ACLs replayed from :data:`SECURITY_JOURNAL`, with the
    bootstrap user (``security.bootstrap.user``) created if it has no credentials yet,
    and the authorizer when ``authorizer.enable`` is on (the bootstrap user is a super
    user).

    Raises:
        ConfigError: a bootstrap user without a password.
        StorageError: the journal cannot be read or written.
    """
    from floe.config import security as sec
    from floe.security.acl import Authorizer, parse_super_users
    from floe.security.acls import AclStore
    from floe.security.scram import MECHANISMS
    from floe.security.users import PIPELINE_USER, Users
    from floe.storage.journal import Journal

    users = Users(Journal(store, SECURITY_JOURNAL))
    users.load()
    acls = AclStore(Journal(store, SECURITY_JOURNAL))
    acls.load()
    name, password = config[sec.SECURITY_BOOTSTRAP_USER], config[sec.SECURITY_BOOTSTRAP_PASSWORD]
    if name:
        if not password:
            raise ConfigError(
                f"{sec.SECURITY_BOOTSTRAP_USER.name} is set but "
                f"{sec.SECURITY_BOOTSTRAP_PASSWORD.name} is empty"
            )
        if await users.ensure(name, password, sorted(MECHANISMS)):
            log.info("security.bootstrap_user.created user=%s", name)
    authorizer = None
    if config[sec.AUTHORIZER_ENABLE]:
        supers = parse_super_users(config[sec.SUPER_USERS]) | {f"User:{PIPELINE_USER}"}
        supers |= {f"User:{name}"} if name else set()
        authorizer = Authorizer(acls, supers, config[sec.ALLOW_EVERYONE_IF_NO_ACL_FOUND])
        log.info(
            "security.authorizer.started acls=%d super_users=%s allow_if_no_acl=%s",
            len(acls.bindings()), ",".join(sorted(supers)) or "-",
            config[sec.ALLOW_EVERYONE_IF_NO_ACL_FOUND],
        )  # fmt: skip
    # as Kafka without an authorizer: the ACL APIs answer SECURITY_DISABLED
    return users, (acls if authorizer is not None else None), authorizer


class Writer:
    """What a broker serves once it writes (alone, or as its cluster's writer): its
    coordinators, security, registry, table topics, admin API and Kafka listeners,
    started in that order by :meth:`start` and stopped by :meth:`stop` (whatever part
    of them started)."""

    def __init__(
        self,
        config: BrokerConfig,
        data_dir: Path,
        store: LocalStore | ObjectStore,
        membership: Membership | None,
    ) -> None:
        self.config = config
        self.data_dir = data_dir
        self.store = store
        self.membership = membership
        self.specs = listener_specs(config)
        self.broker: Broker | None = None
        self.servers: list[KafkaServer] = []
        self.maintenance: asyncio.Task[None] | None = None
        self.groups: GroupCoordinator | None = None
        self.registry: RegistryServer | None = None
        self.schemas: Registry | None = None
        self.tables: TableTopicManager | None = None
        self.admin: HttpServer | None = None
        self.sharing: PartitionSharing | None = None
        self.listening: socket.socket | None = None
        self.pipeline_password = secrets.token_urlsafe(32)
        """The table pipeline's internal user's, for this start only (in memory)."""

    async def start(
        self, kafka_port: int, stop: asyncio.Event, listening: socket.socket | None = None
    ) -> bool:
        """Start everything; False when ``stop`` came while this broker waited for the
        internal partitions (a live broker may own them still). ``listening``: the
        Kafka port's socket, kept listening since this broker stood by (its first
        listener serves it; :meth:`stop` closes it if the start ended before)."""
        self.listening = listening
        config, store, membership = self.config, self.store, self.membership
        cid = cluster_id(self.data_dir, config[keys.CLUSTER_ID])
        if not isinstance(store, LocalStore):  # the log's id, shared by its brokers
            cid = store.adopt_cluster_id(cid, config[keys.CLUSTER_ID])
        broker = self.broker = Broker(
            store=store,
            config=config,
            cluster_id=cid,
            advertised_host=config[keys.ADVERTISED_HOST] or config[keys.HOST],
            advertised_port=config[keys.ADVERTISED_PORT] or config[keys.KAFKA_PORT],
            membership=membership,
        )
        if membership is not None and not isinstance(store, LocalStore):
            store.on_durable(broker.watch.notify)  # reads wait for the bucket (durable_reads)
            if membership.share:
                from floe.cluster.reassignment import ManualMoves
                from floe.storage.object.sharing import PartitionSharing

                broker.moves = ManualMoves(config[keys.CLUSTER_REASSIGNMENT_HOLD_MS] / 1000)
                self.sharing = PartitionSharing(
                    store, membership, broker.node_id, membership.interval_s,
                    refusing=membership.refusing, held=broker.moves.held,
                )  # fmt: skip
                # the coordinators below read the internal partitions: a live broker may
                # own them still (a writer killed a moment ago stays registered a little
                # longer)
                if not await unless_stopping(self.sharing.lead_writer_partitions(), stop):
                    return False
        metrics = await self._start_coordinators(broker)
        await self._start_http(broker, metrics)
        await self._start_kafka(broker, kafka_port)
        assert self.tables is not None
        await self.tables.start()
        return True

    async def _start_coordinators(self, broker: Broker) -> Metrics:
        """Groups, transactions, users and ACLs, the registry (before Kafka: ready once
        the Kafka port is), and the metrics that report them."""
        from floe.observability.metrics import Metrics

        config, store = self.config, self.store
        leads = None  # every group and transactional id is here
        if self.sharing is not None:  # each broker coordinates those of the partitions it leads
            assert not isinstance(store, LocalStore)
            leads = store.leads
        groups = self.groups = broker.groups = GroupCoordinator(store, config, leads=leads)
        groups.start()
        metrics = Metrics(broker, groups)
        broker.transactions = transaction_coordinator(broker, store, controller=True, leads=leads)
        await broker.transactions.start()
        users, broker.acls, broker.authorizer = await _open_security(store, config)
        broker.users = users
        users.set_internal(PIPELINE_USER, self.pipeline_password)
        broker.passwords = PasswordCheck(users)
        if config[keys.REGISTRY_ENABLE]:
            self.schemas = _open_registry(store)
            self.registry = await _start_registry(
                self.schemas, config, metrics, broker.passwords, broker.authorizer
            )
        from floe.tabletopic.validate import checker

        broker.check_table_configs = checker(self.schemas)  # settings vs the columns
        return metrics

    async def _start_http(self, broker: Broker, metrics: Metrics) -> None:
        """The table-topic manager (cheap: it watches topic configs; Spark starts only
        when a topic is a table topic; its coordinators start after Kafka) and the admin
        API with ``/metrics`` (before Kafka too, like the registry)."""
        from floe.tabletopic.manager import TableTopicManager

        config = self.config
        pipeline = pipeline_listener(self.specs, broker.authorizer is not None)
        here, locate = self._placement(broker) or (None, None)
        self.tables = TableTopicManager(
            self.store,
            config,
            registry=self.schemas,
            cluster_id=broker.cluster_id,
            # Spark tasks fetch from the bound, advertised listener
            bootstrap=lambda: address(broker.me(pipeline.name)),
            access=pipeline_access(config, pipeline, self.pipeline_password),
            locate=locate,
            here=here,
            clustered=self.membership is not None,
        )
        log.info(
            "tabletopic.pipeline_listener listener=%s protocol=%s",
            pipeline.name, pipeline.protocol,
        )  # fmt: skip
        metrics.watch_tables(self.tables)
        if config[keys.ADMIN_ENABLE]:
            self.admin = await _start_admin(broker, self.tables, self.schemas)
            metrics.mount(self.admin.app)

    def _placement(self, broker: Broker) -> tuple[Callable[[TopicMeta], bool], Locate] | None:
        """Which table topics this broker coordinates and where their coordinators read
        a partition (None: every one, every partition here)."""
        if self.sharing is None:
            return None
        store = self.store
        assert not isinstance(store, LocalStore)
        return table_placement(broker, store.leads, writer=True)

    async def _start_kafka(self, broker: Broker, kafka_port: int) -> None:
        """The Kafka listeners, then the store's background work."""
        config, store, membership = self.config, self.store, self.membership
        listening, self.listening = self.listening, None
        if not config[LISTENERS]:  # a cluster member may have bound its port already
            self.specs = [dataclasses.replace(self.specs[0], port=kafka_port)]
        elif listening is not None:  # a kept port is the one plaintext listener's
            listening.close()
            listening = None
        self.servers = await start_listeners(broker, self.specs, listening)
        if membership is not None and membership.me.port != broker.advertised_port:
            membership.update_address(broker.advertised_host, broker.advertised_port)
        store.start_background_flush()
        if self.sharing is not None:
            self.sharing.start()
        holds = None
        if (placement := self._placement(broker)) is not None:
            from floe.tabletopic.holds import TableHolds

            assert not isinstance(store, LocalStore)
            holds = TableHolds(store, config, store.leads, placement[0], store.stored_cluster_id)
        self.maintenance = asyncio.create_task(
            maintain_every(store, config[keys.LOG_RETENTION_CHECK_INTERVAL_MS] / 1000, holds),
            name="maintenance",
        )

    def announce(self) -> None:
        """``floe.started`` in the log, and where everything is on stdout."""
        assert self.broker is not None
        broker, host = self.broker, self.config[keys.HOST]
        log.info(
            "floe.started version=%s kafka=%s:%d data_dir=%s cluster_id=%s",
            __version__, host, self.servers[0].port, self.data_dir, broker.cluster_id,
        )  # fmt: skip
        print(f"Floe {__version__} is up", flush=True)
        for spec, srv in zip(self.specs, self.servers, strict=True):
            told = broker.me(spec.name)
            one = spec.protocol == "PLAINTEXT" and len(self.specs) == 1
            name = "" if one else f"{spec.name} "
            print(
                f"  Kafka:    {name}{spec.host}:{srv.port} (advertised as {told.host}:{told.port})",
                flush=True,
            )
        if self.registry is not None:
            print(f"  Registry: {self.registry.url}", flush=True)
        if self.admin is not None:
            print(f"  Admin:    {self.admin.url}", flush=True)
        print(f"  Data dir: {self.data_dir}", flush=True)

    async def stop(self) -> None:
        """Stop what started, in reverse, and close the store (its last upload)."""
        if self.listening is not None:
            self.listening.close()
            self.listening = None
        if self.maintenance is not None:
            self.maintenance.cancel()
        if self.sharing is not None:
            await self.sharing.stop()
        if self.admin is not None:  # first: it reads the table-topic coordinators and the store
            await self.admin.stop()
        if self.tables is not None:  # before the store closes: rounds read partition logs
            try:
                await self.tables.stop()
            except Exception:
                log.exception("tabletopic.stop_failed")
        if self.registry is not None:
            await self.registry.stop()
        if self.groups is not None:  # first: waiting JoinGroup/SyncGroup calls end now
            await self.groups.stop()
        for srv in self.servers:
            await srv.stop()
        if self.broker is not None and self.broker.transactions is not None:
            await self.broker.transactions.stop()
        self.store.close()
