"""The composition root: the only module that wires every part of Floe together.

``run(config)`` opens the store, starts the Kafka listener and the maintenance task,
serves until SIGINT/SIGTERM, then shuts everything down in reverse order.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import logging
import os
import secrets
import signal
import socket
import ssl
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from floe import __version__
from floe.broker.core import SECURITY_TOPIC, Broker, now_ms
from floe.config import BrokerConfig
from floe.config import broker as keys
from floe.config.keys import ConfigKey
from floe.config.security import LISTENERS, ListenerSpec, listener_specs
from floe.coordinator.group import GroupCoordinator
from floe.coordinator.txn.coordinator import TransactionCoordinator
from floe.errors import ConfigError
from floe.security.sasl import PasswordCheck
from floe.security.users import PIPELINE_USER
from floe.server.kafka import KafkaServer
from floe.storage.local import LocalStore
from floe.storage.local.limits import raise_open_files_limit
from floe.tabletopic.spark.fetch import FetchAccess
from floe.tasks import cancel_and_wait
from floe.types import TopicName

if TYPE_CHECKING:
    from floe.admin.cluster import Role
    from floe.cluster.interface import BrokerInfo
    from floe.cluster.membership import Membership
    from floe.observability.metrics import Metrics
    from floe.registry.api.server import RegistryServer
    from floe.registry.core.service import Registry
    from floe.security.acl import Authorizer
    from floe.security.acls import AclStore
    from floe.security.users import Users
    from floe.server.http import HttpServer
    from floe.storage.interface import Store
    from floe.storage.object import ObjectStore
    from floe.storage.object.sharing import PartitionSharing
    from floe.storage.object.standby import StandbyStore
    from floe.tabletopic.coordinator import TableTopicManager

log = logging.getLogger("floe.app")

EXIT_GRACE_S = 10.0  # once stopped, the process exits within this (see exit_within)


def configure_logging(level: str, fmt: str = "text") -> None:
    """Log to stderr, as text lines or JSON objects (``log.format``): Floe's loggers at
    ``level``'s first item, the families it names at theirs, every other library at
    :data:`~floe.config.broker.THIRD_PARTY_LOG_LEVEL` (``log.level``).

    Raises:
        ConfigError: a ``level`` that does not parse.
    """
    floe, families = keys.log_levels(level)
    logging.basicConfig(
        level=keys.THIRD_PARTY_LOG_LEVEL,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    logging.getLogger("floe").setLevel(floe)
    for name, family_level in families.items():
        logging.getLogger(name).setLevel(family_level)
    if fmt == "json":
        from floe.observability.logs import JsonFormatter

        for handler in logging.getLogger().handlers:
            handler.setFormatter(JsonFormatter())
        logging.captureWarnings(True)  # warnings are log lines too, not raw stderr


def exit_within(grace_s: float, code: int = 0) -> None:
    """Once Floe has stopped (its store closed, its lease released: nothing left to
    lose), make sure the process exits within ``grace_s``: a worker thread still
    running then (a catalog or Spark call that never returns) would otherwise hold it
    forever, since Python waits for such threads at exit. Each one is logged with its
    stack (``floe.exit_forced``) and abandoned, and the process exits with ``code``."""

    def watch() -> None:
        time.sleep(grace_s)
        frames = sys._current_frames()
        stuck = [
            t
            for t in threading.enumerate()
            if not t.daemon and t is not threading.main_thread() and t.ident in frames
        ]
        for thread in stuck:
            stack = "".join(traceback.format_stack(frames[thread.ident]))  # type: ignore[index]
            log.error(
                "floe.exit_forced thread=%s after_s=%.0f stack:\n%s", thread.name, grace_s, stack
            )
        logging.shutdown()
        os._exit(code)

    threading.Thread(target=watch, name="floe-exit-watch", daemon=True).start()


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


def open_store(
    data_dir: Path, config: BrokerConfig, membership: Membership | None = None
) -> LocalStore | ObjectStore:
    """The storage engine of ``storage.type``: segment files under ``data_dir``, or an
    S3-compatible bucket with ``data_dir`` as its cache (its partitions owned through
    ``membership`` in a cluster).

    Raises:
        StorageError: the data cannot be opened (the bucket cannot be read).
        BucketConfigError: ``storage.type = s3`` without a bucket.
        FloeError: the cluster refused this broker its partitions.
    """
    if config[keys.STORAGE_TYPE] == "s3":
        from floe.storage.object import ObjectStore

        return ObjectStore(data_dir, config, guard=membership)
    return LocalStore(data_dir, config)


def open_membership(config: BrokerConfig) -> Membership | None:
    """This broker's membership of the cluster at ``cluster.metadata.url`` (not joined
    yet: the store joins before it writes), or None without a cluster.

    Raises:
        ConfigError: a cluster without ``storage.type = s3``, or a bad URL.
        MetadataUnavailableError: the metadata store cannot be reached.
    """
    url = config[keys.CLUSTER_METADATA_URL]
    if not url:
        return None
    if config[keys.STORAGE_TYPE] != "s3":
        raise ConfigError(
            "cluster.metadata.url needs storage.type = s3: brokers share the log in a bucket"
        )
    if config[LISTENERS]:
        raise ConfigError(
            "cluster.metadata.url does not take listeners yet: a cluster's brokers listen on "
            "host:kafka.port, PLAINTEXT (docs/security.md)"
        )
    from floe.cluster.interface import BrokerInfo
    from floe.cluster.membership import Membership
    from floe.cluster.url import open_metadata_store, redacted

    timeout_s = config[keys.CLUSTER_SESSION_TIMEOUT_MS] / 1000
    store = open_metadata_store(url, config[keys.CLUSTER_METADATA_NAMESPACE], timeout_s / 3)
    me = BrokerInfo(
        config[keys.NODE_ID],
        config[keys.ADVERTISED_HOST] or config[keys.HOST],
        config[keys.ADVERTISED_PORT] or config[keys.KAFKA_PORT],
    )
    return Membership(
        store, me, timeout_s, redacted(url), share=config[keys.CLUSTER_SHARE_PARTITIONS]
    )


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


async def _start_standby(
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

    store = StandbyStore(Bucket.from_config(config), config)
    # answer once every broker lists this one, and name the writer from the first answer
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
    await server.start()
    store.start_background_flush()
    log.info("standby.listening kafka=%s:%d", config[keys.HOST], port)
    return server, store, await _start_member_admin(broker, "standby")


class _Member:
    """A cluster member that shares partitions, waiting for the writer lease: it leads
    the partitions the writer assigned it on its own object store and Kafka listener
    (``floe.storage.object.sharing``), and points clients at the writer for the rest."""

    def __init__(
        self,
        server: KafkaServer,
        store: ObjectStore,
        sharing: PartitionSharing,
        maintenance: asyncio.Task[None],
        admin: HttpServer | None,
    ) -> None:
        self.server = server
        self.store = store
        self.sharing = sharing
        self.maintenance = maintenance
        self.admin = admin

    @classmethod
    async def start(cls, data_dir: Path, config: BrokerConfig, membership: Membership) -> _Member:
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

        # a member never claims the writer's partitions, at open (the topics the bucket
        # holds now) or later (the topics it mirrors)
        bucket = Bucket.from_config(config)
        known = await asyncio.to_thread(read_topics, bucket) or {}
        membership.writer_only = lambda t: (m := known.get(t)) is not None and stays_with_writer(m)
        store = await asyncio.to_thread(
            ObjectStore, data_dir, config, bucket=bucket, guard=membership, member=True
        )
        sharing = PartitionSharing(store, membership, config[keys.NODE_ID], membership.interval_s)
        membership.writer_only = sharing.writer_only
        try:
            await sharing.refreshed()  # the writer's topics as they are now
            await asyncio.sleep(membership.listed_in())  # every broker lists this one
            cid = await asyncio.to_thread(store.stored_cluster_id)
            broker = _waiting_broker(store, config, membership, cid, sharing.refreshed)
            store.on_durable(broker.watch.notify)
            server = KafkaServer(
                broker, config[keys.HOST], config[keys.KAFKA_PORT],
                config[keys.SOCKET_REQUEST_MAX_BYTES],
            )  # fmt: skip
            await server.start()
        except BaseException:
            store.close()
            raise
        if not config[keys.ADVERTISED_PORT]:
            broker.advertised_port = server.port
            if membership.me.port != server.port:
                membership.update_address(broker.advertised_host, server.port)
        store.start_background_flush()
        sharing.start()
        maintenance = asyncio.create_task(
            _maintenance(store, config[keys.LOG_RETENTION_CHECK_INTERVAL_MS] / 1000),
            name="maintenance",
        )
        log.info("member.listening kafka=%s:%d", config[keys.HOST], server.port)
        admin = await _start_member_admin(broker, "member")
        return cls(server, store, sharing, maintenance, admin)

    async def until_writer(
        self, membership: Membership, stop: asyncio.Event, fenced: asyncio.Event
    ) -> bool:
        """Lead this broker's partitions until it holds the writer lease (True), or
        until ``stop`` or ``fenced`` (False: the caller leaves the cluster).

        Raises:
            FloeError: the metadata store failed while it waited.
        """
        writer = asyncio.ensure_future(asyncio.to_thread(membership.acquire))
        if not await _first(writer, stop, fenced):  # leaving ends the wait for the lease
            writer.add_done_callback(lambda f: f.cancelled() or f.exception())
            log.info("member.stopping reason=%s", "fenced" if fenced.is_set() else "signal")
            return False
        writer.result()
        return True

    async def stop(self) -> None:
        """Stop serving and close the store (its last records go to the bucket): the
        writer's store opens the same cache next."""
        self.maintenance.cancel()
        if self.admin is not None:  # the writer's admin API takes its port next
            await self.admin.stop()
        await self.sharing.stop()
        await self.server.stop(grace_s=1.0)
        self.store.close()


async def _first(work: asyncio.Future[Any], *events: asyncio.Event) -> bool:
    """Wait until ``work`` is done (True) or one of ``events`` is set first (False;
    ``work`` is left to its owner)."""
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait({work, *waits}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()
    return work.done()


async def _start_member_admin(broker: Broker, role: Role) -> HttpServer | None:
    """The admin API of a broker that is not the writer (``floe.admin.cluster``)."""
    from floe.admin.cluster import start_member_admin
    from floe.config.security import ADMIN_SSL_ENABLE

    return await start_member_admin(broker, role, _http_tls(broker.config, ADMIN_SSL_ENABLE))


async def _unless_stopping(work: Coroutine[Any, Any, None], stop: asyncio.Event) -> bool:
    """Await ``work`` unless ``stop`` comes first (False: ``work`` cancelled)."""
    done = asyncio.create_task(work)
    try:
        finished = await _first(done, stop)
    finally:
        await cancel_and_wait(done)  # raises what ``work`` raised
    return finished


async def _open_unless_stopping(
    data_dir: Path, config: BrokerConfig, membership: Membership, stop: asyncio.Event
) -> LocalStore | ObjectStore | None:
    """The store, opened once this broker holds the writer lease (a standby waits for
    it in a worker thread), or None after ``stop`` or when this broker was fenced
    meanwhile: the broker then left the cluster, which ends the wait. A metadata store
    that does not answer while the store opens (restarting, a network cut) is waited
    out: the open is tried again every renewal interval.

    Raises:
        StorageError, FloeError: see :func:`open_store`.
    """
    from floe.cluster.interface import MetadataUnavailableError

    while True:
        opening = asyncio.ensure_future(asyncio.to_thread(open_store, data_dir, config, membership))
        if not await _first(opening, stop):
            break
        try:
            return opening.result()
        except MetadataUnavailableError as exc:
            if membership.fenced is not None:
                break
            log.warning(
                "cluster.open_retry broker=%d error=%s (the metadata store did not "
                "answer while the store opened: trying again)",
                membership.me.broker_id, exc,
            )  # fmt: skip
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), membership.interval_s)
        if stop.is_set():
            break
    log.info("standby.stopping reason=%s", "signal" if stop.is_set() else "fenced")
    await asyncio.to_thread(membership.leave)  # ends the wait for the lease
    if opening.done():
        return None
    try:
        store = await opening
    except Exception:  # the wait ended by leaving
        return None
    store.close()  # it got the lease just as it stopped
    return None


async def _maintenance(store: LocalStore | ObjectStore, interval_s: float) -> None:
    """Retention, rolling and compaction, every ``log.retention.check.interval.ms``."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await store.maintain(now_ms())
        except Exception:
            log.exception("maintenance.failed")


def _transactions(broker: Broker) -> TransactionCoordinator:
    """The transaction coordinator, completing consumer groups through
    ``broker.groups`` (the group coordinator) when transactions carry offsets."""

    async def complete_group(group: str, producer_id: int, epoch: int, commit: bool) -> None:
        groups = getattr(broker, "groups", None)
        if groups is None:
            raise RuntimeError("no group coordinator to complete a transaction's offsets")
        await groups.complete_transaction(group, producer_id, epoch, commit)

    config = broker.config
    remote_markers = None
    membership = broker.membership
    if membership is not None and membership.share:
        from floe.cluster.peers import marker_writer

        timeout_s = config[keys.CLUSTER_SESSION_TIMEOUT_MS] / 1000
        remote_markers = marker_writer(membership, timeout_s)
    return TransactionCoordinator(
        broker.store,
        remote_markers=remote_markers,
        coordinator_epoch=membership.writer_epoch if membership else lambda: 0,
        check=membership.check if membership else lambda: None,
        complete_group=complete_group,
        notify=broker.watch.notify,
        max_timeout_ms=config[keys.TRANSACTION_MAX_TIMEOUT_MS],
        abort_check_interval_ms=config[keys.TRANSACTION_ABORT_CHECK_INTERVAL_MS],
        id_expiration_ms=config[keys.TRANSACTIONAL_ID_EXPIRATION_MS],
    )


def _open_registry(store: Store) -> Registry:
    """The Schema Registry, replayed from ``_schemas`` (shared by its HTTP API and the
    table topics' schema modes)."""
    from floe.registry.core.service import Registry
    from floe.storage.journal import Journal

    registry = Registry(Journal(store, TopicName("_schemas")))
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
        _http_tls(config, sec.REGISTRY_SSL_ENABLE),
    )
    await server.start()
    return server


def _http_tls(config: BrokerConfig, switch: ConfigKey[bool]) -> ssl.SSLContext | None:
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
    server = HttpServer(app, host, port, name="admin", tls=_http_tls(config, ADMIN_SSL_ENABLE))
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


def _address(b: BrokerInfo) -> str:
    return f"[{b.host}]:{b.port}" if ":" in b.host else f"{b.host}:{b.port}"


def _pipeline_listener(specs: list[ListenerSpec], authorizing: bool) -> ListenerSpec:
    """The listener the table topics' Spark tasks fetch from. With an authorizer, a SASL
    one first (they authenticate as the broker's internal user, a super user: no ACL to
    grant); else a PLAINTEXT one first (nothing to negotiate). An SSL listener comes last:
    the tasks present no client certificate."""
    order = (
        ("SASL_PLAINTEXT", "SASL_SSL", "PLAINTEXT", "SSL")
        if authorizing
        else ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL", "SSL")
    )
    return min(specs, key=lambda spec: order.index(spec.protocol))


def _pipeline_access(config: BrokerConfig, spec: ListenerSpec, password: str) -> FetchAccess:
    """How the Spark tasks get in on ``spec``: TLS pinned to the broker's certificate,
    SASL as :data:`~floe.security.users.PIPELINE_USER` with ``password`` and the
    strongest enabled mechanism.

    Raises:
        ConfigError: the certificate file cannot be read.
    """
    from floe.config import security as sec

    pin = ""
    if spec.tls:
        path = config[sec.SSL_CERTIFICATE_LOCATION]
        try:
            pin = Path(path).read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read ssl.certificate.location {path}: {exc}") from None
        if config[sec.SSL_CLIENT_AUTH] == "required" and not spec.sasl:
            log.error(
                "security.pipeline_listener listener=%s: table-topic rounds cannot fetch "
                "over an SSL listener that requires client certificates; add a SASL or "
                "PLAINTEXT listener",
                spec.name,
            )
    if not spec.sasl:
        return FetchAccess(tls_pin=pin)
    enabled = {m.strip() for m in config[sec.SASL_ENABLED_MECHANISMS].split(",")}
    mechanism = next(m for m in ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN") if m in enabled)
    return FetchAccess(pin, mechanism, PIPELINE_USER, password)


async def _start_listeners(broker: Broker, specs: list[ListenerSpec]) -> list[KafkaServer]:
    """Bind one Kafka server per listener, in order, and record each one's advertised
    address on the broker (the first's as ``advertised_host``/``advertised_port``).

    Raises:
        ConfigError: TLS settings that do not load.
        OSError: a listener's address cannot be bound (the message names it).
    """
    from floe.config import security as sec
    from floe.security.tls import PrincipalMapper, server_context

    config = broker.config
    contexts: dict[str, ssl.SSLContext] = {}
    for protocol in sorted({spec.protocol for spec in specs if spec.tls}):
        if not config[sec.SSL_CERTIFICATE_LOCATION] or not config[sec.SSL_KEY_LOCATION]:
            raise ConfigError(
                f"an SSL or SASL_SSL listener needs {sec.SSL_CERTIFICATE_LOCATION.name} and "
                f"{sec.SSL_KEY_LOCATION.name}"
            )
        # as Kafka (KIP-684): client certificates are for SSL listeners; a SASL_SSL
        # client authenticates with SASL
        client_auth = config[sec.SSL_CLIENT_AUTH] if protocol == "SSL" else "none"
        contexts[protocol] = server_context(
            config[sec.SSL_CERTIFICATE_LOCATION],
            config[sec.SSL_KEY_LOCATION],
            config[sec.SSL_KEY_PASSWORD] or None,
            config[sec.SSL_CA_LOCATION] or None,
            client_auth,
        )
    mapper = PrincipalMapper(config[sec.SSL_PRINCIPAL_MAPPING_RULES])
    servers: list[KafkaServer] = []
    try:
        for spec in specs:
            server = KafkaServer(
                broker, spec.host, spec.port, config[keys.SOCKET_REQUEST_MAX_BYTES],
                listener=spec, tls=contexts.get(spec.protocol), mapper=mapper,
            )  # fmt: skip
            await server.start()
            servers.append(server)
            host = spec.advertised_host
            if host in ("", "0.0.0.0", "::"):
                host = socket.getfqdn()
            broker.addresses[spec.name] = (host, spec.advertised_port or server.port)
            log.info(
                "kafka.listening listener=%s protocol=%s bind=%s:%d advertised=%s:%d",
                spec.name, spec.protocol, spec.host, server.port, *broker.addresses[spec.name],
            )  # fmt: skip
    except BaseException:
        for server in servers:
            await server.stop(grace_s=0)
        raise
    broker.advertised_host, broker.advertised_port = broker.addresses[specs[0].name]
    return servers


async def serve(config: BrokerConfig, stop: asyncio.Event) -> bool:
    """Run Floe until ``stop`` is set (SIGINT/SIGTERM: set at any moment, in the middle
    of the start-up too, it stops the broker cleanly once the step in hand ends) or
    until the task is cancelled. True: this broker was fenced out of its cluster and
    stopped, to rejoin it through a clean open (the caller serves again)."""
    data_dir = Path(config[keys.DATA_DIR]).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    raise_open_files_limit()  # before the store sizes its fd cache from the limit
    membership = open_membership(config)
    fenced = asyncio.Event()
    if membership is not None:
        loop = asyncio.get_running_loop()

        def on_fenced() -> None:  # on the membership's thread
            loop.call_soon_threadsafe(fenced.set)

        membership.on_fenced = on_fenced
    standby = member = None
    kafka_port = config[keys.KAFKA_PORT]
    try:
        if membership is not None and membership.share:
            member = await _Member.start(data_dir, config, membership)
            kafka_port = member.server.port  # the address registered for this broker
            if not await member.until_writer(membership, stop, fenced):
                await member.stop()
                membership.leave()
                log.info("floe.stopped")
                return fenced.is_set()
            await member.stop()
            member = None
        elif membership is not None:
            standby = await _start_standby(config, membership)
        if membership is None:
            store = open_store(data_dir, config)
        else:  # waits for the writer lease; the standby listener answers Metadata meanwhile
            opened = await _open_unless_stopping(data_dir, config, membership, stop)
            if opened is None:
                log.info("floe.stopped")
                return fenced.is_set()
            store = opened
    except BaseException:
        if member is not None:
            await member.stop()
        if membership is not None:
            membership.leave()
        raise
    finally:
        if standby is not None:
            server, standby_store, standby_admin = standby
            if standby_admin is not None:
                await standby_admin.stop()
            await server.stop(grace_s=1.0)
            standby_store.close()
    specs = listener_specs(config)
    host = config[keys.HOST]
    servers: list[KafkaServer] = []
    maintenance: asyncio.Task[None] | None = None
    groups: GroupCoordinator | None = None
    broker: Broker | None = None
    registry: RegistryServer | None = None
    schema_registry: Registry | None = None
    tables: TableTopicManager | None = None
    admin: HttpServer | None = None
    sharing: PartitionSharing | None = None
    try:
        cid = cluster_id(data_dir, config[keys.CLUSTER_ID])
        if not isinstance(store, LocalStore):  # the log's id, shared by its brokers
            cid = store.adopt_cluster_id(cid, config[keys.CLUSTER_ID])
        broker = Broker(
            store=store,
            config=config,
            cluster_id=cid,
            advertised_host=config[keys.ADVERTISED_HOST] or host,
            advertised_port=config[keys.ADVERTISED_PORT] or config[keys.KAFKA_PORT],
            membership=membership,
        )
        if membership is not None and not isinstance(store, LocalStore):
            store.on_durable(broker.watch.notify)  # reads wait for the bucket (durable_reads)
        if membership is not None and membership.share and not isinstance(store, LocalStore):
            from floe.storage.object.sharing import PartitionSharing

            sharing = PartitionSharing(store, membership, broker.node_id, membership.interval_s)
            # the coordinators below read the internal partitions: a live broker may own
            # them still (a writer killed a moment ago stays registered a little longer)
            if not await _unless_stopping(sharing.lead_writer_partitions(), stop):
                return False
        groups = broker.groups = GroupCoordinator(store, config)
        groups.start()
        from floe.observability.metrics import Metrics

        metrics = Metrics(broker, groups)
        broker.transactions = _transactions(broker)
        await broker.transactions.start()
        broker.users, broker.acls, broker.authorizer = await _open_security(store, config)
        pipeline_password = secrets.token_urlsafe(32)  # this start's, in memory only
        broker.users.set_internal(PIPELINE_USER, pipeline_password)
        broker.passwords = PasswordCheck(broker.users)
        if config[keys.REGISTRY_ENABLE]:  # before Kafka: ready once the Kafka port is
            schema_registry = _open_registry(store)
            registry = await _start_registry(
                schema_registry, config, metrics, broker.passwords, broker.authorizer
            )
        from floe.tabletopic.validate import checker

        broker.check_table_configs = checker(schema_registry)  # settings vs the columns
        # cheap: watches topic configs; Spark starts only when a topic is a table topic
        from floe.tabletopic.coordinator import TableTopicManager

        # started after Kafka, below
        advertised = broker  # Spark tasks fetch from the bound, advertised listener
        pipeline = _pipeline_listener(specs, broker.authorizer is not None)
        tables = TableTopicManager(
            store,
            config,
            registry=schema_registry,
            cluster_id=broker.cluster_id,
            bootstrap=lambda: _address(advertised.me(pipeline.name)),
            access=_pipeline_access(config, pipeline, pipeline_password),
        )
        log.info(
            "tabletopic.pipeline_listener listener=%s protocol=%s",
            pipeline.name, pipeline.protocol,
        )  # fmt: skip
        metrics.watch_tables(tables)
        if config[keys.ADMIN_ENABLE]:  # before Kafka too, like the registry
            admin = await _start_admin(broker, tables, schema_registry)
        if admin is not None:  # GET /metrics on the admin port, before Kafka listens
            metrics.mount(admin.app)
        if not config[LISTENERS]:  # a cluster member may have bound its port already
            specs = [dataclasses.replace(specs[0], port=kafka_port)]
        servers = await _start_listeners(broker, specs)
        server = servers[0]
        if membership is not None and membership.me.port != broker.advertised_port:
            membership.update_address(broker.advertised_host, broker.advertised_port)
        store.start_background_flush()
        if sharing is not None:
            sharing.start()
        maintenance = asyncio.create_task(
            _maintenance(store, config[keys.LOG_RETENTION_CHECK_INTERVAL_MS] / 1000),
            name="maintenance",
        )
        await tables.start()
        log.info(
            "floe.started version=%s kafka=%s:%d data_dir=%s cluster_id=%s",
            __version__,
            host,
            server.port,
            data_dir,
            broker.cluster_id,
        )
        print(f"Floe {__version__} is up", flush=True)
        for spec, srv in zip(specs, servers, strict=True):
            told = broker.me(spec.name)
            name = "" if spec.protocol == "PLAINTEXT" and len(specs) == 1 else f"{spec.name} "
            print(
                f"  Kafka:    {name}{spec.host}:{srv.port} (advertised as {told.host}:{told.port})",
                flush=True,
            )
        if registry is not None:
            print(f"  Registry: {registry.url}", flush=True)
        if admin is not None:
            print(f"  Admin:    {admin.url}", flush=True)
        print(f"  Data dir: {data_dir}", flush=True)
        await _first(asyncio.ensure_future(stop.wait()), fenced)
        log.info("floe.stopping reason=%s", "fenced" if fenced.is_set() else "signal")
    finally:
        if maintenance is not None:
            maintenance.cancel()
        if sharing is not None:
            await sharing.stop()
        if admin is not None:  # first: it reads the table-topic coordinators and the store
            await admin.stop()
        if tables is not None:  # before the store closes: rounds read partition logs
            try:
                await tables.stop()
            except Exception:
                log.exception("tabletopic.stop_failed")
        if registry is not None:
            await registry.stop()
        if groups is not None:  # first: waiting JoinGroup/SyncGroup calls end now
            await groups.stop()
        for srv in servers:
            await srv.stop()
        if broker is not None and broker.transactions is not None:
            await broker.transactions.stop()
        store.close()
        if membership is not None:  # after the store's last upload, which needs the lease
            membership.leave()
        log.info("floe.stopped")
    return fenced.is_set() and not stop.is_set()


async def _serve_then_exit(config: BrokerConfig) -> None:
    """Serve (again after each fencing) until SIGINT/SIGTERM, handled from here to the
    exit: a signal never finds its default action (death by the signal) in place."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    failed = True
    try:
        while await serve(config, stop):  # fenced: rejoin the cluster through a clean open
            log.warning("cluster.rejoining node=%d", config[keys.NODE_ID])
        failed = False
    finally:  # stopped or failed: asyncio's own shutdown waits for worker threads
        exit_within(EXIT_GRACE_S, code=1 if failed else 0)


def run(config: BrokerConfig) -> None:
    configure_logging(config[keys.LOG_LEVEL], config[keys.LOG_FORMAT])
    try:
        import uvloop

        uvloop.run(_serve_then_exit(config))
    except ImportError:  # uvloop has no wheels on some platforms
        asyncio.run(_serve_then_exit(config))
