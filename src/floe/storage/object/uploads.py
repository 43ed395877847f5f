"""The upload pass: the cache's uploaded records into partition objects, and what that
lets go of in the bucket.

Every ``storage.s3.upload.interval.ms`` (sooner when :data:`WAL_BACKLOG` WAL objects
wait) each partition's records that are in WAL objects (acknowledged) are copied from
the local cache into the partition's own objects, :data:`PIECE_BYTES` at a time; a
trailing run of small objects is merged once it makes about
``storage.s3.object.target.bytes`` (or :data:`MERGE_COUNT` objects). Then:

* a compacted topic's objects are written again from the cache once the bucket holds
  much more than the cache (:data:`COMPACTED_RATIO`), so the bucket shrinks with it;
* otherwise, with a cache budget, the cache's newest producer-state snapshot the
  objects reach goes to the bucket (a takeover, or a restore after a lost disk, starts
  there), and the cache snapshots its producer state again once the objects hold
  ``storage.s3.snapshot.interval.bytes`` after that one;
* objects wholly below the log start are deleted, after the log start is recorded;
* WAL objects whose every entry is in partition objects (or below a log start, or of a
  deleted topic) are deleted, after their streams' floors are raised past them (WAL
  sequence numbers are never reused), and only those of streams this broker deletes;
* a deleted topic's objects are deleted.

In a cluster, a partition whose objects or snapshots changed gets a new manifest (the
objects and snapshots it has now, put as a new object), and the metadata store is
pointed at it at the ownership epoch this broker owns the partition at
(:meth:`~floe.storage.interface.WriteGuard.set_manifests`): that is what a broker
taking the partition over reads instead of listing the bucket. Objects the pass
replaced (merged, rewritten, below the log start, older snapshots) are deleted only
once a manifest that no longer names them is committed, and a WAL object only once
committed manifests cover every entry in it; after a refusal (another broker owns the
partition) nothing of it is deleted: the new owner's restore may name those objects.
The first manifest a broker commits for a partition it took (at open, or at runtime)
also deletes what the partition's listing, taken before that commit, holds that the
manifest does not name (a former owner's objects and manifests no committed manifest
named, or that it had not deleted yet): the commit succeeding proves no other broker
owned the partition when the listing was taken, so none of its objects are among them.

Only acknowledged records are copied (up to the WAL's durable offset), and no object
is deleted before what replaces it is in the bucket. Owned by the broker's event loop;
bucket calls that block run in worker threads.
"""

from __future__ import annotations

import asyncio
import logging
import time
from bisect import bisect_right
from collections.abc import Awaitable, Callable
from pathlib import Path

from floe.storage.interface import NotOwnerError, StorageError, WriteGuard
from floe.storage.local import LocalStore
from floe.storage.local import snapshot as local_snapshot
from floe.storage.object import layout
from floe.storage.object.bucket import Bucket, describe
from floe.storage.object.inventory import Inventory, Manifested
from floe.storage.object.layout import Entry, PartObject
from floe.storage.object.partition import ObjectPartitionLog
from floe.storage.object.state import Key, list_partition_objects
from floe.storage.object.wal import WalWriter
from floe.types import Offset, PartitionId

log = logging.getLogger(__name__)

READ_CHUNK = 1024 * 1024
"""Bytes read from the cache per call by the upload pass (it yields in between)."""
PIECE_BYTES = 4 * 1024 * 1024
"""Largest new partition object the upload pass writes: large PUTs, or the store's work
for them, delay the WAL PUTs acks=all waits for (measured on SeaweedFS: p99 of a 5,000
records/s acks=all producer 524 ms with 64 MiB objects, 49 ms with 4 MiB ones)."""
MERGE_COUNT = 32
"""Small objects of a partition merged into one even before they reach the target size."""
WAL_BACKLOG = 100
"""WAL objects that start an upload pass before ``storage.s3.upload.interval.ms``: a
broker taking over reads each of them (its index, and one entry per partition taken
over: a ranged GET each). Under the failover benchmark's load a member wrote 34 WAL
objects a second; at 500, a takeover read up to 348 entries per partition, 1.1-4.3 s of
a member kill's outage on a busy 2-core host."""
BACKLOG_CHECK_S = 0.5
COMPACTED_RATIO = 2
COMPACTED_MIN_BYTES = 64 * 1024
"""A compacted partition's objects are rewritten from the cache when they hold more than
COMPACTED_RATIO times its cached bytes, and COMPACTED_MIN_BYTES more."""


class Uploader:
    """The upload pass of one store, a partition at a time (the store holds each
    partition's turn, so that a hand-over's final upload and the pass never overlap).
    It keeps the store's :class:`~.inventory.Inventory` current with what it writes and
    deletes. Owned by the broker's event loop; it holds no state of its own."""

    def __init__(
        self,
        bucket: Bucket,
        wal: WalWriter,
        local: LocalStore,
        held: Inventory,
        *,
        guard: WriteGuard | None,
        stream: str,
        target_bytes: int,
        bounded: bool,
        snapshot_bytes: int,
    ) -> None:
        """``stream``: this broker's WAL stream; ``bounded``: the cache has a budget
        (``storage.s3.cache.max.bytes``), so producer-state snapshots go to the bucket,
        one per ``snapshot_bytes`` of partition objects
        (``storage.s3.snapshot.interval.bytes``)."""
        self.bucket = bucket
        self.wal = wal
        self.local = local
        self._held = held
        self._guard = guard
        self._stream = stream
        self._target_bytes = target_bytes
        self._bounded = bounded
        self._snapshot_bytes = snapshot_bytes
        self._elsewhere: dict[Key, tuple[str, int]] = {}
        """Partitions another broker leads, with entries in WAL objects this one
        deletes: the last committed manifest read of each and where its objects end."""

    async def run_every(
        self, upload_pass: Callable[[], Awaitable[None]], interval_s: float
    ) -> None:
        """``upload_pass`` at once (WAL objects left by the last run go), then every
        ``interval_s`` (``storage.s3.upload.interval.ms``), or sooner once
        :data:`WAL_BACKLOG` more WAL objects wait for it; until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                await upload_pass()
            except Exception:
                log.exception("storage.object.upload_failed bucket=%s", self.bucket.description)
            due = loop.time() + interval_s
            left = self._backlog()
            while (now := loop.time()) < due and self._backlog() - left < WAL_BACKLOG:
                await asyncio.sleep(min(BACKLOG_CHECK_S, due - now))

    def _backlog(self) -> int:
        """WAL objects in the bucket that the upload pass has not emptied yet."""
        return len(self._held.wal_pending) + len(self.wal.written)

    def put_log_start(self, plog: ObjectPartitionLog) -> None:
        """Record ``plog``'s log start in the bucket (after DeleteRecords).

        Raises:
            StorageError: the PUT failed (the upload pass retries it).
        """
        key = (plog.topic_id, int(plog.partition))
        start = int(plog.log_start_offset)
        if start <= self._held.log_starts.get(key, 0):
            return
        self.wal.check_fenced()
        try:
            self.bucket.put(layout.log_start_key(*key), layout.encode_log_start(start))
        except Exception as exc:
            raise StorageError(
                f"cannot record the log start in the bucket: {describe(exc)}"
            ) from exc
        self._held.log_starts[key] = start

    async def delete_topics(self) -> None:
        """Delete every object of the topics deleted since the last pass."""
        for topic_id in list(self._held.deleted):
            doomed = [o.key for o in self.bucket.list(layout.topic_prefix(topic_id))]
            await asyncio.to_thread(self.bucket.delete, doomed)
            for key in [k for k in self._held.parts if k[0] == topic_id]:
                del self._held.parts[key]
            self._held.deleted.discard(topic_id)

    async def upload_pass(self, logs: list[ObjectPartitionLog], lock: asyncio.Lock) -> None:
        """One pass: each partition of ``logs`` still open, under ``lock`` (held while a
        partition's records are copied), then the WAL objects they all cover and the
        deleted topics' objects. A partition's failure ends its turn only; a fenced WAL
        stream (another broker owns the prefix, or the lease lapsed) ends the pass,
        checked before each partition: a pass outlives a lapsed lease."""
        for plog in logs:
            if plog.closed:
                continue
            try:
                self.wal.check_fenced()
            except StorageError:
                return
            async with lock:
                if not plog.closed:  # handed over meanwhile
                    await self._upload_one(plog)
        await self.delete_covered_wal(
            {(plog.topic_id, int(plog.partition)) for plog in logs if not plog.closed}
        )
        await self.delete_topics()

    async def _upload_one(self, plog: ObjectPartitionLog) -> None:
        """:meth:`upload`, a failure logged (the next pass tries again)."""
        try:
            await self.upload(plog)
        except Exception as exc:
            log.warning(
                "storage.object.partition_upload_failed partition=%s-%d error=%s",
                plog.topic, plog.partition, describe(exc),
            )  # fmt: skip

    async def upload(self, plog: ObjectPartitionLog, *, merge: bool = True) -> dict[str, float]:
        """Copy ``plog``'s records the WAL holds into its partition objects, merge small
        ones (unless ``merge`` is False: a handover's release, during which appends are
        refused, leaves that to the next owner's pass), mirror compaction or upload a
        producer-state snapshot, then delete the objects below its log start and record
        the log start. A merge that finds an object gone (another broker's merge
        replaced it) lists the partition's objects again and merges at the next pass.
        Returns the milliseconds of each step (``copy``, ``merge``, ``snapshot``,
        ``manifest``, ``delete``): what a release spent (``storage.object.released``).

        Raises:
            NotOwnerError: the partition is fenced here (another broker owns it now: no
                object of it is written or deleted).
            Exception: a bucket call failed (this partition's turn ends).
        """
        plog.check_committable()  # a partition taken over: its objects are not ours
        key = (plog.topic_id, int(plog.partition))
        objs = self._held.parts.setdefault(key, [])
        covered = objs[-1].end if objs else 0
        if plog.tiered_start is not None and covered < plog.local.log_start_offset:
            # the cache's retention went past what the objects hold: below it is gone
            plog.tiered_start = None
        target = plog.durable_offset  # only what the WAL holds: it is acknowledged
        start = plog.log_start_offset
        doomed = self._held.doomed.setdefault(key, [])
        steps = _Steps()
        # new records only, a piece at a time (merged later)
        await self._copy(plog, max(covered, start), target, PIECE_BYTES, objs)
        steps.end("copy")
        if merge:
            doomed += await self._merge_small(objs)
        steps.end("merge")
        if plog.config.compact:
            doomed += await self._mirror_compaction(plog, objs)
        elif self._bounded and objs:
            doomed += await self._upload_snapshot(plog, key, objs)
        steps.end("snapshot")
        # retention and DeleteRecords: whole objects below the log start go
        if start > self._held.log_starts.get(key, 0):
            await asyncio.to_thread(self.put_log_start, plog)
        below = [o for o in objs if o.end <= start]
        for o in below:
            objs.remove(o)
        doomed += [o.key for o in below]
        doomed += await self._commit_manifest(plog, key, objs)
        steps.end("manifest")
        named = self._named(key, objs)
        gone = [k for k in doomed if k not in named]  # (a key written again since)
        if gone:
            await asyncio.to_thread(self.bucket.delete, gone)
        doomed.clear()
        steps.end("delete")
        return steps.ms

    async def _commit_manifest(
        self, plog: ObjectPartitionLog, key: Key, objs: list[PartObject]
    ) -> list[str]:
        """In a cluster, when the partition's objects or snapshots changed since its last
        committed manifest, put a new one and point the metadata store at it; returns
        the manifests it replaces for good (all but the last committed one).

        Raises:
            NotOwnerError: the store refused (another broker owns the partition now):
                nothing the pass replaced may be deleted.
            StorageError: the manifest could not be put or committed (tried again by
                the next pass; nothing replaced is deleted meanwhile).
        """
        if self._guard is None:
            return []
        snapshots = tuple(self._held.snapshots.get(key, ()))
        parts = tuple(o.key for o in objs)
        last = self._held.manifested.get(key)
        before = (last.parts, last.snapshots) if last is not None else ((), ())
        if before == (parts, snapshots):
            return []  # unchanged, or empty and never named: a listing finds nothing too
        name = layout.manifest_key(*key, time.time_ns(), self._stream)
        partition = (plog.topic, plog.partition)
        try:
            listed = None
            if key not in self._held.swept:  # listed before the commit: see the module
                listed = await asyncio.to_thread(self._listed, key)
            await self.bucket.put_async(name, layout.encode_manifest(objs, list(snapshots)))
            done = await asyncio.wrap_future(self._guard.set_manifests({partition: name}))
        except Exception as exc:  # FloeError; obstore raises its own error classes
            raise StorageError(f"cannot commit the manifest {name}: {describe(exc)}") from exc
        if not done.get(partition):
            self._held.doomed.pop(key, None)  # the new owner's restore may name them
            raise NotOwnerError(f"partition {plog.topic}-{plog.partition}: manifest refused")
        self._held.manifested[key] = Manifested(name, parts, snapshots, objs[-1].end if objs else 0)
        replaced = [last.key] if last else []
        if listed is not None:
            self._held.swept.add(key)
            known = {name, *self._named(key, objs), *replaced, *self._held.doomed.get(key, ())}
            unnamed = [k for k in listed if k not in known]
            if unnamed:
                log.info(
                    "storage.object.unnamed_deleted partition=%s-%d objects=%d (named by "
                    "no committed manifest: a former owner's leftovers)",
                    plog.topic, plog.partition, len(unnamed),
                )  # fmt: skip
            replaced += unnamed
        return replaced

    def _named(self, key: Key, objs: list[PartObject]) -> set[str]:
        """The keys of the partition's objects ``objs`` and of its snapshots: what its
        manifest names, kept."""
        snapshots = self._held.snapshots.get(key, ())
        return {o.key for o in objs} | {layout.snapshot_key(*key, o) for o in snapshots}

    def _listed(self, key: Key) -> list[str]:
        """The keys of the partition's objects, snapshots and manifests in the bucket
        (not its log start)."""
        return [
            item.key
            for item in self.bucket.list(layout.partition_prefix(*key))
            if (parsed := layout.parse_data_key(item.key, item.size)) is not None
            and parsed[2] is not None
        ]

    async def _upload_snapshot(
        self, plog: ObjectPartitionLog, key: Key, objs: list[PartObject]
    ) -> list[str]:
        """Copy the cache's newest producer-state snapshot whose offset the partition
        objects reach into the bucket (a takeover, or a restore after a lost disk, starts
        there), and delete the older ones but one. Then, once the objects hold
        ``snapshot_bytes`` after the newest snapshot in the bucket and no newer one waits
        in the cache, snapshot the cache's producer state at its log end: a later pass
        puts it, once the objects reach it (a segment's roll alone, every
        ``segment.bytes``, left a takeover copying up to a whole segment). Returns the
        keys of the snapshots it replaced."""
        covered = objs[-1].end
        directory = plog.local.directory
        cached = local_snapshot.list_snapshots(directory)
        offsets = [o for o in cached if o <= covered]
        uploaded = self._held.snapshots.setdefault(key, [])
        replaced: list[str] = []
        if offsets and not (uploaded and offsets[-1] <= uploaded[-1]):
            replaced = await self._put_snapshot(key, directory, offsets[-1], uploaded)
        if cached and (cached[-1] > covered or cached[-1] >= plog.log_end_offset):
            return replaced  # a snapshot waits for the objects to reach it, or nothing new
        newest = uploaded[-1] if uploaded else 0
        first = max(bisect_right(objs, newest, key=lambda o: o.base) - 1, 0)
        if sum(o.size for o in objs[first:]) >= self._snapshot_bytes:
            plog.local.take_snapshot()
        return replaced

    async def _put_snapshot(
        self, key: Key, directory: Path, offset: int, uploaded: list[int]
    ) -> list[str]:
        """Put the cache's snapshot at ``offset``; returns the keys of the older ones but
        one, which it drops from ``uploaded``."""
        try:
            blob = local_snapshot.snapshot_path(directory, offset).read_bytes()
        except FileNotFoundError:
            return []  # replaced by a newer one meanwhile: the next pass
        await self.bucket.put_async(layout.snapshot_key(*key, offset), blob)
        uploaded.append(offset)
        replaced = [layout.snapshot_key(*key, o) for o in uploaded[:-2]]
        del uploaded[:-2]
        return replaced

    async def _copy(
        self, plog: ObjectPartitionLog, start: int, end: int, max_bytes: int, into: list[PartObject]
    ) -> None:
        """Copy the cache's batches of ``[start, end)`` into new partition objects of
        about ``max_bytes`` each, appended to ``into`` as each is in the bucket."""
        position = start
        while position < end:
            read = await self._read_cache(plog, position, end, max_bytes)
            if read is None:
                break
            data, first, stop = read
            obj = PartObject.of(plog.topic_id, int(plog.partition), data, first, stop)
            await self.bucket.put_async(obj.key, data)
            into.append(obj)
            position = stop

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

    async def _merge_small(self, objs: list[PartObject]) -> list[str]:
        """Merge the trailing run of small objects into one once it holds about
        ``storage.s3.object.target.bytes`` or :data:`MERGE_COUNT` objects: read back from
        the bucket and written again in a worker thread (off the event loop). A target of
        at most :data:`PIECE_BYTES` never merges. Returns the keys of the objects merged
        (deleted once the partition's manifest no longer names them)."""
        run = 0
        size = 0
        for obj in reversed(objs):
            if obj.size >= self._target_bytes or size + obj.size > self._target_bytes:
                break
            run += 1
            size += obj.size
        if run < 2 or (size < self._target_bytes - PIECE_BYTES and run < MERGE_COUNT):
            return []  # not a full object's worth yet
        small = objs[-run:]
        try:
            merged = await asyncio.to_thread(self._merge, small)
        except FileNotFoundError as exc:  # another broker's merge replaced them
            key = small[0].key
            parsed = layout.parse_data_key(key, 0)
            assert parsed is not None
            objs[:] = await asyncio.to_thread(
                list_partition_objects, self.bucket, (parsed[0], parsed[1])
            )
            log.warning(
                "storage.object.listed_again partition=%s-%d reason=object_gone error=%s",
                parsed[0], parsed[1], describe(exc).split(":", 1)[0],
            )  # fmt: skip
            return []
        objs[-run:] = [merged]
        return [o.key for o in small if o.key != merged.key]

    def _merge(self, small: list[PartObject]) -> PartObject:
        """Write ``small`` (consecutive objects of one partition) as one object (a worker
        thread: blocking bucket calls only)."""
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
        return merged

    async def _mirror_compaction(
        self, plog: ObjectPartitionLog, objs: list[PartObject]
    ) -> list[str]:
        """A compacted topic is compacted in the cache; once the bucket holds more than
        :data:`COMPACTED_RATIO` times what the cache does (and at least
        :data:`COMPACTED_MIN_BYTES` more), its objects are written again from the cache
        and the old ones deleted, so the bucket shrinks with compaction. Returns the
        keys of the old ones."""
        if not objs or objs[-1].end < plog.durable_offset:
            return []  # records still only in WAL objects: next pass
        in_bucket = sum(o.size for o in objs)
        in_cache = plog.size_bytes
        if in_bucket <= COMPACTED_RATIO * in_cache or in_bucket - in_cache < COMPACTED_MIN_BYTES:
            return []
        covered = objs[-1].end
        fresh: list[PartObject] = []
        start = max(plog.log_start_offset, objs[0].base)
        await self._copy(plog, start, covered, self._target_bytes, fresh)
        keep = {o.key for o in fresh}
        replaced = [o.key for o in objs if o.key not in keep]
        log.info(
            "storage.object.compacted partition=%s-%d bucket_bytes=%d->%d objects=%d->%d",
            plog.topic, plog.partition, in_bucket, sum(o.size for o in fresh), len(objs),
            len(fresh),
        )  # fmt: skip
        objs[:] = fresh
        return replaced

    async def delete_covered_wal(self, led: set[Key]) -> None:
        """Delete the WAL objects (of any stream) whose every entry is in partition
        objects, after raising their streams' floors past them. Entries of partitions
        another broker leads (``led``: those led here) are covered by that broker's
        manifests, read again when the metadata store names a newer one."""
        pending = {**self._held.wal_pending, **self.wal.written}
        deletable = {k: entries for k, entries in pending.items() if self._deletes(k)}
        elsewhere = {
            (e.topic_id, e.partition)
            for entries in deletable.values()
            for e in entries
            if (e.topic_id, e.partition) not in led and not self._covered(e)
        }
        if elsewhere:
            await self._read_newer_manifests(elsewhere)
        doomed = [k for k, entries in deletable.items() if all(self._covered(e) for e in entries)]
        if not doomed:
            return
        floors: dict[str, int] = {}
        for key in doomed:
            named = layout.parse_wal_key(key)
            assert named is not None, key
            stream, sequence, _ = named
            floors[stream] = max(floors.get(stream, 0), sequence + 1)
        for stream, floor in sorted(floors.items()):  # first: numbers are never reused
            if floor > self._held.wal_floors.get(stream, 0):
                await asyncio.to_thread(
                    self.bucket.put, layout.wal_floor_key(stream), layout.encode_wal_floor(floor)
                )
                self._held.wal_floors[stream] = floor
        await asyncio.to_thread(self.bucket.delete, doomed)
        for key in doomed:
            self._held.wal_pending.pop(key, None)
            self.wal.written.pop(key, None)

    async def _read_newer_manifests(self, keys: set[Key]) -> None:
        """Where each partition of ``keys`` (led by another broker) is covered up to:
        the end of the objects its committed manifest names, when the metadata store
        names one not read yet (:attr:`_elsewhere`). A manifest replaced meanwhile is
        read at a later pass; a store or bucket failure leaves the WAL objects for the
        next pass."""
        if self._guard is None:
            return
        try:
            pointers = await asyncio.to_thread(self._guard.manifests)
        except Exception as exc:  # FloeError: the store did not answer
            log.info("storage.object.manifests_unread error=%s (next pass)", describe(exc))
            return
        for key in keys:
            meta = self.local.topic_by_id(key[0])
            name = pointers.get((meta.name, PartitionId(key[1]))) if meta is not None else None
            if name is None or not name.startswith(layout.partition_prefix(*key)):
                continue  # none committed yet, or one of a topic deleted since
            if self._elsewhere.get(key, ("", 0))[0] == name:
                continue
            try:
                blob = await asyncio.to_thread(self.bucket.get, name)
                parts, _ = layout.decode_manifest(blob, *key)
            except FileNotFoundError:
                continue
            except Exception as exc:  # obstore raises its own error classes
                log.info("storage.object.manifest_unread key=%s error=%s", name, describe(exc))
                continue
            self._elsewhere[key] = (name, parts[-1].end if parts else 0)

    def _deletes(self, wal_key: str) -> bool:
        """Whether this broker deletes the WAL object once covered: one of its own
        stream's, or of a stream it fenced while that stream's broker is not back
        (a live broker's objects hold partitions this one does not lead)."""
        if self._guard is None:
            return True  # alone: every stream of the bucket is this broker's
        named = layout.parse_wal_key(wal_key)
        if named is None or named[0] not in self._held.streams:
            return False
        stream = named[0]
        if not self._guard.share or stream == self._stream:
            return True
        return not stream.isdigit() or int(stream) not in self._guard.live()

    def _covered(self, entry: Entry) -> bool:
        """Whether partition objects hold ``entry``'s records: objects a committed
        manifest names (in a cluster, once the partition has one: a broker taking it
        over reads that manifest, not the bucket), else the objects known."""
        key = (entry.topic_id, entry.partition)
        if entry.topic_id in self._held.deleted or self.local.topic_by_id(entry.topic_id) is None:
            return True
        manifested = self._held.manifested.get(key)
        if manifested is not None:
            end = manifested.end
        else:
            objs = self._held.parts.get(key, [])
            end = objs[-1].end if objs else 0
        end = max(end, self._elsewhere.get(key, ("", 0))[1])
        return entry.end <= end or entry.end <= self._held.log_starts.get(key, 0)


class _Steps:
    """The milliseconds each step of an upload took, as it ends them in turn."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}
        self._at = time.monotonic()

    def end(self, step: str) -> None:
        now = time.monotonic()
        self.ms[step] = (now - self._at) * 1000
        self._at = now
