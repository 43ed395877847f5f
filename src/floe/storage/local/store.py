"""The local-disk :class:`~floe.storage.interface.Store`: every topic of one broker.

Layout under the data directory::

    meta/topics.json, meta/topics.log             topic metadata (snapshot + change log)
    logs/<topic>-<partition>/<20-digit base>.log  segments, with .index/.timeindex
    logs/<topic>-<partition>/<offset>.snapshot    producer state as of that offset
    logs/<topic>-<partition>/log-start-offset     DeleteRecords checkpoint
    logs/recovery-point-offset-checkpoint         offsets known fsynced
    logs/cleaner-offset-checkpoint                per compacted partition: cleaned up to
    logs/.clean-shutdown                          present only between close and open
                                                  (lists partitions that were offline)
    logs/.trash/                                  deleted topics' directories, being removed

Invariant: the topic metadata is the truth about which topics exist. A new topic's
partition directories are created (and the logs directory fsynced) before the topic is
recorded, and removed again when that fails halfway; a partition directory that no
topic owns (a crash during create or delete) is removed on open. Deletion moves the
directories into ``.trash`` after the metadata no longer lists the topic, so a deleted
topic never comes back.

Threads: the store and its logs belong to the event loop. Group-commit fsyncs run in
the default executor, compaction, file deletion and checkpoint writes in the store's
single worker thread (``floe-storage``), each on private fds and plain data; whatever
they change in the logs is applied back on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from floe.config.broker import (
    LOG_FLUSH_INTERVAL_MS,
    LOG_FLUSH_POLICY,
    LOG_MAX_OPEN_FILES,
    PRODUCER_ID_EXPIRATION_MS,
)
from floe.config.loader import BrokerConfig
from floe.config.topic import ResolvedTopicConfig
from floe.storage.interface import (
    InvalidPartitionsError,
    PartitionLog,
    StorageError,
    Store,
    TopicExistsError,
    TopicMeta,
    UnknownTopicOrPartitionError,
)
from floe.storage.local import compaction
from floe.storage.local.compaction import CleanerState, CleanJob
from floe.storage.local.fdcache import FileCache, fd_budget
from floe.storage.local.flush import GroupCommitter, check_online, flush_now
from floe.storage.local.log import LocalPartitionLog
from floe.storage.local.meta import (
    TopicMetadata,
    atomic_write,
    fsync_dir,
    read_offsets,
    validate_partitions,
    validate_topic_name,
)
from floe.storage.local.recovery import open_log
from floe.storage.local.retention import apply_retention
from floe.types import PartitionId, TopicName

log = logging.getLogger(__name__)

RECOVERY_CHECKPOINT = "recovery-point-offset-checkpoint"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN = ".clean-shutdown"
TRASH = ".trash"

Key = tuple[TopicName, int]


def partition_dir_name(topic: str, partition: int) -> str:
    """The name of a partition's directory under ``logs/`` (Kafka's ``<topic>-<n>``)."""
    return f"{topic}-{partition}"


class LocalStore:
    """Segmented logs on the local file system, with durable topic metadata.

    Owned by the broker's event loop. The constructor recovers everything on disk
    (see :mod:`floe.storage.local.recovery`); :meth:`close` fsyncs and closes every
    file and leaves a clean-shutdown marker. With ``log.flush.policy=interval`` (and
    for idle partitions under ``acks``) call :meth:`start_background_flush` from the
    running loop once; ``close`` stops it, and the worker thread.

    Raises:
        StorageError: a segment cannot be read or repaired while opening.
    """

    def __init__(
        self,
        data_dir: Path,
        config: BrokerConfig,
        holds: Callable[[TopicName, int], bool] | None = None,
    ) -> None:
        """``holds``: which partitions of the known topics to open (None: all); the
        directories of the others are removed. Partitions are opened and closed later
        with :meth:`open_partition` and :meth:`close_partition` (the object store of a
        cluster, whose brokers each lead some)."""
        self._data_dir = Path(data_dir)
        self._holds = holds
        self._logs_dir = self._data_dir / "logs"
        self._logs_dir.mkdir(parents=True, exist_ok=True)
        (self._data_dir / "meta").mkdir(parents=True, exist_ok=True)
        self._broker = config.explicit()
        self._interval_policy = config[LOG_FLUSH_POLICY] == "interval"
        self._flush_interval_ms = config[LOG_FLUSH_INTERVAL_MS]
        self._producer_expiry_ms = config[PRODUCER_ID_EXPIRATION_MS]
        self._files = FileCache(fd_budget(config[LOG_MAX_OPEN_FILES]))
        self._committer = GroupCommitter(self._files)
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="floe-storage")
        self._stopping = threading.Event()
        self._maintaining = False
        self._checkpoint_lock = threading.Lock()
        self._checkpoint_seq = 0
        self._checkpoint_done: dict[str, int] = {}
        self._closed = False
        self._meta = TopicMetadata(self._data_dir / "meta")
        self._by_id = {t.topic_id: t for t in self._meta.topics.values()}
        self._logs: dict[Key, LocalPartitionLog] = {}
        marker = self._logs_dir / CLEAN_SHUTDOWN
        clean = marker.exists()
        unclean = set(marker.read_text().split()) if clean else set()
        self._remove_orphans()
        recovery_points = read_offsets(self._logs_dir / RECOVERY_CHECKPOINT)
        self._cleaner = self._read_cleaner_checkpoint()
        for meta in self._meta.topics.values():
            resolved = self.topic_config(meta.name)
            for p in range(meta.partitions):
                if holds is not None and not holds(meta.name, p):
                    continue
                name = partition_dir_name(meta.name, p)
                try:
                    self._logs[(meta.name, p)] = open_log(
                        meta.name, PartitionId(p), self._logs_dir / name, resolved,
                        clean=clean and name not in unclean,
                        recovery_point=recovery_points.get(name, 0), files=self._files,
                    )  # fmt: skip
                except OSError as exc:
                    raise StorageError(f"cannot open partition {name}: {exc}") from exc
        self._write_recovery_checkpoint()
        marker.unlink(missing_ok=True)
        fsync_dir(self._logs_dir)
        log.info(
            "store.opened data_dir=%s topics=%d partitions=%d clean=%s open_files_max=%d",
            self._data_dir, len(self._meta.topics), len(self._logs), clean,
            self._files.capacity,
        )  # fmt: skip

    @property
    def _topics(self) -> Mapping[TopicName, TopicMeta]:
        return self._meta.topics

    def _remove_orphans(self) -> None:
        holds = self._holds
        owned = {
            partition_dir_name(t.name, p)
            for t in self._topics.values()
            for p in range(t.partitions)
            if holds is None or holds(t.name, p)
        }
        for path in self._logs_dir.iterdir():
            if path.is_dir() and path.name not in owned:
                log.warning("store.orphan_removed path=%s", path)
                shutil.rmtree(path)

    # -- checkpoints (written on the loop or by the worker: the newest content wins) ---

    def _recovery_points(self) -> dict[str, int]:
        return {partition_dir_name(t, p): lg.recovery_point for (t, p), lg in self._logs.items()}

    def _cleaner_lines(self) -> dict[str, str]:
        out = {}
        for (topic, p), state in self._cleaner.items():
            meta = self._topics.get(topic)
            if meta is not None and (topic, p) in self._logs:
                due = -1 if state.tombstones_due_ms is None else state.tombstones_due_ms
                out[partition_dir_name(topic, p)] = f"{meta.topic_id} {state.first_dirty} {due}"
        return out

    def _read_cleaner_checkpoint(self) -> dict[Key, CleanerState]:
        """Cleaner states of live partitions (an entry of a deleted and recreated topic
        has another topic id and is ignored)."""
        path = self._logs_dir / CLEANER_CHECKPOINT
        if not path.exists():
            return {}
        by_dir = {
            partition_dir_name(t.name, p): (t.name, p, str(t.topic_id))
            for t in self._topics.values()
            for p in range(t.partitions)
        }
        out: dict[Key, CleanerState] = {}
        for line in path.read_text(errors="replace").splitlines():
            parts = line.split()
            known = by_dir.get(parts[0]) if len(parts) == 4 else None
            if known is None or known[2] != parts[1]:
                continue
            try:
                first_dirty, due = int(parts[2]), int(parts[3])
            except ValueError:  # only costs a re-compaction
                continue
            out[(known[0], known[1])] = CleanerState(first_dirty, None if due < 0 else due)
        return out

    def _next_checkpoint(self) -> int:
        self._checkpoint_seq += 1
        return self._checkpoint_seq

    def _write_checkpoint(self, name: str, seq: int, data: bytes) -> None:
        """Write checkpoint ``name`` unless content newer than ``seq`` (taken on the loop
        when the content was) is already written; any thread.

        Raises:
            OSError: the write failed.
        """
        with self._checkpoint_lock:
            if self._checkpoint_done.get(name, 0) > seq:
                return
            atomic_write(self._logs_dir / name, data)
            self._checkpoint_done[name] = seq

    def _write_recovery_checkpoint(self) -> None:
        """Write the recovery points now (on the loop).

        Raises:
            OSError: the write failed.
        """
        seq = self._next_checkpoint()
        self._write_checkpoint(RECOVERY_CHECKPOINT, seq, self._lines(self._recovery_points()))

    @staticmethod
    def _lines(entries: Mapping[str, object]) -> bytes:
        return "".join(f"{k} {v}\n" for k, v in entries.items()).encode()

    # -- metrics ---------------------------------------------------------------------

    @property
    def fsync_rounds(self) -> int:
        """Group-commit fsync rounds run so far (a metric)."""
        return self._committer.rounds

    @property
    def open_files(self) -> int:
        """Segment and index files open right now (a metric, at most the cache size)."""
        return len(self._files)

    # -- topics ----------------------------------------------------------------------

    def topics(self) -> Mapping[TopicName, TopicMeta]:
        return dict(self._topics)

    def topic(self, name: TopicName) -> TopicMeta | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMeta | None:
        return self._by_id.get(topic_id)

    def _meta_of(self, name: TopicName) -> TopicMeta:
        meta = self._topics.get(name)
        if meta is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        return meta

    def _record(self, meta: TopicMeta) -> None:
        """Raises: StorageError: the metadata could not be written (nothing changed)."""
        try:
            self._meta.put(meta)
        except OSError as exc:
            log.error("store.meta.write_failed topic=%s error=%s", meta.name, exc)
            raise StorageError(f"cannot record topic {meta.name!r}: {exc}") from exc
        self._by_id[meta.topic_id] = meta

    def _create_partitions(self, meta: TopicMeta, start: int) -> dict[Key, LocalPartitionLog]:
        """Create the directories of partitions ``start..`` of ``meta`` (fsynced into the
        logs directory); on any failure remove what was created and raise.

        Raises:
            StorageError: a directory or file could not be created.
        """
        resolved = ResolvedTopicConfig(meta.configs, self._broker)
        created: dict[Key, LocalPartitionLog] = {}
        made: list[Path] = []
        try:
            for p in range(start, meta.partitions):
                directory = self._logs_dir / partition_dir_name(meta.name, p)
                if directory.is_dir():  # left by an earlier failure: no topic owns it
                    shutil.rmtree(directory)
                directory.mkdir()
                made.append(directory)
                created[(meta.name, p)] = open_log(
                    meta.name, PartitionId(p), directory, resolved, clean=True,
                    recovery_point=0, files=self._files, new=True,
                )  # fmt: skip
            fsync_dir(self._logs_dir)
        except (OSError, StorageError) as exc:
            log.error(
                "store.topic.create_failed topic=%s partitions=%d-%d error=%s",
                meta.name, start, meta.partitions - 1, exc,
            )  # fmt: skip
            self._discard(created.values(), made)
            raise StorageError(f"cannot create partitions of {meta.name!r}: {exc}") from exc
        return created

    def _discard(self, logs: Iterable[LocalPartitionLog], directories: list[Path]) -> None:
        """Close ``logs`` and remove ``directories`` (a failed creation); what cannot be
        removed now is an orphan the next open removes."""
        for plog in logs:
            plog.close()
        for directory in directories:
            shutil.rmtree(directory, ignore_errors=True)

    def create_topic(
        self,
        name: TopicName,
        partitions: int,
        configs: Mapping[str, str],
        *,
        internal: bool = False,
    ) -> TopicMeta:
        """Create the partition directories, then record the topic durably; a failure
        in between leaves nothing behind.

        Raises:
            InvalidTopicError: an illegal name.
            InvalidPartitionsError: a partition count outside 1..10000.
            TopicExistsError: the name is taken.
            StorageError: a directory, file or the metadata could not be written.
        """
        validate_topic_name(name)
        validate_partitions(partitions)
        if name in self._topics:
            raise TopicExistsError(f"topic {name!r} already exists")
        meta = TopicMeta(
            name, uuid.uuid4(), partitions, dict(configs), internal, int(time.time() * 1000)
        )
        created = self._create_partitions(meta, 0)
        try:
            self._record(meta)
        except StorageError:
            self._discard(created.values(), [lg.directory for lg in created.values()])
            raise
        self._logs.update(created)
        log.info("store.topic.created topic=%s partitions=%d", name, partitions)
        return meta

    def delete_topic(self, name: TopicName) -> None:
        """Forget the topic durably, then move its directories into ``.trash``; the
        worker thread removes them.

        Raises:
            UnknownTopicOrPartitionError: no such topic.
            StorageError: the metadata could not be written (nothing changed).
        """
        meta = self._meta_of(name)
        try:
            self._meta.remove(name)
        except OSError as exc:
            raise StorageError(f"cannot record the deletion of {name!r}: {exc}") from exc
        self._by_id.pop(meta.topic_id, None)
        directories: list[Path] = []
        for p in range(meta.partitions):
            self._cleaner.pop((name, p), None)
            plog = self._logs.pop((name, p), None)
            if plog is not None:  # else not held here
                plog.close()
                directories.append(plog.directory)
        self._discard_directories(directories)
        log.info("store.topic.deleted topic=%s partitions=%d", name, meta.partitions)

    def _discard_directories(self, directories: list[Path]) -> None:
        """Move closed partitions' directories into ``.trash`` (the worker thread
        removes them) and checkpoint without them: a partition created again under the
        same name must not inherit their recovery points."""
        trash = self._logs_dir / TRASH
        doomed: list[Path] = []
        for directory in directories:
            target = trash / f"{directory.name}.{uuid.uuid4().hex}"
            try:
                trash.mkdir(exist_ok=True)
                directory.rename(target)
                doomed.append(target)
            except OSError as exc:  # an orphan: removed by the next open
                log.warning("store.partition.delete_deferred path=%s error=%s", directory, exc)
        try:
            fsync_dir(self._logs_dir)
            self._write_recovery_checkpoint()
        except OSError as exc:
            log.warning("store.checkpoint.failed error=%s", exc)
        if not self._closed:
            self._worker.submit(_remove_trees, doomed)

    def create_partitions(self, name: TopicName, total: int) -> TopicMeta:
        """Raises:
        UnknownTopicOrPartitionError: no such topic.
        InvalidPartitionsError: ``total`` not above the current count, or above 10000.
        StorageError: a directory or the metadata could not be written (nothing
            changed).
        """
        meta = self._meta_of(name)
        if total <= meta.partitions:
            raise InvalidPartitionsError(
                f"topic {name!r} has {meta.partitions} partitions; {total} is not more"
            )
        validate_partitions(total)
        grown = TopicMeta(
            meta.name, meta.topic_id, total, meta.configs, meta.internal, meta.created_ms
        )
        created = self._create_partitions(grown, meta.partitions)
        try:
            self._record(grown)
        except StorageError:
            self._discard(created.values(), [lg.directory for lg in created.values()])
            raise
        self._logs.update(created)
        return grown

    def set_topic_configs(self, name: TopicName, configs: Mapping[str, str]) -> TopicMeta:
        """Raises:
        UnknownTopicOrPartitionError: no such topic.
        StorageError: the metadata could not be written (nothing changed).
        """
        meta = self._meta_of(name)
        updated = TopicMeta(
            meta.name, meta.topic_id, meta.partitions, dict(configs), meta.internal,
            meta.created_ms,
        )  # fmt: skip
        self._record(updated)
        resolved = self.topic_config(name)
        for p in range(meta.partitions):
            if (plog := self._logs.get((name, p))) is not None:
                plog.set_config(resolved)
        return updated

    def record_topic(self, meta: TopicMeta) -> None:
        """Record a topic another broker created or changed, as it is (its id,
        partition count and configs), opening no partition: a cluster member mirrors
        the writer's topics and opens only the partitions it leads
        (:meth:`open_partition`).

        Raises:
            StorageError: the metadata could not be written, or a topic of that name
                with another id is recorded (delete it first).
        """
        old = self._meta.topics.get(meta.name)
        if old is not None and old.topic_id != meta.topic_id:
            raise StorageError(f"topic {meta.name!r} is recorded with another id")
        self._record(meta)
        resolved = self.topic_config(meta.name)
        for p in range(meta.partitions):
            if (plog := self._logs.get((meta.name, p))) is not None:
                plog.set_config(resolved)

    def partition(self, name: TopicName, partition: PartitionId) -> LocalPartitionLog:
        """Raises: UnknownTopicOrPartitionError: no such topic or partition."""
        plog = self._logs.get((name, partition))
        if plog is None:
            raise UnknownTopicOrPartitionError(f"unknown partition {name}-{partition}")
        return plog

    def holds(self, name: TopicName, partition: PartitionId) -> bool:
        """Whether the partition is open here."""
        return (name, int(partition)) in self._logs

    def open_partition(self, name: TopicName, partition: PartitionId) -> LocalPartitionLog:
        """Open a partition of a known topic that is not open here, recovering whatever
        its directory holds as after a crash (nothing: an empty partition).

        Raises:
            UnknownTopicOrPartitionError: no such topic or partition.
            StorageError: it is open already, or cannot be opened.
        """
        meta = self._meta_of(name)
        if not 0 <= partition < meta.partitions:
            raise UnknownTopicOrPartitionError(f"unknown partition {name}-{partition}")
        if self.holds(name, partition):
            raise StorageError(f"partition {name}-{partition} is open already")
        directory = self._logs_dir / partition_dir_name(name, partition)
        try:
            plog = open_log(
                name, partition, directory, self.topic_config(name), clean=False,
                recovery_point=0, files=self._files,
            )  # fmt: skip
            fsync_dir(self._logs_dir)
        except OSError as exc:
            raise StorageError(f"cannot open partition {directory.name}: {exc}") from exc
        self._logs[(name, int(partition))] = plog
        log.info("store.partition.opened partition=%s-%d", name, partition)
        return plog

    def close_partition(self, name: TopicName, partition: PartitionId) -> None:
        """Close a partition and remove its directory (in the worker thread): another
        broker leads it now, and the bucket holds all of it.

        Raises:
            UnknownTopicOrPartitionError: it is not open here.
        """
        plog = self.partition(name, partition)
        del self._logs[(name, int(partition))]
        self._cleaner.pop((name, int(partition)), None)
        plog.close()
        self._discard_directories([plog.directory])
        log.info("store.partition.closed partition=%s-%d", name, partition)

    def close_to_change(self, name: TopicName, partition: PartitionId) -> int:
        """Close the partition as a clean shutdown would (its producer state snapshotted
        at its log end), so that its directory may be changed (the object store adds the
        segments it restored after the log end, or puts a directory restored from a
        producer-state snapshot in its place); returns that log end, the recovery point
        :meth:`open_changed` takes. The other partitions are not touched.

        Raises:
            UnknownTopicOrPartitionError: no such topic or partition.
        """
        plog = self.partition(name, partition)
        plog.prepare_shutdown()
        flush_now(self._files, [plog], final=True)
        _unlink_all(plog.doomed)
        point = int(plog.log_end_offset)
        plog.close()
        del self._logs[(name, int(partition))]
        return point

    def open_changed(
        self, name: TopicName, partition: PartitionId, point: int
    ) -> LocalPartitionLog:
        """Open a partition :meth:`close_to_change` closed, recovering every segment
        after ``point``: what was written there is checked and indexed as after a crash.

        Raises:
            StorageError: the partition cannot be opened again (it stays closed).
        """
        directory = self._logs_dir / partition_dir_name(name, partition)
        try:
            self._logs[(name, int(partition))] = open_log(
                name, partition, directory, self.topic_config(name), clean=False,
                recovery_point=point, files=self._files,
            )  # fmt: skip
        except OSError as exc:
            raise StorageError(f"cannot open partition {directory.name}: {exc}") from exc
        return self._logs[(name, int(partition))]

    def topic_config(self, name: TopicName) -> ResolvedTopicConfig:
        """Raises: UnknownTopicOrPartitionError: no such topic."""
        return ResolvedTopicConfig(self._meta_of(name).configs, self._broker)

    # -- durability ------------------------------------------------------------------

    async def wait_durable(self, logs: Iterable[PartitionLog]) -> None:
        """Group commit (see :mod:`floe.storage.local.flush`); immediate under the
        ``interval`` flush policy.

        Raises:
            StorageError: one of ``logs`` is offline, or the fsync failed.
        """
        if self._interval_policy:
            check_online(lg for lg in logs if isinstance(lg, LocalPartitionLog))
        else:
            await self.sync(logs)

    async def sync(self, logs: Iterable[PartitionLog]) -> None:
        """Fsync ``logs`` now whatever the flush policy, in a group-commit round shared
        with concurrent waiters.

        Raises:
            StorageError: one of ``logs`` is offline, or the fsync failed.
        """
        await self._committer.sync(lg for lg in logs if isinstance(lg, LocalPartitionLog))

    def start_background_flush(self) -> None:
        """Start fsyncing dirty logs every ``log.flush.interval.ms`` (call from the
        running event loop; :meth:`close` stops it)."""
        self._committer.start_background(
            self._flush_interval_ms, lambda: [lg for lg in self._logs.values() if lg.dirty]
        )

    # -- maintenance -------------------------------------------------------------------

    def run_maintenance(self, now_ms: int) -> None:
        """Roll aged segments, forget producers idle past ``producer.id.expiration.ms``,
        apply retention (which also refreshes ``held_bytes``) and compaction, checkpoint;
        everything on the calling thread (tests and tools: the broker uses
        :meth:`maintain`). A failing partition is logged and skipped."""
        if self._maintaining or self._closed:
            return
        jobs = self._plan_maintenance(now_ms)
        for job in jobs:
            compaction.run(job, self._stopping)
        self._finish_maintenance(jobs)()

    async def maintain(self, now_ms: int) -> None:
        """:meth:`run_maintenance` with the heavy part off the event loop: the cheap
        decisions (rolling, expiry, retention, which segments to compact) are taken on
        the loop, compaction, file deletion and checkpoint writes run in the store's
        worker thread, and their results are applied back on the loop. Appends and
        reads go on meanwhile. A run already in progress makes this a no-op."""
        if self._maintaining or self._closed:
            return
        self._maintaining = True
        try:
            loop = asyncio.get_running_loop()
            jobs = self._plan_maintenance(now_ms)
            if jobs:
                await loop.run_in_executor(self._worker, self._run_jobs, jobs)
            if self._stopping.is_set():  # closed meanwhile: the next open cleans up
                return
            await loop.run_in_executor(self._worker, self._finish_maintenance(jobs))
        finally:
            self._maintaining = False

    def _run_jobs(self, jobs: list[CleanJob]) -> None:
        for job in jobs:
            compaction.run(job, self._stopping)

    def _plan_maintenance(self, now_ms: int) -> list[CleanJob]:
        """The loop part before the worker's: roll, expire, retention, compaction plans."""
        jobs = []
        for key, plog in list(self._logs.items()):
            if plog.offline:
                continue
            try:
                plog.maybe_roll(now_ms)
                plog.expire_producers(now_ms, self._producer_expiry_ms)
                apply_retention(plog, now_ms)
                if plog.config.compact:
                    job = compaction.plan(plog, now_ms, self._cleaner.get(key, CleanerState()))
                    if job is not None:
                        jobs.append(job)
            except Exception:
                log.exception(
                    "store.maintenance.failed topic=%s partition=%d",
                    plog.topic, plog.partition,
                )  # fmt: skip
        return jobs

    def _finish_maintenance(self, jobs: list[CleanJob]) -> Callable[[], None]:
        """Apply the compaction results (on the loop) and return the worker's last step:
        unlink removed files, fsync the directories changed, write the checkpoints."""
        discard: list[Path] = []
        changed: list[Path] = []
        for job in jobs:
            key = (job.plog.topic, int(job.plog.partition))
            try:
                complete, files = compaction.apply(job)
            except StorageError:
                log.exception(
                    "store.maintenance.failed topic=%s partition=%d",
                    job.plog.topic, job.plog.partition,
                )  # fmt: skip
                complete, files = False, job.files()
            discard += files
            if job.cleaned:
                changed.append(job.plog.directory)
            if complete and key in self._logs:
                self._cleaner[key] = CleanerState(job.upto, job.tombstones_due_ms)
        doomed = discard
        for plog in self._logs.values():
            doomed += plog.doomed
            plog.doomed = []
        seq = self._next_checkpoint()
        recovery = self._lines(self._recovery_points())
        cleaner = self._lines(self._cleaner_lines())
        has_cleaner = bool(self._cleaner) or (self._logs_dir / CLEANER_CHECKPOINT).exists()

        def persist() -> None:
            _unlink_all(doomed)
            try:
                for directory in changed:
                    try:
                        fsync_dir(directory)
                    except FileNotFoundError:
                        continue
                self._write_checkpoint(RECOVERY_CHECKPOINT, seq, recovery)
                if has_cleaner:
                    self._write_checkpoint(CLEANER_CHECKPOINT, seq, cleaner)
            except OSError as exc:
                log.error("store.checkpoint.failed error=%s", exc)

        return persist

    def log_dir(self) -> str:
        return str(self._logs_dir)

    def close(self) -> None:
        """Stop flushing and the worker, snapshot producer state, fsync and close
        everything, checkpoint, mark clean (but for partitions that are offline, which
        the next open recovers). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stopping.set()
        self._committer.shutdown()
        self._worker.shutdown(wait=True)
        logs = list(self._logs.values())
        for plog in logs:
            plog.prepare_shutdown()
        flush_now(self._files, logs, final=True)
        _unlink_all([p for plog in logs for p in plog.doomed])
        seq = self._next_checkpoint()
        try:
            self._write_checkpoint(RECOVERY_CHECKPOINT, seq, self._lines(self._recovery_points()))
            if self._cleaner:
                self._write_checkpoint(CLEANER_CHECKPOINT, seq, self._lines(self._cleaner_lines()))
        except OSError as exc:
            log.error("store.checkpoint.failed error=%s", exc)
        unclean = [plog.directory.name for plog in logs if plog.offline]
        for plog in logs:
            plog.close()
        self._files.close_all()
        atomic_write(self._logs_dir / CLEAN_SHUTDOWN, "".join(f"{n}\n" for n in unclean).encode())
        log.info("store.closed data_dir=%s offline=%d", self._data_dir, len(unclean))


def _unlink_all(paths: Iterable[Path]) -> None:
    for path in paths:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:  # the next open removes leftovers
            log.warning("store.unlink_failed path=%s error=%s", path, exc)


def _remove_trees(paths: list[Path]) -> None:
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
    if paths:
        with contextlib.suppress(OSError):
            os.rmdir(paths[0].parent)  # the trash directory, once empty


if TYPE_CHECKING:  # mypy proves the backend implements the interface protocols
    _store: type[Store] = LocalStore
    _log: type[PartitionLog] = LocalPartitionLog
