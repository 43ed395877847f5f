"""The local-disk :class:`~floe.storage.interface.Store`: every topic of one broker.

Layout under the data directory::

    meta/topics.json                              topic metadata (atomic replace)
    logs/<topic>-<partition>/<20-digit base>.log  segments, with .index/.timeindex
    logs/<topic>-<partition>/log-start-offset     DeleteRecords checkpoint
    logs/recovery-point-offset-checkpoint         offsets known fsynced
    logs/.clean-shutdown                          present only between close and open

Invariant: ``topics.json`` is the truth about which topics exist. A partition
directory that no topic owns (a crash during create or delete) is removed on open,
and deletion renames directories to ``*.deleted`` after the metadata no longer lists
the topic, so a deleted topic never comes back.
"""

from __future__ import annotations

import logging
import shutil
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from floe.config.broker import (
    LOG_FLUSH_INTERVAL_MS,
    LOG_FLUSH_POLICY,
    PRODUCER_ID_EXPIRATION_MS,
)
from floe.config.loader import BrokerConfig
from floe.config.topic import ResolvedTopicConfig
from floe.storage.interface import (
    InvalidPartitionsError,
    PartitionLog,
    Store,
    TopicExistsError,
    TopicMeta,
    UnknownTopicOrPartitionError,
)
from floe.storage.local.compaction import compact
from floe.storage.local.flush import GroupCommitter, flush_now
from floe.storage.local.log import LocalPartitionLog
from floe.storage.local.meta import (
    atomic_write,
    fsync_dir,
    load_topics,
    read_offsets,
    save_topics,
    validate_partitions,
    validate_topic_name,
    write_offsets,
)
from floe.storage.local.recovery import open_log
from floe.storage.local.retention import apply_retention
from floe.types import PartitionId, TopicName

log = logging.getLogger(__name__)

RECOVERY_CHECKPOINT = "recovery-point-offset-checkpoint"
CLEAN_SHUTDOWN = ".clean-shutdown"
DELETED_SUFFIX = ".deleted"


def _dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


class LocalStore:
    """Segmented logs on the local file system, with durable topic metadata.

    Owned by the broker's event loop. The constructor recovers everything on disk
    (see :mod:`floe.storage.local.recovery`); :meth:`close` fsyncs and closes every
    file and leaves a clean-shutdown marker. With ``log.flush.policy=interval`` (and
    for idle partitions under ``acks``) call :meth:`start_background_flush` from the
    running loop once; ``close`` stops it.

    Raises:
        StorageError: a segment cannot be read or repaired while opening.
    """

    def __init__(self, data_dir: Path, config: BrokerConfig) -> None:
        self._data_dir = Path(data_dir)
        self._logs_dir = self._data_dir / "logs"
        self._meta_path = self._data_dir / "meta" / "topics.json"
        self._logs_dir.mkdir(parents=True, exist_ok=True)
        self._meta_path.parent.mkdir(parents=True, exist_ok=True)
        self._broker = config.explicit()
        self._interval_policy = config[LOG_FLUSH_POLICY] == "interval"
        self._flush_interval_ms = config[LOG_FLUSH_INTERVAL_MS]
        self._producer_expiry_ms = config[PRODUCER_ID_EXPIRATION_MS]
        self._committer = GroupCommitter()
        self._closed = False
        self._topics = load_topics(self._meta_path)
        self._by_id = {t.topic_id: t for t in self._topics.values()}
        self._logs: dict[tuple[TopicName, int], LocalPartitionLog] = {}
        marker = self._logs_dir / CLEAN_SHUTDOWN
        clean = marker.exists()
        self._remove_orphans()
        recovery_points = read_offsets(self._logs_dir / RECOVERY_CHECKPOINT)
        for meta in self._topics.values():
            resolved = self.topic_config(meta.name)
            for p in range(meta.partitions):
                name = _dir_name(meta.name, p)
                self._logs[(meta.name, p)] = open_log(
                    meta.name, PartitionId(p), self._logs_dir / name, resolved,
                    clean=clean, recovery_point=recovery_points.get(name, 0),
                )  # fmt: skip
        self._write_recovery_checkpoint()
        marker.unlink(missing_ok=True)
        fsync_dir(self._logs_dir)
        log.info(
            "store.opened data_dir=%s topics=%d partitions=%d clean=%s",
            self._data_dir, len(self._topics), len(self._logs), clean,
        )  # fmt: skip

    def _remove_orphans(self) -> None:
        owned = {_dir_name(t.name, p) for t in self._topics.values() for p in range(t.partitions)}
        for path in self._logs_dir.iterdir():
            if path.is_dir() and path.name not in owned:
                log.warning("store.orphan_removed path=%s", path)
                shutil.rmtree(path)

    def _write_recovery_checkpoint(self) -> None:
        write_offsets(
            self._logs_dir / RECOVERY_CHECKPOINT,
            {_dir_name(t, p): lg.recovery_point for (t, p), lg in self._logs.items()},
        )

    # -- metrics ---------------------------------------------------------------------

    @property
    def fsync_rounds(self) -> int:
        """Group-commit fsync rounds run so far (a metric)."""
        return self._committer.rounds

    # -- topics ----------------------------------------------------------------------

    def topics(self) -> Mapping[TopicName, TopicMeta]:
        return dict(self._topics)

    def topic(self, name: TopicName) -> TopicMeta | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMeta | None:
        return self._by_id.get(topic_id)

    def _meta(self, name: TopicName) -> TopicMeta:
        meta = self._topics.get(name)
        if meta is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        return meta

    def _save(self, meta: TopicMeta | None, *, remove: TopicName | None = None) -> None:
        topics = dict(self._topics)
        if remove is not None:
            del topics[remove]
        if meta is not None:
            topics[meta.name] = meta
        save_topics(self._meta_path, topics)
        self._topics = topics
        self._by_id = {t.topic_id: t for t in topics.values()}

    def _open_partitions(self, meta: TopicMeta, start: int) -> None:
        resolved = self.topic_config(meta.name)
        for p in range(start, meta.partitions):
            directory = self._logs_dir / _dir_name(meta.name, p)
            self._logs[(meta.name, p)] = open_log(
                meta.name, PartitionId(p), directory, resolved, clean=True,
                recovery_point=0,
            )  # fmt: skip
        fsync_dir(self._logs_dir)

    def create_topic(
        self,
        name: TopicName,
        partitions: int,
        configs: Mapping[str, str],
        *,
        internal: bool = False,
    ) -> TopicMeta:
        """Record the topic durably, then create its partition directories.

        Raises:
            InvalidTopicError: an illegal name.
            InvalidPartitionsError: a partition count outside 1..10000.
            TopicExistsError: the name is taken.
        """
        validate_topic_name(name)
        validate_partitions(partitions)
        if name in self._topics:
            raise TopicExistsError(f"topic {name!r} already exists")
        meta = TopicMeta(
            name, uuid.uuid4(), partitions, dict(configs), internal, int(time.time() * 1000)
        )
        self._save(meta)
        self._open_partitions(meta, 0)
        log.info("store.topic.created topic=%s partitions=%d", name, partitions)
        return meta

    def delete_topic(self, name: TopicName) -> None:
        """Forget the topic durably, then rename its directories to ``*.deleted`` and
        remove them.

        Raises:
            UnknownTopicOrPartitionError: no such topic.
        """
        meta = self._meta(name)
        self._save(None, remove=name)
        doomed: list[Path] = []
        for p in range(meta.partitions):
            plog = self._logs.pop((name, p))
            plog.close()
            target = plog.directory.with_name(plog.directory.name + DELETED_SUFFIX)
            plog.directory.rename(target)
            doomed.append(target)
        fsync_dir(self._logs_dir)
        for path in doomed:
            shutil.rmtree(path)
        log.info("store.topic.deleted topic=%s partitions=%d", name, meta.partitions)

    def create_partitions(self, name: TopicName, total: int) -> TopicMeta:
        """Raises:
        UnknownTopicOrPartitionError: no such topic.
        InvalidPartitionsError: ``total`` not above the current count, or above 10000.
        """
        meta = self._meta(name)
        if total <= meta.partitions:
            raise InvalidPartitionsError(
                f"topic {name!r} has {meta.partitions} partitions; {total} is not more"
            )
        validate_partitions(total)
        grown = TopicMeta(
            meta.name, meta.topic_id, total, meta.configs, meta.internal, meta.created_ms
        )
        self._save(grown)
        self._open_partitions(grown, meta.partitions)
        return grown

    def set_topic_configs(self, name: TopicName, configs: Mapping[str, str]) -> TopicMeta:
        """Raises: UnknownTopicOrPartitionError: no such topic."""
        meta = self._meta(name)
        updated = TopicMeta(
            meta.name, meta.topic_id, meta.partitions, dict(configs), meta.internal,
            meta.created_ms,
        )  # fmt: skip
        self._save(updated)
        resolved = self.topic_config(name)
        for p in range(meta.partitions):
            self._logs[(name, p)].set_config(resolved)
        return updated

    def partition(self, name: TopicName, partition: PartitionId) -> LocalPartitionLog:
        """Raises: UnknownTopicOrPartitionError: no such topic or partition."""
        plog = self._logs.get((name, partition))
        if plog is None:
            raise UnknownTopicOrPartitionError(f"unknown partition {name}-{partition}")
        return plog

    def topic_config(self, name: TopicName) -> ResolvedTopicConfig:
        """Raises: UnknownTopicOrPartitionError: no such topic."""
        return ResolvedTopicConfig(self._meta(name).configs, self._broker)

    # -- durability and maintenance ----------------------------------------------------

    async def wait_durable(self, logs: Iterable[PartitionLog]) -> None:
        """Group commit (see :mod:`floe.storage.local.flush`); immediate under the
        ``interval`` flush policy.

        Raises:
            StorageError: the fsync failed.
        """
        if not self._interval_policy:
            await self.sync(logs)

    async def sync(self, logs: Iterable[PartitionLog]) -> None:
        """Fsync ``logs`` now whatever the flush policy, in a group-commit round shared
        with concurrent waiters.

        Raises:
            StorageError: the fsync failed.
        """
        await self._committer.sync(lg for lg in logs if isinstance(lg, LocalPartitionLog))

    def start_background_flush(self) -> None:
        """Start fsyncing dirty logs every ``log.flush.interval.ms`` (call from the
        running event loop; :meth:`close` stops it)."""
        self._committer.start_background(
            self._flush_interval_ms, lambda: [lg for lg in self._logs.values() if lg.dirty]
        )

    def run_maintenance(self, now_ms: int) -> None:
        """Roll aged segments, forget producers idle past
        ``producer.id.expiration.ms``, apply retention (which also refreshes
        ``held_bytes``) and compaction, checkpoint recovery points. A failing partition
        is logged and skipped."""
        for plog in list(self._logs.values()):
            try:
                plog.maybe_roll(now_ms)
                plog.expire_producers(now_ms, self._producer_expiry_ms)
                apply_retention(plog, now_ms)
                if plog.config.compact:
                    compact(plog, now_ms)
            except Exception:
                log.exception(
                    "store.maintenance.failed topic=%s partition=%d",
                    plog.topic, plog.partition,
                )  # fmt: skip
        self._write_recovery_checkpoint()

    def log_dir(self) -> str:
        return str(self._logs_dir)

    def close(self) -> None:
        """Stop flushing, fsync and close everything, checkpoint, mark clean.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._committer.shutdown()
        flush_now(self._logs.values())
        self._write_recovery_checkpoint()
        for plog in self._logs.values():
            plog.close()
        atomic_write(self._logs_dir / CLEAN_SHUTDOWN, b"")
        log.info("store.closed data_dir=%s", self._data_dir)


if TYPE_CHECKING:  # mypy proves the backend implements the interface protocols
    _store: type[Store] = LocalStore
    _log: type[PartitionLog] = LocalPartitionLog
