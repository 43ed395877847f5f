"""The composition root: the only module that wires every part of Floe together.

``run(config)`` opens the store (in a cluster: once this broker holds the writer lease,
leading partitions of its own as a member or answering Metadata as a standby until then,
:mod:`floe.waiting`),
starts what a writing broker serves (:class:`floe.serving.Writer`), serves until
SIGINT/SIGTERM, then shuts everything down in reverse order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from floe.config import BrokerConfig
from floe.config import broker as keys
from floe.config.security import LISTENERS
from floe.errors import ConfigError
from floe.serving import Writer, load_writer_modules
from floe.storage.local import LocalStore
from floe.storage.local.limits import raise_open_files_limit
from floe.tasks import first
from floe.waiting import Member, start_standby, stop_standby, wait_for_writer_lease

if TYPE_CHECKING:
    from floe.cluster.membership import Membership
    from floe.storage.object import ObjectStore
    from floe.storage.object.state import WalIndexes

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


def open_store(
    data_dir: Path,
    config: BrokerConfig,
    membership: Membership | None = None,
    known_wal: Callable[[], WalIndexes] | None = None,
) -> LocalStore | ObjectStore:
    """The storage engine of ``storage.type``: segment files under ``data_dir``, or an
    S3-compatible bucket with ``data_dir`` as its cache (its partitions owned through
    ``membership`` in a cluster; ``known_wal``: the WAL indexes a standby followed).

    Raises:
        StorageError: the data cannot be opened (the bucket cannot be read).
        BucketConfigError: ``storage.type = s3`` without a bucket.
        FloeError: the cluster refused this broker its partitions.
    """
    if config[keys.STORAGE_TYPE] == "s3":
        from floe.storage.object import ObjectStore

        return ObjectStore(data_dir, config, guard=membership, known_wal=known_wal)
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


async def _open_unless_stopping(
    data_dir: Path,
    config: BrokerConfig,
    membership: Membership,
    stop: asyncio.Event,
    known_wal: Callable[[], WalIndexes] | None,
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
        opening = asyncio.ensure_future(
            asyncio.to_thread(open_store, data_dir, config, membership, known_wal)
        )
        if not await first(opening, stop):
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
    try:  # its outcome taken, whatever it was (asyncio logs one never taken as an ERROR)
        store = await opening
    except Exception:  # the wait ended by leaving, or the open failed (retried no more)
        return None
    store.close()  # it got the lease just as it stopped
    return None


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
    async with _watching_peers(config, membership):
        store, kafka_port, listening = await _store_once_writer(
            data_dir, config, membership, stop, fenced
        )
        if store is None:
            log.info("floe.stopped")
            return fenced.is_set()
        writer = Writer(config, data_dir, store, membership)
        try:
            if not await writer.start(kafka_port, stop, listening):
                return False
            writer.announce()
            await first(asyncio.ensure_future(stop.wait()), fenced)
            log.info("floe.stopping reason=%s", "fenced" if fenced.is_set() else "signal")
        finally:
            await writer.stop()
            if membership is not None:  # after the store's last upload, which needs the lease
                membership.leave()
            log.info("floe.stopped")
    return fenced.is_set() and not stop.is_set()


@contextlib.asynccontextmanager
async def _watching_peers(
    config: BrokerConfig, membership: Membership | None
) -> AsyncIterator[None]:
    """In a cluster, which other brokers refuse connections (:mod:`floe.cluster.reach`),
    watched for as long as this broker serves in any role."""
    if membership is None:
        yield
        return
    from floe.cluster.reach import Reach, recycle_s

    idle_ms = config[keys.CONNECTIONS_MAX_IDLE_MS]
    reach = Reach(
        membership.me.broker_id,
        lambda: membership.view.brokers,
        recycle_after_s=recycle_s(
            None if idle_ms < 0 else idle_ms / 1000,
            config[keys.SOCKET_REQUEST_READ_TIMEOUT_MS] / 1000,
        ),
        mark_for_s=2 * membership.session_timeout_s,  # its lapse, seen: up to ~1.5x
    )
    membership.refusing = reach.refusing
    task = asyncio.create_task(reach.run(), name="floe-reach")
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _store_once_writer(
    data_dir: Path,
    config: BrokerConfig,
    membership: Membership | None,
    stop: asyncio.Event,
    fenced: asyncio.Event,
) -> tuple[LocalStore | ObjectStore | None, int, socket.socket | None]:
    """The store this broker writes, opened once it may: at once alone; in a cluster once
    it holds the writer lease, leading its own partitions as a member or answering
    Metadata as a standby meanwhile. With it, the Kafka port registered for this broker
    and, in a cluster, that port's socket, kept listening from the standby or member
    to the writer (clients that connect meanwhile wait, never refused). None once
    ``stop`` or ``fenced`` came first: the broker left the cluster then.

    Raises:
        StorageError, FloeError, OSError: see :func:`open_store` and the listeners.
    """
    kafka_port = config[keys.KAFKA_PORT]
    if membership is None:
        return open_store(data_dir, config), kafka_port, None
    standby = member = preload = store = None
    listening: socket.socket | None = None
    known_wal: Callable[[], WalIndexes] | None = None  # the indexes followed meanwhile
    try:
        if membership.share:
            member = await Member.start(data_dir, config, membership)
            kafka_port = member.server.port  # the address registered for this broker
            preload = asyncio.ensure_future(asyncio.to_thread(load_writer_modules))
            if not await wait_for_writer_lease(membership, stop, fenced):
                await member.stop()
                membership.leave()
                return None, kafka_port, None
            listening = await member.stop(keep_listening=True)
            followed = member.store.wal_indexes
            known_wal, member = (lambda: followed), None
        else:
            standby = await start_standby(config, membership)
            preload = asyncio.ensure_future(asyncio.to_thread(load_writer_modules))
            if standby is not None:  # None: no port to answer on yet, so no standby store
                following = standby[1]
                known_wal = lambda: following.wal_indexes  # noqa: E731 - read once the lease is held
        # waits for the writer lease; the standby listener answers Metadata meanwhile
        store = await _open_unless_stopping(data_dir, config, membership, stop, known_wal)
    except BaseException:
        if member is not None:
            await member.stop()
        membership.leave()
        raise
    finally:
        if preload is not None:  # the writer's start needs it done; a failure shows there
            await asyncio.wait([preload])
            preload.exception()
        if standby is not None:
            listening = await stop_standby(*standby, keep_listening=store is not None)
        if store is None and listening is not None:
            listening.close()
    return store, kafka_port, listening


async def _serve_then_exit(config: BrokerConfig) -> None:
    """Serve (again after each fencing) until SIGINT/SIGTERM, handled from here to the
    exit: a signal never finds its default action (death by the signal) in place."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    failed = True
    try:
        await _serve_until_stopped(config, stop)
        failed = False
    finally:  # stopped or failed: asyncio's own shutdown waits for worker threads
        exit_within(EXIT_GRACE_S, code=1 if failed else 0)


async def _serve_until_stopped(config: BrokerConfig, stop: asyncio.Event) -> None:
    """Serve until ``stop``; in a cluster, serve again after each fencing (a clean
    open) and after each fault that passes (:func:`passes`: the metadata store or the
    bucket out of reach, this broker fenced while it opened), waiting longer after each
    failed try, up to the session timeout, as Kafka's brokers wait for their
    controller: a broker that exited there needed a supervisor to come back.

    Raises:
        Exception: a failure that does not pass (a bad configuration, a port in use,
            a corrupt object), or any failure of a broker without a cluster.
    """
    clustered = bool(config[keys.CLUSTER_METADATA_URL])
    session_s = config[keys.CLUSTER_SESSION_TIMEOUT_MS] / 1000
    delay_s, tries = 0.0, 0
    while not stop.is_set():
        try:
            if not await serve(config, stop):
                return
            log.warning("cluster.rejoining node=%d", config[keys.NODE_ID])
            delay_s, tries = 0.0, 0
            continue
        except Exception as exc:
            if not (clustered and passes(exc)):
                raise
            tries += 1
            delay_s = min(session_s, max(session_s / 3, 2 * delay_s))
            log.warning(
                "cluster.start_retry node=%d try=%d error=%s (left the cluster; joining "
                "again in %.1f s)",
                config[keys.NODE_ID], tries, exc, delay_s,
            )  # fmt: skip
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay_s)


def passes(exc: Exception) -> bool:
    """Whether a cluster broker's failure is one that passes by itself, so that it
    joins again rather than exits: the metadata store or the bucket did not answer
    (a StorageError other than a corrupt object; a bucket request that failed on the
    network or with a server error, obstore's GenericError), this broker was fenced
    meanwhile, or its node.id is still registered after a session timeout (its own
    former run's registration kept alive a while by a metadata store that restarted;
    a KRaft broker retries its registration likewise). A bucket that refuses the
    credentials does not pass."""
    from obstore.exceptions import GenericError

    from floe.cluster.interface import (
        BrokerIdTakenError,
        LeaseLostError,
        MetadataUnavailableError,
    )
    from floe.storage.interface import StorageError
    from floe.storage.object.layout import CorruptObjectError

    if isinstance(exc, CorruptObjectError):
        return False
    return isinstance(
        exc,
        (MetadataUnavailableError, LeaseLostError, BrokerIdTakenError, StorageError, GenericError),
    )


def run(config: BrokerConfig) -> None:
    configure_logging(config[keys.LOG_LEVEL], config[keys.LOG_FORMAT])
    try:
        import uvloop

        uvloop.run(_serve_then_exit(config))
    except ImportError:  # uvloop has no wheels on some platforms
        asyncio.run(_serve_then_exit(config))
