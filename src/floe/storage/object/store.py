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
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import shutil
import time
import uuid
import zlib
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO, TypeVar

from floe.config import BrokerConfig
from floe.config import broker as keys
from floe.config.tabletopic import DLQ_SOURCE, canonical_name, is_table_topic_key
from floe.config.tabletopic import ENABLE as TABLE_TOPIC_ENABLE
from floe.config.topic import ResolvedTopicConfig
from floe.errors import ConfigError
from floe.storage.interface import (
    NotControllerError,
    NotOwnerError,
    PartitionLog,
    StorageError,
    TopicMeta,
    UnknownTopicOrPartitionError,
    WriteGuard,
)
from floe.storage.local import LocalStore
from floe.storage.local import snapshot as local_snapshot
from floe.storage.local.meta import TopicMetadata, save_topics, topics_doc, topics_from_doc
from floe.storage.local.store import partition_dir_name
from floe.storage.object import layout
from floe.storage.object.bucket import Bucket, Listed, describe
from floe.storage.object.layout import Entry, PartObject
from floe.storage.object.partition import ObjectPartitionLog
from floe.storage.object.reads import ObjectReader
from floe.storage.object.wal import WalWriter
from floe.storage.producer_state import decode_snapshot
from floe.types import Offset, PartitionId, TopicName

log = logging.getLogger(__name__)

Key = tuple[uuid.UUID, int]
_T = TypeVar("_T")
READERS = 16
"""Concurrent GETs while the bucket is read at open."""
READ_CHUNK = 1024 * 1024
"""Bytes read from the cache per call by the upload pass (it yields in between)."""
PIECE_BYTES = 4 * 1024 * 1024
"""Largest new partition object the upload pass writes: large PUTs, or the store's work
for them, delay the WAL PUTs acks=all waits for (measured on SeaweedFS: p99 of a 5,000
records/s acks=all producer 524 ms with 64 MiB objects, 49 ms with 4 MiB ones)."""
WAL_BACKLOG = 500
"""WAL objects that start an upload pass before ``storage.s3.upload.interval.ms``: a
broker taking over reads each of them (its index and its entries; on a busy 2-core host
2,700 of them took 2.3-3.4 s of the takeover)."""
BACKLOG_CHECK_S = 0.5
MERGE_COUNT = 32
"""Small objects of a partition merged into one even before they reach the target size."""
STALE_READS = 5
"""Times a restore lists a partition's objects again when one it had listed is gone
(see :meth:`BucketState.read_from`) before that counts as an error."""
COMPACTED_RATIO = 2
COMPACTED_MIN_BYTES = 64 * 1024
"""A compacted partition's objects are rewritten from the cache when they hold more than
COMPACTED_RATIO times its cached bytes, and COMPACTED_MIN_BYTES more."""


def _wal_index(bucket: Bucket, item: Listed) -> tuple[list[Entry], int] | None:
    """A WAL object's entries and data start, reading only its first bytes (more when
    the index is larger than :data:`~.layout.INDEX_PROBE`); None when it is gone since
    it was listed (its records moved into partition objects)."""
    try:
        head = bucket.get_range(item.key, 0, min(layout.INDEX_PROBE, item.size))
        need = layout.wal_index_size(head)
        if need > len(head):
            head = bucket.get_range(item.key, 0, need)
    except FileNotFoundError:
        return None
    return layout.decode_wal_index(head, item.size)


def _outermost(objs: list[PartObject], redundant: list[str]) -> list[PartObject]:
    """``objs`` in offset order without those inside another (a merge or rewrite cut
    short by a crash, or one that has not deleted what it merged yet), whose keys go
    to ``redundant``."""
    objs.sort(key=lambda o: (o.base, -o.end))
    kept: list[PartObject] = []
    for obj in objs:
        if kept and obj.end <= kept[-1].end:
            redundant.append(obj.key)
        else:
            kept.append(obj)
    return kept


def _data_objects(
    bucket: Bucket, prefixes: Iterable[str]
) -> Iterator[tuple[Key, PartObject | int | None, str]]:
    """Each data object under ``prefixes``: its partition, what it is (a partition
    object, a producer-state snapshot's offset, or None for the log start) and its key;
    keys it does not know are logged and skipped."""
    for prefix in prefixes:
        for item in bucket.list(prefix):
            parsed = layout.parse_data_key(item.key, item.size)
            if parsed is None:
                log.warning("storage.bucket.unknown_key key=%s", item.key)
                continue
            topic_id, partition, obj = parsed
            yield (topic_id, partition), obj, item.key


def _named(bucket: Bucket, prefix: str, parse: Callable[[str], _T | None]) -> list[tuple[_T, str]]:
    """What ``parse`` makes of each key under ``prefix``, with the key; keys it does not
    know are logged and skipped."""
    found: list[tuple[_T, str]] = []
    for item in bucket.list(prefix):
        parsed = parse(item.key)
        if parsed is None:
            log.warning("storage.bucket.unknown_key key=%s", item.key)
        else:
            found.append((parsed, item.key))
    return found


class BucketState:
    """What the bucket holds, read once at open: topics, partition objects, log starts
    and every WAL stream's objects (their indexes: only their first bytes are read; the
    uploader keeps WAL objects few by moving their records into partition objects),
    floors and takeover records. Reads run :data:`READERS` at a time.

    Other brokers on the prefix move WAL objects' records into partition objects and
    delete those WAL objects at any time. So the WAL objects are listed and indexed
    first, a WAL object gone by its index read is left out, and the partition objects
    are listed after: what a WAL object held that this state lacks is in them."""

    def __init__(
        self,
        bucket: Bucket,
        only: Collection[Key] | None = None,
        indexes: dict[str, tuple[tuple[Entry, ...], int]] | None = None,
    ) -> None:
        """``only``: read the data objects of those partitions alone (partitions taken
        over at runtime); the WAL streams are read whole either way. ``indexes``: the
        WAL objects' indexes read before, by key (a WAL object never changes: only
        those listed for the first time are read), updated to the listed ones."""
        self.topics: dict[TopicName, TopicMeta] | None = None
        self.parts: dict[Key, list[PartObject]] = {}
        self.log_starts: dict[Key, int] = {}
        self.snapshots: dict[Key, list[int]] = {}
        self.wal: dict[str, list[Entry]] = {}
        """Each WAL object's entries, by key (zombies left out)."""
        self.wal_data_start: dict[str, int] = {}
        try:
            self.topics = topics_from_doc(bucket.get(layout.TOPICS_KEY))
        except FileNotFoundError:
            self.topics = None
        floors = _named(bucket, layout.WAL_FLOOR_PREFIX, layout.parse_wal_floor_key)
        takeover_keys = _named(bucket, layout.TAKEOVER_PREFIX, layout.parse_takeover_key)
        self.floors: dict[str, int] = {}
        """Each stream's wal-floor."""
        self.takeovers: dict[str, dict[int, int]] = {}
        """Each stream's takeover records: epoch -> the first sequence it left to the
        stream's older epochs."""
        with ThreadPoolExecutor(READERS, thread_name_prefix="floe-s3-open") as pool:
            for (stream, _), blob in zip(
                floors, pool.map(bucket.get, [k for _, k in floors]), strict=True
            ):
                self.floors[stream] = layout.decode_wal_floor(blob)
            for ((stream, epoch), _), blob in zip(
                takeover_keys, pool.map(bucket.get, [k for _, k in takeover_keys]), strict=True
            ):
                self.takeovers.setdefault(stream, {})[epoch] = layout.decode_takeover(blob)
        self._sequences: dict[str, int] = {}  # each stream's largest sequence listed
        self.zombies: list[str] = []
        """WAL objects a writer wrote after it lost the lease (another took over before
        they landed): never acknowledged, ignored, deleted once this broker may write."""
        wal: list[Listed] = []
        suspects: list[Listed] = []
        for item in bucket.list(layout.WAL_PREFIX):
            named = layout.parse_wal_key(item.key)
            if named is None:
                log.warning("storage.bucket.unknown_key key=%s", item.key)
                continue
            stream, sequence, epoch = named
            self._sequences[stream] = max(self._sequences.get(stream, -1), sequence)
            takeovers = self.takeovers.get(stream, {}).items()
            if any(e > epoch and sequence >= first for e, first in takeovers):
                suspects.append(item)
            else:
                wal.append(item)
        known = {} if indexes is None else indexes
        unread = [item for item in (*wal, *suspects) if item.key not in known]
        with ThreadPoolExecutor(READERS, thread_name_prefix="floe-s3-open") as pool:
            read = dict(
                zip(
                    [item.key for item in unread],
                    pool.map(lambda w: _wal_index(bucket, w), unread),
                    strict=True,
                )
            )
        fresh: dict[str, tuple[tuple[Entry, ...], int]] = {}
        for item in suspects:
            # written after a takeover record of its stream: an object whose entries
            # carry ownership epochs was committed or not by the metadata store (the
            # epochs decide, see _valid); an older one was never acknowledged
            index = read[item.key] if item.key in read else known.get(item.key)
            if index is not None and any(e.epoch for e in index[0]):
                wal.append(item)
            elif index is not None:
                self.zombies.append(item.key)
        for item in wal:
            index = read[item.key] if item.key in read else known[item.key]
            if index is not None:
                entries, start = index
                fresh[item.key] = (tuple(entries), start)
                self.wal[item.key], self.wal_data_start[item.key] = list(entries), start
        if indexes is not None:
            indexes.clear()
            indexes.update(fresh)
        starts: list[tuple[Key, str]] = []
        prefixes = (
            [layout.DATA_PREFIX] if only is None else [layout.partition_prefix(*k) for k in only]
        )
        for key, obj, name in _data_objects(bucket, prefixes):
            if obj is None:
                starts.append((key, name))
            elif isinstance(obj, int):
                self.snapshots.setdefault(key, []).append(obj)
            else:
                self.parts.setdefault(key, []).append(obj)
        for offsets in self.snapshots.values():
            offsets.sort()
        self.redundant: list[str] = []
        for key, objs in self.parts.items():
            self.parts[key] = _outermost(objs, self.redundant)
        with ThreadPoolExecutor(READERS, thread_name_prefix="floe-s3-open") as pool:
            for (key, _), blob in zip(
                starts, pool.map(bucket.get, [k for _, k in starts]), strict=True
            ):
                self.log_starts[key] = layout.decode_log_start(blob)
        self.wal_entries: dict[Key, list[tuple[str, Entry]]] = {}
        """Each partition's WAL entries with their object's key (indexed once, not per
        partition)."""
        for wal_key, entries in self.wal.items():
            for e in entries:
                self.wal_entries.setdefault((e.topic_id, e.partition), []).append((wal_key, e))
        self.committed: dict[Key, int] = {}
        """In a cluster, each partition's committed end in the metadata store (read
        once the partitions restored are claimed: :meth:`commit_point`)."""

    def commit_point(self, ends: Mapping[tuple[TopicName, PartitionId], int]) -> None:
        """Read each partition only up to its committed end ``ends`` (by name, from the
        metadata store): records beyond it were never part of the log."""
        ids = {name: meta.topic_id for name, meta in (self.topics or {}).items()}
        self.committed = {
            (ids[name], int(p)): end for (name, p), end in ends.items() if name in ids
        }

    def _valid(self, key: Key) -> list[tuple[int, int, PartObject | tuple[str, Entry]]]:
        """The partition's sources as ``(base, valid end, source)``: the records of a
        WAL entry count up to the first offset a later owner of the partition wrote at
        (a higher ownership epoch: what a former owner wrote from there on was never
        committed, as Kafka truncates a diverging log by leader epoch) and, in a
        cluster, up to the committed end."""
        cap = self.committed.get(key)
        entries = self.wal_entries.get(key, ())
        starts: dict[int, int] = {}
        for _, e in entries:
            starts[e.epoch] = min(starts.get(e.epoch, e.base), e.base)
        out: list[tuple[int, int, PartObject | tuple[str, Entry]]] = []
        for o in self.parts.get(key, ()):
            end = o.end if cap is None else min(o.end, cap)
            if end > o.base:
                out.append((o.base, end, o))
        for wal_key, e in entries:
            end = min([e.end, *(at for epoch, at in starts.items() if epoch > e.epoch)])
            if cap is not None:
                end = min(end, cap)
            if end > e.base:
                out.append((e.base, end, (wal_key, e)))
        return out

    def list_parts(self, bucket: Bucket, key: Key) -> None:
        """List the partition objects of ``key`` again (others' objects may have
        replaced the ones listed)."""
        prefix = layout.partition_prefix(*key)
        objs = [o for _, o, _ in _data_objects(bucket, [prefix]) if isinstance(o, PartObject)]
        self.parts[key] = _outermost(objs, [])

    @property
    def streams(self) -> set[str]:
        """Every WAL stream the bucket names (objects, floors or takeover records)."""
        return {*self._sequences, *self.floors, *self.takeovers}

    def next_sequence(self, stream: str) -> int:
        """The first sequence no object of ``stream`` had or will have."""
        return max(self._sequences.get(stream, -1) + 1, self.floors.get(stream, 0))

    def last_epoch(self, stream: str) -> int:
        """The newest epoch that recorded a takeover of ``stream`` (0: none)."""
        return max(self.takeovers.get(stream, {}), default=0)

    def end(self, key: Key) -> int:
        """The offset after the last record the bucket holds for ``key`` (0: none)."""
        return max((end for _, end, _ in self._valid(key)), default=self.log_starts.get(key, 0))

    def read_from(self, bucket: Bucket, key: Key, offset: int) -> Iterator[memoryview]:
        """The batches the bucket holds for ``key`` from the one holding ``offset`` on,
        one object (or WAL entry) at a time, each chunk starting at a batch; objects in
        offset order, WAL entries after the partition objects. The objects it will need
        are fetched :data:`READERS` at a time ahead of the one being read (a takeover
        reads one small WAL entry per WAL object, thousands of them under load).

        A WAL object gone since it was listed had its records moved into partition
        objects: the partition's objects are listed again and the read goes on from
        where it stopped (at most :data:`STALE_READS` times).

        Raises:
            FileNotFoundError: an object still gone after the last listing.
        """
        position = offset
        for attempt in range(1, STALE_READS + 1):
            try:
                for chunk, end in self._read_sources(bucket, key, position):
                    yield chunk
                    position = max(position, end)
                return
            except FileNotFoundError as exc:
                if attempt == STALE_READS:
                    raise
                log.info(
                    "storage.object.listed_again offset=%d reason=%s",
                    position, describe(exc).split(":", 1)[0],
                )  # fmt: skip
                self.list_parts(bucket, key)

    def _read_sources(
        self, bucket: Bucket, key: Key, offset: int
    ) -> Iterator[tuple[memoryview, int]]:
        """:meth:`read_from`'s chunks, each with the end of the object it came from."""
        sources = self._valid(key)
        sources.sort(key=lambda s: (s[0], -s[1]))  # from one base, the one reaching furthest
        wanted: list[int] = []  # the sources read if each holds what its name says
        reach = offset
        for i, (_, end, _) in enumerate(sources):
            if end > reach:
                wanted.append(i)
                reach = end
        position = offset
        with ThreadPoolExecutor(READERS, thread_name_prefix="floe-s3-restore") as pool:
            ahead: dict[int, Future[bytes]] = {}
            queue = iter(wanted)
            for i, (_, end, source) in enumerate(sources):
                if end <= position:
                    if (skipped := ahead.pop(i, None)) is not None:
                        skipped.cancel()
                    continue
                while len(ahead) < READERS and (nxt := next(queue, None)) is not None:
                    if nxt >= i:  # (one passed already: what it held was not there)
                        ahead[nxt] = pool.submit(self._fetch, bucket, sources[nxt][2])
                fetched = ahead.pop(i, None)
                blob = memoryview(
                    fetched.result() if fetched is not None else self._fetch(bucket, source)
                )
                found = layout.slice_from(blob, position)
                if found is not None:
                    chunk = found[0]
                    nominal = source.end if isinstance(source, PartObject) else source[1].end
                    if end < nominal:  # it holds more than counts (see _valid)
                        chunk = memoryview(layout.cut_at(bytes(chunk), end))
                    yield chunk, end
                    position = max(position, end)

    def _fetch(self, bucket: Bucket, source: PartObject | tuple[str, Entry]) -> bytes:
        """A partition object's bytes, or a WAL entry's."""
        if isinstance(source, PartObject):
            return bucket.get(source.key)
        wal_key, entry = source
        return bucket.get_range(
            wal_key, self.wal_data_start[wal_key] + entry.position, entry.length
        )


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
        (:meth:`mirror_topics`) and changes none (NOT_CONTROLLER).

        Raises:
            StorageError: the bucket cannot be read, or the cache cannot be opened.
            FloeError: ``guard`` refused this broker (the metadata store).
        """
        self._data_dir = Path(data_dir)
        self._guard = guard
        self._config = config
        self.bucket = bucket or Bucket.from_config(config)
        self._wal_indexes: dict[str, tuple[tuple[Entry, ...], int]] = {}
        """The WAL objects' indexes as last read (:class:`BucketState`): a partition
        taken over or handed over reads only the new objects' indexes."""
        self._target_bytes = config[keys.STORAGE_S3_OBJECT_TARGET_BYTES]
        self._wal_interval_s = config[keys.STORAGE_S3_WAL_INTERVAL_MS] / 1000
        self._upload_interval_s = config[keys.STORAGE_S3_UPLOAD_INTERVAL_MS] / 1000
        self._cache_max_bytes = config[keys.STORAGE_S3_CACHE_MAX_BYTES]
        self.reader = ObjectReader(self.bucket, config[keys.STORAGE_S3_READ_CACHE_BYTES])
        self.member = member
        self._share = guard is not None and guard.share
        if member and (guard is None or not self._share):
            raise ConfigError("a member store needs a cluster whose brokers share partitions")
        epoch = 0
        if guard is not None:  # a member joins; the writer waits for the writer lease
            epoch = guard.join() if member else guard.acquire()
        started = time.monotonic()
        try:
            state = BucketState(self.bucket, indexes=self._wal_indexes)
        except (OSError, Exception) as exc:  # obstore raises its own error classes
            raise StorageError(
                f"cannot read the bucket {self.bucket.description}: {describe(exc)}"
            ) from exc
        self._adopt_topics(state)
        stream = str(config[keys.NODE_ID])
        fences: dict[str, int] = {}
        if guard is not None:
            self._drop_stale_partitions(state, guard, config[keys.NODE_ID])
            # a member fences only its own stream (a dead broker's are the writer's to take
            # over); the writer its own and every stream no live member writes, including
            # those of dead owners that never wrote one
            streams = {stream}
            if not member:
                streams |= state.streams | {str(guard.owner(*k)) for k in self._every(state)}
            fences = guard.fence_streams(sorted(streams - {"None"}))
            if self._share:
                holds = self._claim_at_open(state, guard, config[keys.NODE_ID], set(fences))
            else:  # the writer alone: every partition, claimed before its end is read
                guard.claim(self._every(state))
            state = self._to_commit_point(state, guard)
        self.local = LocalStore(self._data_dir, config, holds)
        restored = [
            (meta.name, p)
            for meta in self.local.topics().values()
            for p in range(meta.partitions)
            if self.local.holds(meta.name, PartitionId(p))
            and self._restore_partition(state, meta, PartitionId(p))
        ]
        self._parts: dict[Key, list[PartObject]] = state.parts
        self._log_starts: dict[Key, int] = dict(state.log_starts)
        self._snapshots: dict[Key, list[int]] = state.snapshots
        self._deleted: set[uuid.UUID] = set()
        self._wal_pending: dict[str, list[Entry]] = state.wal
        self._wal_floors = dict(state.floors)
        self._streams = {stream, *fences}
        """The WAL streams whose covered objects this broker deletes: its own and those it
        fenced (a dead broker's, whose partitions it took)."""
        if guard is not None:
            # before the first WAL object: see BucketState.zombies
            for other, at in sorted(fences.items()):
                if at > state.last_epoch(other):
                    self.bucket.put(
                        layout.takeover_key(other, at),
                        layout.encode_takeover(state.next_sequence(other)),
                    )
        if state.zombies:
            self.bucket.delete(state.zombies)
            log.warning(
                "storage.object.stale_wal_deleted objects=%d (written by a broker after it "
                "had lost the writer lease; never acknowledged)",
                len(state.zombies),
            )
        if state.redundant:
            self.bucket.delete(state.redundant)
            log.info("storage.object.redundant_deleted objects=%d", len(state.redundant))
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
        for meta in self.local.topics().values():
            self._open_partitions(meta, state)
        if not member and (state.topics is None or set(state.topics) != set(self.local.topics())):
            self._put_topics()
        self._meta_dirty = False
        self._background: asyncio.Task[None] | None = None
        behind = sum(1 for lg in self._logs.values() if lg.uploaded < lg.log_end_offset)
        log.info(
            "storage.object.opened bucket=%s topics=%d partitions=%d restored=%d "
            "to_upload=%d wal_objects=%d ms=%.0f",
            self.bucket.description, len(self.local.topics()), len(self._logs), len(restored),
            behind, len(state.wal), (time.monotonic() - started) * 1000,
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
        try:
            stored = stored_cluster_id(self.bucket)
        except Exception as exc:
            raise StorageError(
                f"cannot read the cluster id in the bucket: {describe(exc)}"
            ) from exc
        if stored:
            if configured and configured != stored:
                raise ConfigError(
                    f"cluster.id {configured!r} differs from {stored!r}, the id of the log in "
                    f"{self.bucket.description}"
                )
            return stored
        self.wal.check_fenced()
        try:
            self.bucket.put(layout.CLUSTER_ID_KEY, local.encode())
        except Exception as exc:
            raise StorageError(
                f"cannot record the cluster id in the bucket: {describe(exc)}"
            ) from exc
        return local

    def stored_cluster_id(self) -> str | None:
        """The log's cluster id, when the bucket has one yet (a member answers with it;
        the writer records it: :meth:`adopt_cluster_id`)."""
        return stored_cluster_id(self.bucket)

    def _to_commit_point(self, state: BucketState, guard: WriteGuard) -> BucketState:
        """``state`` read up to each partition's committed end in the metadata store,
        read now that this broker owns what it restores (no former owner commits after
        this). A WAL object committed after the bucket was listed (a broker paused
        while this one listed it) is found by listing the bucket again.

        Raises:
            StorageError: the bucket still lacks records the metadata store says are
                committed.
        """
        for attempt in range(STALE_READS):
            state.commit_point(guard.committed())
            short = [k for k, end in state.committed.items() if state.end(k) < end]
            if not short:
                return state
            log.info(
                "storage.object.listed_again partitions=%d reason=committed_beyond_listing",
                len(short),
            )
            if attempt + 1 < STALE_READS:
                state = BucketState(self.bucket, indexes=self._wal_indexes)
        raise StorageError(
            f"the bucket lacks committed records of {len(short)} partitions "
            f"(first: {short[0]}): objects deleted by hand?"
        )

    def _drop_stale_partitions(self, state: BucketState, guard: WriteGuard, me: int) -> None:
        """In a cluster, drop the cache of every partition another broker owned since
        this one did: the cache may hold records this broker appended but never uploaded
        before it lost the lease, at offsets the other broker then gave to other
        records. Those partitions are restored from the bucket, as after a lost disk."""
        logs_dir = self._data_dir / "logs"
        dropped: list[str] = []
        for name, meta in (state.topics or {}).items():
            for p in range(meta.partitions):
                owner = guard.owner(name, PartitionId(p))
                directory = logs_dir / partition_dir_name(name, p)
                if owner not in (None, me) and directory.exists():
                    shutil.rmtree(directory)
                    dropped.append(directory.name)
        if dropped:
            log.warning(
                "storage.object.stale_cache_dropped partitions=%d first=%s (another broker "
                "wrote them since this cache was written: restored from the bucket)",
                len(dropped), dropped[0],
            )  # fmt: skip

    @staticmethod
    def _every(state: BucketState) -> list[tuple[TopicName, PartitionId]]:
        return _partitions((state.topics or {}).values())

    def _claim_at_open(
        self, state: BucketState, guard: WriteGuard, me: int, fenced: set[str]
    ) -> Callable[[TopicName, int], bool]:
        """Claim, at a new ownership epoch, the partitions this broker leads from now on:
        a member those the metadata store says it owns (a run of it before a crash may
        have led them), the writer those of nobody, of itself, or of a broker whose
        stream it just fenced (a dead one: it acknowledges nothing any more, and cannot
        come back as the same run). Only what it won is opened."""
        mine = [
            k
            for k in self._every(state)
            if (owner := guard.owner(*k)) == me
            or (not self.member and (owner is None or str(owner) in fenced))
        ]
        won = set(guard.claim(mine))
        return lambda name, p: (name, PartitionId(p)) in won

    def _adopt_topics(self, state: BucketState) -> None:
        """Make the cache's topic metadata the bucket's (when the bucket has any): a
        cached partition of a topic the bucket does not know, or knows under another
        id, is removed."""
        if state.topics is None:
            return
        meta_dir = self._data_dir / "meta"
        meta_dir.mkdir(parents=True, exist_ok=True)
        cached = TopicMetadata(meta_dir).topics
        logs_dir = self._data_dir / "logs"
        for name, meta in cached.items():
            theirs = state.topics.get(name)
            if theirs is None or theirs.topic_id != meta.topic_id:
                for p in range(meta.partitions):
                    shutil.rmtree(logs_dir / partition_dir_name(name, p), ignore_errors=True)
                log.info("storage.object.cache_dropped topic=%s reason=not_in_bucket", name)
        (meta_dir / "topics.log").unlink(missing_ok=True)
        save_topics(meta_dir / "topics.json", state.topics)

    def _restore_partition(self, state: BucketState, meta: TopicMeta, p: PartitionId) -> bool:
        """Write the batches of partition ``p`` the cache lacks as new segments after
        its own (cut at the topic's ``segment.bytes``, so that retention still deletes
        whole segments), and reopen it so that the local recovery indexes them; True
        when it got any.

        With a cache budget, a partition whose bucket holds a producer-state snapshot
        after the cache's end is restored from the newest one on, in a new directory
        that replaces the cache's (the records below it stay in the bucket, read from
        there); else from the cache end."""
        key = (meta.topic_id, int(p))
        local_end = int(self.local.partition(meta.name, p).log_end_offset)
        if state.end(key) <= local_end:
            return False
        snapshot = self._restore_snapshot(state, key, local_end)
        segment_bytes = self.local.topic_config(meta.name).segment_bytes
        written = 0

        def fill(directory: Path) -> None:
            nonlocal written
            written = self._fill(
                state, key, directory, local_end, snapshot=snapshot, segment_bytes=segment_bytes
            )

        reopened = self.local.reopen_partition(meta.name, p, fill)
        if reopened.log_end_offset <= local_end and snapshot is None:
            return False
        log.info(
            "storage.object.restored partition=%s-%d from=%d to=%d bytes=%d from_snapshot=%s",
            meta.name, p, snapshot[0] if snapshot else local_end, reopened.log_end_offset,
            written, snapshot is not None,
        )  # fmt: skip
        return True

    def _fill(
        self,
        state: BucketState,
        key: Key,
        directory: Path,
        local_end: int,
        *,
        snapshot: tuple[int, bytes] | None,
        segment_bytes: int,
    ) -> int:
        """Write the bucket's batches of ``key`` after ``local_end`` into ``directory``
        (not open in the cache) as segments, or, from ``snapshot`` on, into a directory
        that then replaces it; returns the bytes written. When the bucket holds no record
        there but its log start is later (every record deleted), the log is made to
        start at that log start, so that no offset is given out twice. Bucket reads and
        file writes only: safe in a worker thread."""
        start, target = local_end, directory
        if snapshot is not None:
            start, blob = snapshot
            target = directory.with_name(directory.name + ".restoring")
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            local_snapshot.snapshot_path(target, start).write_bytes(blob)
            (target / f"{start:020d}.log").touch()  # the log starts there
        directory.mkdir(parents=True, exist_ok=True)
        written = _write_segments(
            target, state.read_from(self.bucket, key, start), start, segment_bytes
        )
        log_start = state.log_starts.get(key, 0)
        if not written and log_start > start:  # every record deleted: the log starts there
            _drop_empty_segments(target, log_start)
            (target / f"{log_start:020d}.log").touch()
        if target != directory:
            shutil.rmtree(directory)
            target.rename(directory)
        return written

    def _restore_snapshot(
        self, state: BucketState, key: Key, local_end: int
    ) -> tuple[int, bytes] | None:
        """The newest usable producer-state snapshot in the bucket after ``local_end``
        (offset and bytes), when the cache is bounded; None: restore from the cache end."""
        if self._cache_max_bytes < 0:
            return None
        for offset in reversed(state.snapshots.get(key, [])):
            if offset <= max(local_end, state.log_starts.get(key, 0)):
                break
            try:
                blob = self.bucket.get(layout.snapshot_key(*key, offset))
            except FileNotFoundError:
                continue
            decoded = decode_snapshot(blob)
            if decoded is not None and decoded[0] == offset:
                return offset, blob
            log.warning(
                "storage.object.snapshot_unusable key=%s", layout.snapshot_key(*key, offset)
            )
        return None

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
        bucket_start = self._log_starts.get(key, 0)
        if bucket_start > local.log_start_offset and bucket_start <= local.high_watermark:
            local.delete_records(Offset(bucket_start))
        plog = ObjectPartitionLog(
            local,
            meta.topic_id,
            min(uploaded, local.log_end_offset),
            record_log_start=self._put_log_start,
            check_writable=lambda: self._check_writable(meta.name, p),
            objects=lambda: self._parts.get(key, []),
            reader=self.reader,
            tiered_start=_tiered_start(
                self._parts.get(key, []), bucket_start, local.log_start_offset
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

    def _put_log_start(self, plog: ObjectPartitionLog) -> None:
        """Record ``plog``'s log start in the bucket (after DeleteRecords).

        Raises:
            StorageError: the PUT failed (the upload pass retries it).
        """
        key = (plog.topic_id, int(plog.partition))
        start = int(plog.log_start_offset)
        if start <= self._log_starts.get(key, 0):
            return
        self.wal.check_fenced()
        try:
            self.bucket.put(layout.log_start_key(*key), layout.encode_log_start(start))
        except Exception as exc:
            raise StorageError(
                f"cannot record the log start in the bucket: {describe(exc)}"
            ) from exc
        self._log_starts[key] = start

    # -- topics ----------------------------------------------------------------------

    def _put_topics(self) -> None:
        """Write the topic metadata to the bucket.

        Raises:
            StorageError: the PUT failed, or this broker is fenced.
        """
        self.wal.check_fenced()
        try:
            self.bucket.put(layout.TOPICS_KEY, topics_doc(self.local.topics()))
        except Exception as exc:
            raise StorageError(
                f"cannot write the topic metadata to the bucket: {describe(exc)}"
            ) from exc

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
        new = _partitions([meta], start)
        assigned: dict[tuple[TopicName, PartitionId], int] = {}
        if self._guard is not None and self._share and not stays_with_writer(meta):
            brokers = self._guard.live()
            first = zlib.crc32(meta.name.encode())
            me = self._config[keys.NODE_ID]
            for key in new:
                owner = brokers[(first + key[1]) % len(brokers)]
                if owner != me:
                    assigned[key] = owner
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
        gone = [
            self._logs.pop((name, p)) for p in range(meta.partitions) if (name, p) in self._logs
        ]
        for plog in gone:
            plog.closed = True
        self.wal.forget(gone)
        self.local.delete_topic(name)
        self._deleted.add(meta.topic_id)
        self._put_topics_or_retry()
        if self._guard is not None:
            self._guard.forget(name)

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
        NotOwnerError: another broker leads it.
        """
        plog = self._logs.get((name, int(partition)))
        if plog is None:
            meta = self.local.topic(name)
            if meta is not None and 0 <= partition < meta.partitions:
                raise NotOwnerError(f"partition {name}-{partition} is led by another broker")
            raise UnknownTopicOrPartitionError(f"unknown topic or partition {name}-{partition}")
        plog.check_committable()
        return plog

    def topic_config(self, name: TopicName) -> ResolvedTopicConfig:
        return self.local.topic_config(name)

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
                gone = [
                    self._logs.pop((name, p))
                    for p in range(mine.partitions)
                    if (name, p) in self._logs
                ]
                for plog in gone:
                    plog.closed = True
                self.wal.forget(gone)
                self.local.delete_topic(name)
                log.info("storage.object.topic_gone topic=%s partitions_closed=%d", name, len(gone))
        for name, theirs in topics.items():
            if self.local.topic(name) != theirs:
                self.local.record_topic(theirs)

    async def release(self, name: TopicName, partition: PartitionId) -> None:
        """Hand the partition over: refuse appends to it (NOT_LEADER_OR_FOLLOWER),
        upload what its WAL objects lack, copy all of it into partition objects, then
        close it and drop its cache. Once this returns the bucket's partition objects
        hold every record of it, so the next leader reads no WAL object of this
        broker's for it; nothing is acknowledged for it here any more.

        Raises:
            UnknownTopicOrPartitionError, NotOwnerError: it is not led here.
            StorageError: an upload failed (it is led here still, and takes appends).
        """
        plog = self.partition(name, partition)
        key = (name, int(partition))
        self._releasing.add(key)
        try:
            await self.wal.sync([plog])
            async with self._uploading:
                self.wal.check_fenced()
                await self._upload_partition(plog)
        except BaseException:
            self._releasing.discard(key)
            raise
        del self._logs[key]
        plog.closed = True
        self.wal.forget([plog])
        self.local.close_partition(name, partition)
        self._releasing.discard(key)
        log.info(
            "storage.object.released partition=%s-%d log_end_offset=%d",
            name, partition, plog.log_end_offset,
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
        them) into a fresh cache directory, and open it, one after the other (those
        opened stay open if a later one fails). A former leader that died must be fenced
        first (:meth:`fence_stream`), so that a WAL object it still had in flight cannot
        land unseen and be taken in later.

        Raises:
            UnknownTopicOrPartitionError: no such topic or partition.
            StorageError: the bucket cannot be read, or the cache written.
        """
        wanted = list(partitions)
        todo: dict[tuple[TopicName, int], tuple[TopicMeta, Key]] = {}
        for name, partition in wanted:
            meta = self.local.topic(name)
            if meta is None or not 0 <= partition < meta.partitions:
                raise UnknownTopicOrPartitionError(f"unknown topic or partition {name}-{partition}")
            if (name, int(partition)) not in self._logs:
                todo[(name, int(partition))] = (meta, (meta.topic_id, int(partition)))
        if todo:
            started = time.monotonic()
            try:
                state = await asyncio.to_thread(
                    BucketState,
                    self.bucket,
                    [key for _, key in todo.values()],
                    self._wal_indexes,
                )
                if self._guard is not None:
                    state = await asyncio.to_thread(self._to_commit_point, state, self._guard)
            except StorageError:
                raise
            except Exception as exc:  # obstore raises its own error classes
                raise StorageError(f"cannot read the bucket to restore: {describe(exc)}") from exc
            for wal_key, entries in state.wal.items():  # deleted here too once covered
                self._wal_pending.setdefault(wal_key, entries)
            for (_, p), (meta, key) in todo.items():
                await self._restore_led(state, meta, PartitionId(p), key, started)
        return [self._logs[(name, int(p))] for name, p in wanted]

    async def _restore_led(
        self, state: BucketState, meta: TopicMeta, partition: PartitionId, key: Key, since: float
    ) -> None:
        name = meta.name
        directory = Path(self.local.log_dir()) / partition_dir_name(name, partition)
        segment_bytes = self.local.topic_config(name).segment_bytes

        def restore() -> tuple[int, bool]:
            shutil.rmtree(directory, ignore_errors=True)  # a cache from an earlier lead
            snapshot = self._restore_snapshot(state, key, 0)
            written = self._fill(
                state, key, directory, 0, snapshot=snapshot, segment_bytes=segment_bytes
            )
            return written, snapshot is not None

        try:
            written, from_snapshot = await asyncio.to_thread(restore)
        except StorageError:
            raise
        except Exception as exc:  # obstore raises its own error classes
            raise StorageError(
                f"cannot restore {name}-{partition} from the bucket: {describe(exc)}"
            ) from exc
        self._parts[key] = state.parts.get(key, [])
        self._log_starts[key] = state.log_starts.get(key, 0)
        self._snapshots[key] = state.snapshots.get(key, [])
        self.local.open_partition(name, partition)
        plog = self._open_partition(meta, partition, state)
        log.info(
            "storage.object.acquired partition=%s-%d log_end_offset=%d bytes=%d "
            "from_snapshot=%s ms=%.0f",
            name, partition, plog.log_end_offset, written, from_snapshot,
            (time.monotonic() - since) * 1000,
        )  # fmt: skip

    async def fence_stream(self, stream: str, epoch: int) -> None:
        """Record that ``epoch`` took over WAL stream ``stream`` (a broker that
        died): its objects of an older epoch at or after the sequence it would use
        next were written after this, by a broker that had lost its lease, and every
        open and :meth:`acquire` ignores them. ``epoch`` must be above every epoch the
        stream was written at.

        Raises:
            StorageError: the bucket cannot be read or written.
        """

        def fence() -> int:
            sequences = [
                named[1]
                for item in self.bucket.list(layout.wal_folder(stream))
                if (named := layout.parse_wal_key(item.key)) is not None and named[0] == stream
            ]
            try:
                floor = layout.decode_wal_floor(self.bucket.get(layout.wal_floor_key(stream)))
            except FileNotFoundError:
                floor = 0
            first = max(max(sequences, default=-1) + 1, floor)
            self.bucket.put(layout.takeover_key(stream, epoch), layout.encode_takeover(first))
            return first

        try:
            first = await asyncio.to_thread(fence)
        except Exception as exc:
            raise StorageError(f"cannot fence WAL stream {stream}: {describe(exc)}") from exc
        self._streams.add(stream)
        log.info(
            "storage.object.stream_fenced stream=%s epoch=%d first_sequence=%d",
            stream, epoch, first,
        )  # fmt: skip

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
            self._background = asyncio.create_task(self._upload_every(), name="floe-s3-upload")

    async def _upload_every(self) -> None:
        """An upload pass at once (WAL objects left by the last run go), then every
        ``storage.s3.upload.interval.ms``, or sooner once :data:`WAL_BACKLOG` more WAL
        objects wait for it."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                await self.upload_partitions()
            except Exception:
                log.exception("storage.object.upload_failed bucket=%s", self.bucket.description)
            due = loop.time() + self._upload_interval_s
            left = self._wal_backlog()
            while (now := loop.time()) < due and self._wal_backlog() - left < WAL_BACKLOG:
                await asyncio.sleep(min(BACKLOG_CHECK_S, due - now))

    def _wal_backlog(self) -> int:
        """WAL objects in the bucket that the upload pass has not emptied yet."""
        return len(self._wal_pending) + len(self.wal.written)

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
        for plog in list(self._logs.values()):
            if not plog.closed:
                try:
                    self.wal.check_fenced()  # each time: a pass outlives a lapsed lease
                except StorageError:
                    return
                async with self._uploading:
                    if not plog.closed:  # handed over meanwhile
                        await self._upload_partition(plog)
        await self._delete_covered_wal()
        for topic_id in list(self._deleted):
            doomed = [o.key for o in self.bucket.list(layout.topic_prefix(topic_id))]
            await asyncio.to_thread(self.bucket.delete, doomed)
            for key in [k for k in self._parts if k[0] == topic_id]:
                del self._parts[key]
            self._deleted.discard(topic_id)

    async def _upload_partition(self, plog: ObjectPartitionLog) -> None:
        key = (plog.topic_id, int(plog.partition))
        objs = self._parts.setdefault(key, [])
        covered = objs[-1].end if objs else 0
        if plog.tiered_start is not None and covered < plog.local.log_start_offset:
            # the cache's retention went past what the objects hold: below it is gone
            plog.tiered_start = None
        target = plog.durable_offset  # only what the WAL holds: it is acknowledged
        start = plog.log_start_offset
        base = max(covered, start)
        while base < target:  # new records only, a piece at a time (merged later)
            read = await self._read_cache(plog, base, target, PIECE_BYTES)
            if read is None:
                break
            data, first, end = read
            obj = PartObject.of(plog.topic_id, int(plog.partition), data, first, end)
            await self.bucket.put_async(obj.key, data)
            objs.append(obj)
            base = end
        await self._merge_small(objs)
        if plog.config.compact:
            await self._mirror_compaction(plog, objs)
        elif self._cache_max_bytes >= 0 and objs:
            await self._upload_snapshot(plog, key, objs[-1].end)
        # retention and DeleteRecords: whole objects below the log start go
        if start > self._log_starts.get(key, 0):
            await asyncio.to_thread(self._put_log_start, plog)
        doomed = [o for o in objs if o.end <= start]
        if doomed:
            await asyncio.to_thread(self.bucket.delete, [o.key for o in doomed])
            for o in doomed:
                objs.remove(o)

    async def _upload_snapshot(self, plog: ObjectPartitionLog, key: Key, covered: int) -> None:
        """Copy the cache's newest producer-state snapshot whose offset the partition
        objects reach into the bucket (a restore after a lost disk starts there), and
        delete the older ones but one."""
        directory = plog.local.directory
        offsets = [o for o in local_snapshot.list_snapshots(directory) if o <= covered]
        uploaded = self._snapshots.setdefault(key, [])
        if not offsets or (uploaded and offsets[-1] <= uploaded[-1]):
            return
        offset = offsets[-1]
        try:
            blob = local_snapshot.snapshot_path(directory, offset).read_bytes()
        except FileNotFoundError:
            return  # replaced by a newer one meanwhile: the next pass
        await self.bucket.put_async(layout.snapshot_key(*key, offset), blob)
        uploaded.append(offset)
        doomed = uploaded[:-2]
        if doomed:
            await asyncio.to_thread(
                self.bucket.delete, [layout.snapshot_key(*key, o) for o in doomed]
            )
            del uploaded[:-2]

    async def _read_cache(
        self, plog: ObjectPartitionLog, start: int, end: int, max_bytes: int
    ) -> tuple[bytes, int, int] | None:
        """Whole batches of ``[start, end)`` from the cache, about ``max_bytes`` at most:
        ``(bytes, first batch's base offset, offset after the last)``; None when there
        are none. Read :data:`READ_CHUNK` at a time, yielding to the event loop in
        between, and joined in a worker thread, so producers are not held up."""
        chunks: list[bytes] = []
        size = 0
        position = start
        while position < end and size < max_bytes:
            chunk = layout.cut_at(plog.local.read(Offset(position), READ_CHUNK, min_one=True), end)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            position = layout.end_offset(chunk)
            await asyncio.sleep(0)
        if not chunks:
            return None
        first = int.from_bytes(chunks[0][:8], "big", signed=True)
        data = await asyncio.to_thread(b"".join, chunks) if len(chunks) > 1 else chunks[0]
        return data, first, position

    async def _merge_small(self, objs: list[PartObject]) -> None:
        """Merge the trailing run of small objects into one once it holds about
        ``storage.s3.object.target.bytes`` or :data:`MERGE_COUNT` objects: read back from
        the bucket and written again in a worker thread (off the event loop). A target of
        at most :data:`PIECE_BYTES` never merges."""
        run = 0
        size = 0
        for obj in reversed(objs):
            if obj.size >= self._target_bytes or size + obj.size > self._target_bytes:
                break
            run += 1
            size += obj.size
        if run < 2 or (size < self._target_bytes - PIECE_BYTES and run < MERGE_COUNT):
            return  # not a full object's worth yet
        small = objs[-run:]
        merged = await asyncio.to_thread(self._merge, small)
        objs[-run:] = [merged]

    def _merge(self, small: list[PartObject]) -> PartObject:
        """Write ``small`` (consecutive objects of one partition) as one object and delete
        them (a worker thread: blocking bucket calls only)."""
        data = b"".join(self.bucket.get(o.key) for o in small)
        first, last = small[0], small[-1]
        parsed = layout.parse_data_key(first.key, 0)
        assert parsed is not None
        topic_id, partition, _ = parsed
        ts = max(o.max_timestamp for o in small)
        merged = PartObject(
            layout.part_key(topic_id, partition, first.base, last.end, ts),
            first.base, last.end, len(data), ts,
        )  # fmt: skip
        self.bucket.put(merged.key, data)
        self.bucket.delete([o.key for o in small if o.key != merged.key])
        return merged

    async def _mirror_compaction(self, plog: ObjectPartitionLog, objs: list[PartObject]) -> None:
        """A compacted topic is compacted in the cache; once the bucket holds more than
        :data:`COMPACTED_RATIO` times what the cache does (and at least
        :data:`COMPACTED_MIN_BYTES` more), its objects are written again from the cache
        and the old ones deleted, so the bucket shrinks with compaction."""
        if not objs or objs[-1].end < plog.durable_offset:
            return  # records still only in WAL objects: next pass
        in_bucket = sum(o.size for o in objs)
        in_cache = plog.size_bytes
        if in_bucket <= COMPACTED_RATIO * in_cache or in_bucket - in_cache < COMPACTED_MIN_BYTES:
            return
        covered = objs[-1].end
        position = max(plog.log_start_offset, objs[0].base)
        fresh: list[PartObject] = []
        while position < covered:
            read = await self._read_cache(plog, position, covered, self._target_bytes)
            if read is None:
                break
            data, base, end = read
            obj = PartObject.of(plog.topic_id, int(plog.partition), data, base, end)
            await self.bucket.put_async(obj.key, data)
            fresh.append(obj)
            position = end
        keep = {o.key for o in fresh}
        await asyncio.to_thread(self.bucket.delete, [o.key for o in objs if o.key not in keep])
        log.info(
            "storage.object.compacted partition=%s-%d bucket_bytes=%d->%d objects=%d->%d",
            plog.topic, plog.partition, in_bucket, sum(o.size for o in fresh), len(objs),
            len(fresh),
        )  # fmt: skip
        objs[:] = fresh

    async def _delete_covered_wal(self) -> None:
        """Delete the WAL objects (of any stream) whose every entry is in partition
        objects, after raising their streams' floors past them."""
        pending = {**self._wal_pending, **self.wal.written}
        doomed = [
            k
            for k, entries in pending.items()
            if self._deletes(k) and all(self._covered(e) for e in entries)
        ]
        if not doomed:
            return
        floors: dict[str, int] = {}
        for key in doomed:
            named = layout.parse_wal_key(key)
            assert named is not None, key
            stream, sequence, _ = named
            floors[stream] = max(floors.get(stream, 0), sequence + 1)
        for stream, floor in sorted(floors.items()):  # first: numbers are never reused
            if floor > self._wal_floors.get(stream, 0):
                await asyncio.to_thread(
                    self.bucket.put, layout.wal_floor_key(stream), layout.encode_wal_floor(floor)
                )
                self._wal_floors[stream] = floor
        await asyncio.to_thread(self.bucket.delete, doomed)
        for key in doomed:
            self._wal_pending.pop(key, None)
            self.wal.written.pop(key, None)

    def _deletes(self, wal_key: str) -> bool:
        """Whether this broker deletes the WAL object once covered: one of its own
        stream's, or of a stream it fenced while that stream's broker is not back
        (a live broker's objects hold partitions this one does not lead)."""
        if self._guard is None:
            return True  # alone: every stream of the bucket is this broker's
        named = layout.parse_wal_key(wal_key)
        if named is None or named[0] not in self._streams:
            return False
        stream = named[0]
        if not self._share or stream == str(self._config[keys.NODE_ID]):
            return True
        return not stream.isdigit() or int(stream) not in self._guard.live()

    def _covered(self, entry: Entry) -> bool:
        key = (entry.topic_id, entry.partition)
        if entry.topic_id in self._deleted or self.local.topic_by_id(entry.topic_id) is None:
            return True
        objs = self._parts.get(key, [])
        in_objects = bool(objs) and objs[-1].end >= entry.end
        return in_objects or entry.end <= self._log_starts.get(key, 0)

    # -- maintenance -----------------------------------------------------------------

    def run_maintenance(self, now_ms: int) -> None:
        """Retention of the objects below each cache start, the cache budget, then the
        cache's own maintenance (which unlinks the evicted segments' files)."""
        self._remote_retention(now_ms)
        self._evict()
        self.local.run_maintenance(now_ms)

    async def maintain(self, now_ms: int) -> None:
        """:meth:`run_maintenance`, the cache's part off the event loop."""
        self._remote_retention(now_ms)
        self._evict()
        await self.local.maintain(now_ms)

    def _remote_retention(self, now_ms: int) -> None:
        """Retention below the cache start, with the local rule (Kafka's): oldest object
        first, while its newest record is older than ``retention.ms`` or the partition
        stays at or above ``retention.bytes`` without it, up to the retention hold. The
        log start moves; the next upload pass deletes the objects and records it."""
        for plog in self._logs.values():
            config = plog.config
            if plog.tiered_start is None or plog.closed or not config.delete:
                continue
            size = plog.size_bytes
            hold = plog.retention_hold
            cached = plog.local.log_start_offset
            start = None
            for obj in plog.remote_objects():
                # an object that also holds cached records stays (the start moves to the
                # cache start); the upload pass deletes it once the start passes its end
                stop = min(obj.end, cached)
                if hold is not None and stop > hold:
                    break
                part = plog.remote_bytes(obj)
                old = config.retention_ms >= 0 and obj.max_timestamp < now_ms - config.retention_ms
                big = config.retention_bytes >= 0 and size - part >= config.retention_bytes
                if not (old or big):
                    break
                size -= part
                start = stop
            if start is not None:
                plog.trim_remote(start)
                log.info(
                    "storage.object.retention partition=%s-%d log_start_offset=%d",
                    plog.topic, plog.partition, plog.log_start_offset,
                )  # fmt: skip

    def _evict(self) -> None:
        """Drop the oldest evictable segments (by their newest record) from the cache
        until it holds at most ``storage.s3.cache.max.bytes``."""
        budget = self._cache_max_bytes
        if budget < 0:
            return
        cached = sum(plog.local.size_bytes for plog in self._logs.values())
        if cached <= budget:
            return
        heap: list[tuple[int, int, ObjectPartitionLog]] = []
        for i, plog in enumerate(self._logs.values()):
            if (age := self._evictable(plog)) is not None:
                heap.append((age, i, plog))
        heapq.heapify(heap)
        evicted = freed = 0
        while cached > budget and heap:
            _, i, plog = heapq.heappop(heap)
            local = plog.local
            size = local.segments[0].size
            if plog.tiered_start is None:
                plog.tiered_start = int(local.log_start_offset)
            try:
                local.drop_oldest_segment(evicted=True)
            except StorageError:
                log.exception(
                    "storage.object.evict_failed partition=%s-%d", plog.topic, plog.partition
                )
                continue
            cached -= size
            evicted += 1
            freed += size
            if (age := self._evictable(plog)) is not None:
                heapq.heappush(heap, (age, i, plog))
        if evicted:
            log.info(
                "storage.object.evicted segments=%d bytes=%d cache_bytes=%d budget=%d",
                evicted, freed, cached, budget,
            )  # fmt: skip
        if cached > budget:
            log.warning(
                "storage.object.cache_over_budget cache_bytes=%d budget=%d (the rest is "
                "not in partition objects yet, compacted, in open transactions, not yet "
                "in a table, or active segments)",
                cached, budget,
            )  # fmt: skip

    def _evictable(self, plog: ObjectPartitionLog) -> int | None:
        """The newest timestamp of ``plog``'s first cached segment when it may leave the
        cache, else None: not the active segment, every record of it in partition
        objects, below the last stable offset (no open transaction in it), already in its
        table (a table topic's retention hold), and not a compacted topic (compaction
        rewrites the cache). Aborted transactions stay in the cache's producer state."""
        local = plog.local
        segments = local.segments
        if plog.closed or local.offline or local.config.compact or len(segments) < 2:
            return None
        seg = segments[0]
        end = seg.next_offset
        objs = self._parts.get((plog.topic_id, int(plog.partition)), [])
        if not objs or objs[0].base > local.log_start_offset or objs[-1].end < end:
            return None
        hold = local.retention_hold
        if local.last_stable_offset < end or (hold is not None and hold < end):
            return None
        return int(seg.max_timestamp)

    def log_dir(self) -> str:
        return self.local.log_dir()

    def close(self) -> None:
        """Upload what is not in the bucket yet, then close the cache.

        Raises:
            StorageError: the final upload failed (the cache keeps the records; the
                next open uploads them).
        """
        if self._background is not None:
            self._background.cancel()
            self._background = None
        self.wal.shutdown()
        try:
            self.wal.upload_all_blocking(self._logs.values())
            if self._meta_dirty:
                self._put_topics()
        except Exception as exc:
            log.error("storage.object.close_upload_failed error=%s", describe(exc))
        finally:
            self.local.close()


def stored_cluster_id(bucket: Bucket) -> str | None:
    """The cluster id recorded in ``bucket``, or None when it has none yet."""
    try:
        return bucket.get(layout.CLUSTER_ID_KEY).decode().strip() or None
    except FileNotFoundError:
        return None


def _tiered_start(objs: list[PartObject], bucket_start: int, cached: int) -> int | None:
    """The log start when the objects hold records below the cache start ``cached``
    without a gap up to it (segments that left the cache before a restart), else None."""
    start = max(bucket_start, objs[0].base) if objs else cached
    if start >= cached:
        return None
    reached = start
    for obj in objs:
        if obj.end <= start:
            continue
        if obj.base > reached:
            return None
        reached = obj.end
        if reached >= cached:
            return start
    return None


def _write_segments(
    directory: Path, chunks: Iterator[memoryview], local_end: int, segment_bytes: int
) -> int:
    """Write ``chunks`` (batches from ``local_end`` on) as segment files after the
    cache's own, a new file past ``segment_bytes``; returns the bytes written.

    Raises:
        StorageError: a chunk overlaps what the cache holds (the bucket and the cache
            disagree: a cache from another cluster).
    """
    written = 0
    out: BinaryIO | None = None
    size = 0
    try:
        for chunk in chunks:
            for piece in layout.batch_runs(chunk, segment_bytes - size, segment_bytes):
                base = int.from_bytes(piece[:8], "big", signed=True)
                if out is None or size + len(piece) > segment_bytes:
                    if out is None:
                        if base < local_end:
                            raise StorageError(
                                f"{directory.name}: the bucket's batch at {base} overlaps the "
                                f"cache, which ends at {local_end}"
                            )
                        _drop_empty_segments(directory, base)
                    else:
                        out.close()
                    out = open(directory / f"{base:020d}.log", "xb")  # noqa: SIM115 - closed below
                    size = 0
                out.write(piece)
                size += len(piece)
                written += len(piece)
    finally:
        if out is not None:
            out.close()
    return written


def _drop_empty_segments(directory: Path, before: int) -> None:
    """Remove empty segments (and their indexes) with a base offset up to ``before``:
    a new partition's empty active segment, replaced by the restored one."""
    for segment in directory.glob("*.log"):
        if segment.stem.isdigit() and int(segment.stem) <= before and segment.stat().st_size == 0:
            for suffix in (".log", ".index", ".timeindex"):
                segment.with_suffix(suffix).unlink(missing_ok=True)


def stays_with_writer(meta: TopicMeta) -> bool:
    """Partitions the writer leads whoever else is live: internal topics', table
    topics' (their coordinators run on the writer and read them) and their dead-letter
    topics' (the coordinators write them)."""
    return meta.internal or any(
        (canonical_name(k) == TABLE_TOPIC_ENABLE.name and v.strip().lower() == "true")
        or (canonical_name(k) == DLQ_SOURCE.name and v.strip() != "")
        for k, v in meta.configs.items()
        if is_table_topic_key(k)
    )


def _partitions(
    topics: Iterable[TopicMeta],
    start: int = 0,
    holds: Callable[[TopicName, PartitionId], bool] | None = None,
) -> list[tuple[TopicName, PartitionId]]:
    """Every partition of ``topics`` from ``start`` on (that ``holds`` says is held
    here), for the write guard."""
    return [
        (m.name, PartitionId(p))
        for m in topics
        for p in range(start, m.partitions)
        if holds is None or holds(m.name, PartitionId(p))
    ]
