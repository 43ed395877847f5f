"""The object-storage :class:`~floe.storage.interface.Store` (``storage.type = s3``).

The bucket holds the truth; ``data.dir`` is a local cache laid out as the local engine's
(:class:`~floe.storage.local.LocalStore` runs it: indexes, producer state, transactions
and compaction work unchanged on it). Design and durability contract:
``docs/architecture.md``, "Storage on object storage". In short:

* **Write**: a produce appends to the local log; acks=all is answered once a WAL object
  holding the records is in the bucket (:mod:`.wal`, group commit across partitions);
  acks=0/1 records are uploaded within ``storage.s3.wal.interval.ms``.
* **Partition objects**: every ``storage.s3.upload.interval.ms`` each partition's
  uploaded records are copied, from the local cache, into that partition's own objects
  (the newest grows up to ``storage.s3.object.target.bytes``), then WAL objects whose
  every entry is in partition objects are deleted; objects below the log start
  (retention, DeleteRecords) are deleted and the start is recorded.
* **Open**: the topics come from the bucket; a partition whose cache is behind the
  bucket (a lost or replaced disk, a new machine) gets the missing batches from the
  partition objects and WAL objects, written as a segment the local recovery then
  indexes; a cache ahead of the bucket (acks=0/1 records not uploaded before a kill)
  is uploaded.
* **Cache budget** (``storage.s3.cache.max.bytes``): at each maintenance pass the
  oldest segments already in partition objects leave the cache until it fits; reads
  below a partition's cache start are served from its objects (:mod:`.reads`), and
  retention deletes whole objects there by time and size, before the cache's own. The
  cache's newest producer-state snapshot goes to the bucket too, so that a lost disk
  restores only the records after it.

``durable_offset`` of a partition is its uploaded offset: what the bucket holds.

:class:`ObjectStore` is the facade: it owns the store's state (the partitions it leads,
the cache, the WAL writer, the :class:`~.inventory.Inventory` of what the bucket holds) and
does the topic and partition bookkeeping itself; the rest is done by one module a job:
:mod:`.state` (the bucket read at open, and which records count), :mod:`.opening` (the
open's steps, in their order), :mod:`.restore` (the cache brought up to the bucket, at
open and at a takeover), :mod:`.takeover` (partitions
taken over while running), :mod:`.uploads` (the upload
pass), :mod:`.tiering` (retention below the cache, and the cache budget) and
:mod:`.topics` (the topics and cluster id in the bucket, and who leads which partition).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from floe.config import BrokerConfig
from floe.config import broker as keys
from floe.config.topic import ResolvedTopicConfig
from floe.errors import ConfigError
from floe.storage.interface import (
    NotControllerError,
    NotOwnerError,
    NotServedYetError,
    PartitionLog,
    StorageError,
    TopicMeta,
    UnknownTopicOrPartitionError,
    WriteGuard,
)
from floe.storage.object.bucket import Bucket, describe
from floe.storage.object.inventory import Inventory
from floe.storage.object.opening import open_cache
from floe.storage.object.partition import ObjectPartitionLog
from floe.storage.object.reads import ObjectReader
from floe.storage.object.restore import delete_leftovers, record_takeovers
from floe.storage.object.state import BucketState, WalIndexes
from floe.storage.object.takeover import FOLLOW_S, Takeover, to_restore
from floe.storage.object.tiering import evict, remote_retention, tiered_start
from floe.storage.object.topics import (
    adopt_cluster_id,
    partitions,
    put_topics,
    spread,
    stays_with_writer,
    stored_cluster_id,
)
from floe.storage.object.uploads import Uploader
from floe.storage.object.wal import WalWriter
from floe.types import Offset, PartitionId, TopicName

log = logging.getLogger(__name__)

__all__ = ["ObjectStore", "stays_with_writer", "stored_cluster_id"]
"""What other modules import from here (the last two live in :mod:`.topics`)."""


class ObjectStore:
    """See the module docstring. Owned by the broker's event loop, like the local
    store; the constructor reads the bucket and brings the cache up to it.

    Raises:
        StorageError: the bucket cannot be read, or the cache cannot be opened.
    """

    def __init__(
        self,
        data_dir: Path,
        config: BrokerConfig,
        bucket: Bucket | None = None,
        guard: WriteGuard | None = None,
        holds: Callable[[TopicName, int], bool] | None = None,
        *,
        member: bool = False,
        known_wal: Callable[[], WalIndexes] | None = None,
    ) -> None:
        """``guard`` (a cluster's membership) makes this broker the writer of the
        prefix before the bucket is read (waiting as a standby while another broker
        writes it), and says when writes must stop. ``holds``: the partitions this
        broker leads at start (None: all); others are taken over and handed over with
        :meth:`acquire` and :meth:`release`.

        When the cluster's brokers share partitions (``guard.share``) the writer leads
        every partition no other live broker owns, and spreads new topics' partitions
        over the live brokers; a ``member`` (a broker without the writer lease) leads
        the partitions the metadata store says it owns, mirrors the writer's topics
        (:meth:`mirror_topics`) and changes none (NOT_CONTROLLER). ``known_wal``: the
        WAL objects' indexes a standby followed, asked for once the lease is held (only
        WAL objects it did not know are read).

        Raises:
            StorageError: the bucket cannot be read, or the cache cannot be opened.
            FloeError: ``guard`` refused this broker (the metadata store).
        """
        self._data_dir = Path(data_dir)
        self._guard = guard
        self._config = config
        self.bucket = bucket or Bucket.from_config(config)
        self._wal_indexes: WalIndexes = {}
        """The WAL objects' indexes as last read (:class:`BucketState`): a partition
        taken over or handed over reads only the new objects' indexes."""
        self._wal_interval_s = config[keys.STORAGE_S3_WAL_INTERVAL_MS] / 1000
        self._upload_interval_s = config[keys.STORAGE_S3_UPLOAD_INTERVAL_MS] / 1000
        self._cache_max_bytes = config[keys.STORAGE_S3_CACHE_MAX_BYTES]
        bounded = self._cache_max_bytes >= 0
        self.reader = ObjectReader(self.bucket, config[keys.STORAGE_S3_READ_CACHE_BYTES])
        self.member = member
        self._share = guard is not None and guard.share
        if member and (guard is None or not self._share):
            raise ConfigError("a member store needs a cluster whose brokers share partitions")
        epoch = 0
        if guard is not None:  # a member joins; the writer waits for the writer lease
            epoch = guard.join() if member else guard.acquire()
        started = time.monotonic()
        if known_wal is not None:
            self._wal_indexes = dict(known_wal())
        opened = open_cache(
            self._data_dir, config, self.bucket, guard, self._wal_indexes,
            holds=holds, member=member, bounded=bounded,
        )  # fmt: skip
        state, self.local, fences, restored = (
            opened.state, opened.local, opened.fences, opened.restored
        )  # fmt: skip
        stream = str(config[keys.NODE_ID])
        self._held = Inventory.of(state, {stream, *fences})
        record_takeovers(self.bucket, state, fences)  # before the first WAL object
        delete_leftovers(self.bucket, state)
        self._logs: dict[tuple[TopicName, int], ObjectPartitionLog] = {}
        self._releasing: set[tuple[TopicName, int]] = set()
        self._uploading = asyncio.Lock()
        """Held while one partition's records are copied into its objects (the upload
        pass, and :meth:`release`)."""
        self.wal = WalWriter(
            self.bucket,
            config[keys.STORAGE_S3_WAL_MAX_BYTES],
            stream,
            state.next_sequence(stream),
            config[keys.STORAGE_S3_WAL_MIN_INTERVAL_MS] / 1000,
            guard=guard,
            epoch=epoch,
        )
        self._uploader = Uploader(
            self.bucket, self.wal, self.local, self._held, guard=guard, stream=stream,
            target_bytes=config[keys.STORAGE_S3_OBJECT_TARGET_BYTES], bounded=bounded,
            snapshot_bytes=config[keys.STORAGE_S3_SNAPSHOT_INTERVAL_BYTES],
        )  # fmt: skip
        self._takeover = Takeover(
            self.bucket, self.local, self._held, guard, self._wal_indexes, bounded=bounded,
            open_partition=self._open_partition,
        )  # fmt: skip
        for meta in self.local.topics().values():
            self._open_partitions(meta, state)
        if not member and (state.topics is None or set(state.topics) != set(self.local.topics())):
            self._put_topics()
        self._meta_dirty = False
        self._background: asyncio.Task[None] | None = None
        self._following: asyncio.Task[None] | None = None
        behind = sum(1 for lg in self._logs.values() if lg.uploaded < lg.log_end_offset)
        log.info(
            "storage.object.opened bucket=%s topics=%d partitions=%d restored=%d "
            "to_upload=%d wal_objects=%d cache_max_bytes=%d ms=%.0f",
            self.bucket.description, len(self.local.topics()), len(self._logs), len(restored),
            behind, len(state.wal), self._cache_max_bytes, (time.monotonic() - started) * 1000,
        )  # fmt: skip

    # -- open ------------------------------------------------------------------------

    def adopt_cluster_id(self, local: str, configured: str) -> str:
        """The cluster id belongs to the log, so it lives in the bucket: every broker of
        the prefix (a standby taking over, a broker whose disk was replaced) answers the
        one the log was first written under, which its tables record. The first broker
        writes its own (``local``: the data dir's or ``configured``).

        Raises:
            ConfigError: ``cluster.id`` is configured and differs from the bucket's.
            StorageError: the bucket cannot be read or written.
        """
        return adopt_cluster_id(self.bucket, self.wal, local, configured)

    def stored_cluster_id(self) -> str | None:
        """The log's cluster id, when the bucket has one yet (a member answers with it;
        the writer records it: :meth:`adopt_cluster_id`)."""
        return stored_cluster_id(self.bucket)

    def _open_partitions(self, meta: TopicMeta, state: BucketState | None, start: int = 0) -> None:
        for p in range(start, meta.partitions):
            if self.local.holds(meta.name, PartitionId(p)):
                self._open_partition(meta, PartitionId(p), state)

    def _open_partition(
        self, meta: TopicMeta, p: PartitionId, state: BucketState | None
    ) -> ObjectPartitionLog:
        key = (meta.topic_id, int(p))
        local = self.local.partition(meta.name, p)
        uploaded = state.end(key) if state is not None else 0
        bucket_start = self._held.log_starts.get(key, 0)
        if bucket_start > local.log_start_offset and bucket_start <= local.high_watermark:
            local.delete_records(Offset(bucket_start))
        plog = ObjectPartitionLog(
            local,
            meta.topic_id,
            min(uploaded, local.log_end_offset),
            record_log_start=self._uploader.put_log_start,
            check_writable=lambda: self._check_writable(meta.name, p),
            objects=lambda: self._held.parts.get(key, []),
            reader=self.reader,
            tiered_start=tiered_start(
                self._held.parts.get(key, []), bucket_start, local.log_start_offset
            ),
            durable_reads=self._guard is not None,
        )
        if state is not None:
            plog.committed = state.committed.get(key)
        self._logs[(meta.name, int(p))] = plog
        return plog

    def _check_writable(self, name: TopicName, p: PartitionId) -> None:
        """Raises:
        NotOwnerError: the partition is being handed over (:meth:`release`).
        StorageError, NotOwnerError: see :meth:`WalWriter.check_fenced`.
        """
        if (name, int(p)) in self._releasing:
            raise NotOwnerError(f"partition {name}-{p} is being handed over to another broker")
        self.wal.check_fenced()

    # -- topics ----------------------------------------------------------------------

    def _put_topics(self) -> None:
        """Write the topic metadata to the bucket.

        Raises:
            StorageError: the PUT failed, or this broker is fenced.
        """
        put_topics(self.bucket, self.wal, self.local.topics())

    def _put_topics_or_retry(self) -> None:
        try:
            self._put_topics()
            self._meta_dirty = False
        except StorageError as exc:
            self._meta_dirty = True
            log.error("storage.object.meta_write_failed error=%s (retried in the background)", exc)

    def topics(self) -> Mapping[TopicName, TopicMeta]:
        return self.local.topics()

    def topic(self, name: TopicName) -> TopicMeta | None:
        return self.local.topic(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMeta | None:
        return self.local.topic_by_id(topic_id)

    def create_topic(
        self,
        name: TopicName,
        partitions: int,
        configs: Mapping[str, str],
        *,
        internal: bool = False,
    ) -> TopicMeta:
        """Create it in the cache, then record it in the bucket; a failed PUT undoes
        the creation.

        Raises:
            TopicExistsError, InvalidTopicError, InvalidPartitionsError, StorageError.
            NotControllerError: a member: the writer creates topics.
        """
        self._check_controller()
        meta = self.local.create_topic(name, partitions, configs, internal=internal)
        try:
            self._put_topics()
        except StorageError:
            self.local.delete_topic(name)
            raise
        self._place(meta, 0)
        return meta

    def _check_controller(self) -> None:
        """Raises: NotControllerError: a member (the writer changes topics)."""
        if self.member:
            raise NotControllerError("this broker is a member: the cluster's writer changes topics")

    def _place(self, meta: TopicMeta, start: int) -> None:
        """Lead new partitions ``start..`` of ``meta``: when brokers share partitions,
        those of a user topic that is no table topic go round the live brokers (the
        others are closed here and assigned to them), the rest stay here."""
        new = partitions([meta], start)
        assigned: dict[tuple[TopicName, PartitionId], int] = {}
        if self._guard is not None and self._share and not stays_with_writer(meta):
            assigned = spread(meta, new, self._guard.live(), self._config[keys.NODE_ID])
            for key in assigned:
                self.local.close_partition(*key)
        self._open_partitions(meta, None, start)
        if self._guard is not None:
            self._guard.adopt([k for k in new if k not in assigned])
            if assigned:
                self._guard.assign(assigned)
                log.info(
                    "storage.object.partitions_placed topic=%s here=%d elsewhere=%s",
                    meta.name, len(new) - len(assigned),
                    ",".join(f"{p}:{b}" for (_, p), b in sorted(assigned.items())),
                )  # fmt: skip

    def delete_topic(self, name: TopicName) -> None:
        """Forget it in the cache and the bucket; its objects are deleted in the
        background."""
        self._check_controller()
        meta = self.local.topic(name)
        if meta is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        self._drop_topic(meta)
        self._held.deleted.add(meta.topic_id)
        self._put_topics_or_retry()
        if self._guard is not None:
            self._guard.forget(name)

    def _drop_topic(self, meta: TopicMeta) -> int:
        """Close the partitions of ``meta`` led here and forget the topic in the cache;
        returns how many were led here."""
        gone = [
            self._logs.pop((meta.name, p))
            for p in range(meta.partitions)
            if (meta.name, p) in self._logs
        ]
        for plog in gone:
            plog.closed = True
        self.wal.forget(gone)
        self.local.delete_topic(meta.name)
        return len(gone)

    def create_partitions(self, name: TopicName, total: int) -> TopicMeta:
        self._check_controller()
        before = self.local.topic(name)
        meta = self.local.create_partitions(name, total)
        self._put_topics_or_retry()
        self._place(meta, before.partitions if before else 0)
        return meta

    def set_topic_configs(self, name: TopicName, configs: Mapping[str, str]) -> TopicMeta:
        """A topic made a table topic while other brokers lead some of its partitions
        gets them back (:class:`~floe.storage.object.sharing.PartitionSharing` recalls
        them to the writer, whose table coordinator waits for them).

        Raises:
        NotControllerError: a member (the writer changes topics).
        UnknownTopicOrPartitionError, StorageError: see the local store.
        """
        self._check_controller()
        meta = self.local.set_topic_configs(name, configs)
        self._put_topics_or_retry()
        return meta

    def partition(self, name: TopicName, partition: PartitionId) -> ObjectPartitionLog:
        """Raises:
        UnknownTopicOrPartitionError: no such topic or partition.
        NotServedYetError: it is opening here (:meth:`acquire_all`).
        NotOwnerError: another broker leads it.
        """
        plog = self._logs.get((name, int(partition)))
        if plog is None:
            if (opened := self._takeover.opening(name, partition)) is not None:
                raise NotServedYetError(f"partition {name}-{partition} is opening", opened)
            meta = self.local.topic(name)
            if meta is not None and 0 <= partition < meta.partitions:
                raise NotOwnerError(f"partition {name}-{partition} is led by another broker")
            raise UnknownTopicOrPartitionError(f"unknown topic or partition {name}-{partition}")
        plog.check_committable()
        return plog

    def topic_config(self, name: TopicName) -> ResolvedTopicConfig:
        return self.local.topic_config(name)

    @property
    def wal_indexes(self) -> WalIndexes:
        """The WAL objects' indexes as last read or followed: what the writer's store,
        opened next on this broker (a member that became the writer), starts from."""
        return self._wal_indexes

    def leads(self, name: TopicName, partition: PartitionId) -> bool:
        """Whether this broker leads the partition (it is open here)."""
        return (name, int(partition)) in self._logs

    def led(self) -> list[tuple[TopicName, PartitionId]]:
        """Every partition this broker leads."""
        return [(name, PartitionId(p)) for name, p in self._logs]

    def traffic(self) -> dict[tuple[TopicName, PartitionId], int]:
        """Bytes appended and read of each partition this broker leads, since it opened
        it."""
        return {(name, PartitionId(p)): plog.bytes_moved for (name, p), plog in self._logs.items()}

    # -- partitions moving between brokers ---------------------------------------------

    def mirror_topics(self, topics: Mapping[TopicName, TopicMeta]) -> None:
        """A member makes its topics the writer's (read from the bucket): new and
        changed topics are recorded, opening no partition; a topic gone (or created
        again under another id) closes the partitions led here.

        Raises:
            StorageError: the cache's metadata could not be written.
        """
        for name, mine in list(self.local.topics().items()):
            theirs = topics.get(name)
            if theirs is None or theirs.topic_id != mine.topic_id:
                gone = self._drop_topic(mine)
                log.info("storage.object.topic_gone topic=%s partitions_closed=%d", name, gone)
        for name, theirs in topics.items():
            if self.local.topic(name) != theirs:
                self.local.record_topic(theirs)

    async def release(self, name: TopicName, partition: PartitionId) -> None:
        """Hand the partition over: refuse appends to it (NOT_LEADER_OR_FOLLOWER),
        upload what its WAL objects lack, copy all of it into partition objects (with a
        bounded cache, and a producer-state snapshot at its end, so that the next
        leader copies nothing into its cache), then close it and drop its cache. Small
        objects are left for the next owner's upload pass to merge: appends are refused
        until this returns (merges took seconds of it under load). Once
        this returns the bucket's partition objects hold every record of it, so the
        next leader reads no WAL object of this broker's for it; nothing is
        acknowledged for it here any more.

        Raises:
            UnknownTopicOrPartitionError, NotOwnerError: it is not led here.
            StorageError: an upload failed (it is led here still, and takes appends).
        """
        plog = self.partition(name, partition)
        key = (name, int(partition))
        self._releasing.add(key)
        started = time.monotonic()
        try:
            await self.wal.sync([plog])
            synced = time.monotonic()
            async with self._uploading:
                locked = time.monotonic()
                self.wal.check_fenced()
                plog.local.take_snapshot()  # at its end: no append comes after
                steps = await self._uploader.upload(plog, merge=False)
        except BaseException:
            self._releasing.discard(key)
            raise
        del self._logs[key]
        plog.closed = True
        self.wal.forget([plog])
        self.local.close_partition(name, partition)
        self._releasing.discard(key)
        log.info(
            "storage.object.released partition=%s-%d log_end_offset=%d ms=%.0f "
            "wal_sync_ms=%.0f upload_wait_ms=%.0f %s",
            name, partition, plog.log_end_offset, (time.monotonic() - started) * 1000,
            (synced - started) * 1000, (locked - synced) * 1000,
            " ".join(f"{step}_ms={ms:.0f}" for step, ms in steps.items()),
        )  # fmt: skip

    async def acquire(self, name: TopicName, partition: PartitionId) -> ObjectPartitionLog:
        """:meth:`acquire_all` of one partition."""
        (plog,) = await self.acquire_all([(name, partition)])
        return plog

    async def acquire_all(
        self, partitions: Iterable[tuple[TopicName, PartitionId]]
    ) -> list[ObjectPartitionLog]:
        """Lead the partitions from now on: restore each from the bucket (its partition
        objects and its entries in every broker's WAL stream, indexed once for all of
        them) into a fresh cache directory, and open it, :data:`.takeover.RESTORES` at a time, each
        as soon as it is restored (those opened stay open if another one fails). A
        former leader that died must have lost the partitions in the metadata store first
        (a claim at a new epoch): a WAL object it still had in flight then counts only up
        to where its epoch ended (:meth:`fence_stream` marks such objects for deletion).

        Raises:
            UnknownTopicOrPartitionError: no such topic or partition.
            StorageError: the bucket cannot be read, or the cache written.
        """
        wanted = list(partitions)
        todo = to_restore(self.local, wanted, self._logs)
        if todo:
            await self._takeover.restore(todo)
        return [self._logs[(name, int(p))] for name, p in wanted]

    def stage(self, partitions: Iterable[tuple[TopicName, PartitionId]]) -> None:
        """Start restoring ``partitions`` while their owner's lease lapses (it refuses
        connections: it most likely died); :meth:`acquire_all` opens one from that copy
        when nothing was committed to it since (:mod:`~.staging`). Returns at once."""
        self._takeover.stage(to_restore(self.local, partitions, self._logs))

    def keep_staged(self, partitions: Iterable[tuple[TopicName, PartitionId]]) -> None:
        """Drop the staged copies of the partitions not in ``partitions``."""
        ids = {name: meta.topic_id for name, meta in self.local.topics().items()}
        self._takeover.keep_staged({(ids[n], int(p)) for n, p in partitions if n in ids})

    async def fence_stream(self, stream: str, epoch: int) -> None:
        """Record that ``epoch`` took over WAL stream ``stream`` (a broker that
        died): its objects of an older epoch at or after the sequence it would use
        next were written after this, by a broker that had lost its lease: every open
        and :meth:`acquire` ignores those whose entries carry no ownership epoch, and the
        next open deletes them. ``epoch`` must be above every epoch the stream was
        written at.

        Raises:
            StorageError: the bucket cannot be read or written.
        """
        await self._takeover.fence_stream(stream, epoch)

    # -- durability ------------------------------------------------------------------

    def on_durable(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after every WAL upload (in a cluster, records become
        readable only then: long-polling fetches wait for it)."""
        self.wal.on_upload = callback

    async def wait_durable(self, logs: Iterable[PartitionLog]) -> None:
        """Return once the records appended to ``logs`` are in a WAL object in the
        bucket, whatever ``log.flush.policy`` says (the cache is not fsynced for it).

        Raises:
            StorageError: the upload failed.
        """
        await self.wal.sync(lg for lg in logs if isinstance(lg, ObjectPartitionLog))

    async def sync(self, logs: Iterable[PartitionLog]) -> None:
        await self.wait_durable(logs)

    def start_background_flush(self) -> None:
        """Start the cache's flusher, the periodic WAL upload and the partition-object
        uploader (call from the running loop; :meth:`close` stops them)."""
        self.local.start_background_flush()
        self.wal.run_every(self._wal_interval_s, lambda: list(self._logs.values()))
        if self._background is None:
            self._background = asyncio.create_task(
                self._uploader.run_every(self.upload_partitions, self._upload_interval_s),
                name="floe-s3-upload",
            )
        if self._share and self._following is None:  # it may take partitions over
            self._following = asyncio.create_task(
                self._takeover.follow_every(FOLLOW_S), name="floe-s3-wal-follow"
            )

    async def upload_partitions(self) -> None:
        """Copy uploaded records into partition objects, delete the WAL objects they
        cover and the objects below each log start, record log starts; retry a failed
        metadata write."""
        try:
            self.wal.check_fenced()
        except StorageError:
            return  # another broker owns the prefix now, or our lease lapsed: no writes
        if self._meta_dirty:
            self._put_topics_or_retry()
        await self._uploader.upload_pass(list(self._logs.values()), self._uploading)

    # -- maintenance -----------------------------------------------------------------

    def run_maintenance(self, now_ms: int) -> None:
        """Retention of the objects below each cache start, the cache budget, then the
        cache's own maintenance (which unlinks the evicted segments' files)."""
        self._below_cache(now_ms)
        self.local.run_maintenance(now_ms)

    async def maintain(self, now_ms: int) -> None:
        """:meth:`run_maintenance`, the cache's part off the event loop."""
        self._below_cache(now_ms)
        await self.local.maintain(now_ms)

    def _below_cache(self, now_ms: int) -> None:
        """Retention of the objects below each cache start, then the cache budget."""
        remote_retention(self._logs.values(), now_ms)
        evict(self._logs.values(), self._held.parts, self._cache_max_bytes)

    def log_dir(self) -> str:
        return self.local.log_dir()

    def close(self) -> None:
        """Upload what is not in the bucket yet, then close the cache.

        Raises:
            StorageError: the final upload failed (the cache keeps the records; the
                next open uploads them).
        """
        for task in (self._background, self._following):
            if task is not None:
                task.cancel()
        self._background = self._following = None
        self.wal.shutdown()
        try:
            self.wal.upload_all_blocking(self._logs.values())
            if self._meta_dirty:
                self._put_topics()
        except Exception as exc:
            log.error("storage.object.close_upload_failed error=%s", describe(exc))
        finally:
            self.local.close()
