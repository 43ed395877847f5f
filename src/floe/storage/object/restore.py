"""Bringing a partition's cache up to the bucket, and fencing a dead broker's WAL stream.

At open the cache is made to agree with the bucket (:func:`adopt_topics`,
:func:`drop_stale_partitions`), read up to the metadata store's committed ends in a
cluster (:func:`to_commit_point`), and a partition whose cache is behind the bucket gets
the missing batches (:func:`restore_partitions`); a partition taken over at runtime is
restored into a fresh directory (:func:`restore_led`). Invariants:

* restored batches are written as new segments after the cache's own, cut at the
  topic's ``segment.bytes``, and never overlap what the cache holds (the local recovery
  then indexes them);
* with a cache budget, a restore starts at the newest usable producer-state snapshot
  in the bucket, in a directory that replaces the cache's only once it is complete;
* when the bucket holds no record past the cache but a later log start, the log starts
  there, so that no offset is given out twice.

Bucket reads and file writes here block: the async functions run them in worker
threads, the others run at open, before the event loop serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import logging
import shutil
from collections.abc import Collection, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

from floe.storage.interface import StorageError, TopicMeta, WriteGuard
from floe.storage.local import LocalStore
from floe.storage.local import snapshot as local_snapshot
from floe.storage.local.meta import TopicMetadata, save_topics
from floe.storage.local.store import partition_dir_name
from floe.storage.object import layout, owner_mark
from floe.storage.object.bucket import Bucket, describe
from floe.storage.object.state import (
    READERS,
    STALE_READS,
    BucketState,
    Key,
    WalIndexes,
    read_log_start,
)
from floe.storage.producer_state import decode_snapshot
from floe.types import PartitionId, TopicName

log = logging.getLogger(__name__)


def to_commit_point(
    bucket: Bucket,
    state: BucketState,
    guard: WriteGuard,
    indexes: WalIndexes,
    *,
    restored: Collection[Key],
    only: Collection[Key] | None = None,
) -> BucketState:
    """``state`` read up to each partition's committed end in the metadata store,
    read now that this broker owns the partitions it restores (``restored``: no former
    owner commits after this). A WAL object of one of them committed after the bucket
    was listed (a broker paused while this one listed it) is found by listing the
    bucket again (``only``, ``indexes``: see :class:`BucketState`). Other partitions'
    ends move on as their owners write: they are not waited for.

    Raises:
        StorageError: the bucket still lacks records the metadata store says are
            committed.
    """
    wanted = set(restored)
    for attempt in range(STALE_READS):
        state.commit_point(guard.committed(), _epoch_ends(state, guard, wanted))
        short = [k for k, end in state.committed.items() if k in wanted and state.end(k) < end]
        if not short:
            return state
        log.info(
            "storage.object.listed_again partitions=%d reason=committed_beyond_listing",
            len(short),
        )
        if attempt + 1 < STALE_READS:
            state = BucketState(bucket, only, indexes, guard.manifests)
    raise StorageError(
        f"the bucket lacks committed records of {len(short)} partitions "
        f"(first: {short[0]}): objects deleted by hand?"
    )


def reuse_stage_read(
    bucket: Bucket, state: BucketState, guard: WriteGuard, ends: Mapping[Key, int]
) -> BucketState | None:
    """``state``, read before this broker claimed the partitions of ``ends`` (a stage's
    read, each partition with the end its staged copy reached), brought to the commit
    point now, when it holds what a read now would: for each partition, the metadata
    store names the manifest ``state`` read (or none, as ``state`` read none), its
    committed end after the claim is where ``state`` ends, and its log start is the
    same. Their former owner commits nothing after the claim, so a takeover may then
    open them from it without reading the bucket again; None otherwise. ``state``
    itself is left as it was (the stages of other partitions may still read from it).
    Blocking: call it from a worker thread.
    """
    keys = list(ends)
    pointers = state.manifest_keys()
    if any(pointers.get(k) != state.manifests.get(k) for k in keys):  # None: never uploaded
        return None
    now = copy.copy(state)  # its own commit point; what it read is shared, never changed
    now.commit_point(guard.committed(), _epoch_ends(now, guard, keys))
    if any(now.end(k) != end or now.committed.get(k, 0) != end for k, end in ends.items()):
        return None
    with ThreadPoolExecutor(READERS, thread_name_prefix="floe-s3-start") as pool:
        starts = list(pool.map(functools.partial(read_log_start, bucket), keys))
    if any(start != now.log_starts.get(k) for k, start in zip(keys, starts, strict=True)):
        return None
    return now


def _epoch_ends(
    state: BucketState, guard: WriteGuard, wanted: Collection[Key]
) -> dict[tuple[TopicName, PartitionId], dict[int, int]]:
    """Where the ownership epochs ended that the ``wanted`` partitions' WAL entries
    were written at, but the current one (still going on)."""
    names = {meta.topic_id: name for name, meta in (state.topics or {}).items()}
    asked: dict[tuple[TopicName, PartitionId], set[int]] = {}
    for key in wanted:
        if (name := names.get(key[0])) is None:
            continue
        partition = PartitionId(key[1])
        current = guard.ownership(name, partition)
        epochs = state.wal_epochs(key) - ({current[1]} if current else set())
        if epochs:
            asked[(name, partition)] = epochs
    return guard.epoch_ends(asked) if asked else {}


def drop_stale_partitions(data_dir: Path, state: BucketState, guard: WriteGuard, me: int) -> None:
    """In a cluster, drop the cache of every partition that is not this broker's at
    the ownership epoch the cache was last written under (:mod:`owner_mark`): another
    broker may have owned it since, and given the offsets of records this one appended
    but never committed to other records. Those partitions are restored from the
    bucket, as after a lost disk."""
    logs_dir = data_dir / "logs"
    dropped: list[str] = []
    for name, meta in (state.topics or {}).items():
        for p in range(meta.partitions):
            directory = logs_dir / partition_dir_name(name, p)
            if not directory.exists():
                continue
            mark = owner_mark.read(directory)
            if mark is None or mark[0] != me or mark != guard.ownership(name, PartitionId(p)):
                shutil.rmtree(directory)
                dropped.append(directory.name)
    if dropped:
        log.warning(
            "storage.object.stale_cache_dropped partitions=%d first=%s (another broker "
            "may have written them since this cache was: restored from the bucket)",
            len(dropped), dropped[0],
        )  # fmt: skip


def mark_owned(data_dir: Path, local: LocalStore, guard: WriteGuard, me: int) -> None:
    """Record, in the cache of every partition this broker leads after its open, the
    ownership epoch it leads it at (see :func:`drop_stale_partitions`)."""
    held = [
        (meta.name, PartitionId(p))
        for meta in local.topics().values()
        for p in range(meta.partitions)
        if local.holds(meta.name, PartitionId(p))
    ]
    for (name, p), epoch in guard.epochs(held).result().items():
        owner_mark.write(data_dir / "logs" / partition_dir_name(name, p), me, epoch)


def adopt_topics(data_dir: Path, state: BucketState) -> None:
    """Make the cache's topic metadata the bucket's (when the bucket has any): a
    cached partition of a topic the bucket does not know, or knows under another
    id, is removed."""
    if state.topics is None:
        return
    meta_dir = data_dir / "meta"
    meta_dir.mkdir(parents=True, exist_ok=True)
    cached = TopicMetadata(meta_dir).topics
    logs_dir = data_dir / "logs"
    for name, meta in cached.items():
        theirs = state.topics.get(name)
        if theirs is None or theirs.topic_id != meta.topic_id:
            for p in range(meta.partitions):
                shutil.rmtree(logs_dir / partition_dir_name(name, p), ignore_errors=True)
            log.info("storage.object.cache_dropped topic=%s reason=not_in_bucket", name)
    (meta_dir / "topics.log").unlink(missing_ok=True)
    save_topics(meta_dir / "topics.json", state.topics)


def read_at_open(
    bucket: Bucket,
    indexes: WalIndexes,
    guard: WriteGuard | None,
    *,
    partitions: Collection[Key] | None = None,
) -> BucketState:
    """What the bucket holds, read at open (see :class:`BucketState`): the data
    objects of ``partitions`` alone (None: every partition's), in a cluster from the
    manifests the metadata store names.

    Raises:
        StorageError: the bucket (or the metadata store) cannot be read.
    """
    with _reading(bucket):
        return BucketState(bucket, partitions, indexes, None if guard is None else guard.manifests)


def read_partitions_at_open(bucket: Bucket, state: BucketState, keys: Iterable[Key]) -> None:
    """Read the data objects of the partitions ``keys`` into ``state`` (one read at
    open without them: :func:`read_at_open`).

    Raises:
        StorageError: the bucket cannot be read.
    """
    with _reading(bucket):
        state.read_partitions(bucket, keys)


@contextlib.contextmanager
def _reading(bucket: Bucket) -> Iterator[None]:
    """Any error of a read of ``bucket`` inside, as a StorageError."""
    try:
        yield
    except (OSError, Exception) as exc:  # obstore raises its own error classes
        raise StorageError(f"cannot read the bucket {bucket.description}: {describe(exc)}") from exc


async def read_for_takeover(
    bucket: Bucket,
    keys: list[Key],
    guard: WriteGuard | None,
    indexes: WalIndexes,
) -> BucketState:
    """What the bucket holds of the partitions ``keys`` taken over at runtime (and every
    WAL stream), up to their committed ends in a cluster; read in worker threads.

    Raises:
        StorageError: the bucket cannot be read, or lacks committed records.
    """
    try:
        state = await asyncio.to_thread(
            BucketState, bucket, keys, indexes, None if guard is None else guard.manifests
        )
        if guard is not None:
            state = await asyncio.to_thread(
                functools.partial(to_commit_point, restored=keys, only=keys),
                bucket, state, guard, indexes,
            )  # fmt: skip
    except StorageError:
        raise
    except Exception as exc:  # obstore raises its own error classes
        raise StorageError(f"cannot read the bucket to restore: {describe(exc)}") from exc
    return state


RESTORERS = 4
"""Partitions restored at once at open (each reads the bucket ahead, see
:meth:`BucketState.read_from`): their bucket reads and fsyncs overlap."""


def restore_partitions(
    local: LocalStore,
    bucket: Bucket,
    state: BucketState,
    wanted: Iterable[tuple[TopicMeta, PartitionId]],
    *,
    bounded: bool,
) -> list[tuple[TopicName, PartitionId]]:
    """Write the batches of the ``wanted`` partitions the cache lacks as new segments
    after their own (cut at the topic's ``segment.bytes``, so that retention still
    deletes whole segments), :data:`RESTORERS` partitions at a time, and reopen each so
    that the local recovery indexes them; returns those that got any.

    With a cache budget (``bounded``), a partition whose bucket holds a producer-state
    snapshot after the cache's end is restored from the newest one on, in a new
    directory that replaces the cache's (the records below it stay in the bucket, read
    from there); else from the cache end.

    Raises:
        StorageError: a partition cannot be restored or opened again, or was restored
            short of what the bucket holds (every other one is opened again first).
        Exception: the bucket's own errors.
    """
    behind = []
    for meta, p in wanted:
        plog = local.partition(meta.name, p)
        if state.end((meta.topic_id, int(p))) > plog.log_end_offset:
            size = local.topic_config(meta.name).segment_bytes
            behind.append((meta, p, plog.directory, size, local.close_to_change(meta.name, p)))

    def fill(meta: TopicMeta, p: PartitionId, directory: Path, size: int, local_end: int
             ) -> tuple[tuple[int, bytes] | None, int]:  # fmt: skip
        key = (meta.topic_id, int(p))
        snapshot = _restore_snapshot(bucket, state, key, local_end, bounded=bounded)
        written = _fill(
            bucket, state, key, directory, local_end, snapshot=snapshot, segment_bytes=size
        )
        return snapshot, written

    with ThreadPoolExecutor(RESTORERS, thread_name_prefix="floe-restore") as pool:
        filling = [pool.submit(fill, *item) for item in behind]
    restored: list[tuple[TopicName, PartitionId]] = []
    failure: BaseException | None = None
    for (meta, p, _, _, local_end), filled in zip(behind, filling, strict=True):
        reopened = local.open_changed(meta.name, p, local_end)  # whatever the fill did
        if (failure := failure or filled.exception()) is not None:
            continue
        reaches = state.end((meta.topic_id, int(p)))
        failure = cut_short(meta.name, p, reopened.log_end_offset, reaches)
        if failure is not None:
            continue
        snapshot, written = filled.result()
        if reopened.log_end_offset <= local_end and snapshot is None:
            continue
        restored.append((meta.name, p))
        log.info(
            "storage.object.restored partition=%s-%d from=%d to=%d bytes=%d from_snapshot=%s",
            meta.name, p, snapshot[0] if snapshot else local_end, reopened.log_end_offset,
            written, snapshot is not None,
        )  # fmt: skip
    if failure is not None:
        raise failure
    return restored


def cut_short(
    name: TopicName, partition: int, restored_end: int, reaches: int
) -> StorageError | None:
    """The error of a partition restored up to ``restored_end``, short of the
    ``reaches`` the bucket holds (the local recovery cut it where the bucket's objects
    disagree); None when it reaches it."""
    if restored_end >= reaches:
        return None
    return StorageError(
        f"{name}-{partition} restored up to offset {restored_end} of the {reaches} the "
        "bucket holds (its objects disagree at that offset): not served, rather than give "
        "acknowledged records' offsets away"
    )


async def restore_led(
    bucket: Bucket,
    state: BucketState,
    key: Key,
    directory: Path,
    what: str,
    *,
    segment_bytes: int,
    bounded: bool,
) -> tuple[int, bool]:
    """Restore partition ``key`` (``what``, for errors) whole into ``directory``, not
    open in the cache, in a worker thread (a cache left from an earlier lead is removed
    first), from the newest usable producer-state snapshot on with a cache budget
    (``bounded``): the bytes written, and whether it started at a snapshot.

    Raises:
        StorageError: the bucket cannot be read, or the cache written.
    """

    def restore() -> tuple[int, bool]:
        shutil.rmtree(directory, ignore_errors=True)  # a cache from an earlier lead
        snapshot = _restore_snapshot(bucket, state, key, 0, bounded=bounded)
        written = _fill(
            bucket, state, key, directory, 0, snapshot=snapshot, segment_bytes=segment_bytes
        )
        return written, snapshot is not None

    try:
        return await asyncio.to_thread(restore)
    except StorageError:
        raise
    except Exception as exc:  # obstore raises its own error classes
        raise StorageError(f"cannot restore {what} from the bucket: {describe(exc)}") from exc


def _fill(
    bucket: Bucket,
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
    start at that log start, so that no offset is given out twice."""
    start, target = local_end, directory
    if snapshot is not None:
        start, blob = snapshot
        target = directory.with_name(directory.name + ".restoring")
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        local_snapshot.snapshot_path(target, start).write_bytes(blob)
        (target / f"{start:020d}.log").touch()  # the log starts there
    directory.mkdir(parents=True, exist_ok=True)
    written = _write_segments(target, state.read_from(bucket, key, start), start, segment_bytes)
    log_start = state.log_starts.get(key, 0)
    if not written and log_start > start:  # every record deleted: the log starts there
        _drop_empty_segments(target, log_start)
        (target / f"{log_start:020d}.log").touch()
    if target != directory:
        shutil.rmtree(directory)
        target.rename(directory)
    return written


def _restore_snapshot(
    bucket: Bucket, state: BucketState, key: Key, local_end: int, *, bounded: bool
) -> tuple[int, bytes] | None:
    """The newest usable producer-state snapshot in the bucket after ``local_end``
    (offset and bytes), when the cache is ``bounded``; None: restore from the cache end."""
    if not bounded:
        return None
    for offset in reversed(state.snapshots.get(key, [])):
        if offset <= max(local_end, state.log_starts.get(key, 0)):
            break
        try:
            blob = bucket.get(layout.snapshot_key(*key, offset))
        except FileNotFoundError:
            continue
        decoded = decode_snapshot(blob)
        if decoded is not None and decoded[0] == offset:
            return offset, blob
        log.warning("storage.object.snapshot_unusable key=%s", layout.snapshot_key(*key, offset))
    return None


def fence(bucket: Bucket, stream: str, epoch: int) -> int:
    """Record in the bucket that ``epoch`` took over WAL stream ``stream``: the first
    sequence it leaves to the stream's older epochs (after every object listed and the
    stream's floor), which this returns."""
    sequences = [
        named[1]
        for item in bucket.list(layout.wal_folder(stream))
        if (named := layout.parse_wal_key(item.key)) is not None and named[0] == stream
    ]
    try:
        floor = layout.decode_wal_floor(bucket.get(layout.wal_floor_key(stream)))
    except FileNotFoundError:
        floor = 0
    first = max(max(sequences, default=-1) + 1, floor)
    bucket.put(layout.takeover_key(stream, epoch), layout.encode_takeover(first))
    return first


def record_takeovers(bucket: Bucket, state: BucketState, fences: Mapping[str, int]) -> None:
    """Record that this broker took over each WAL stream of ``fences`` at its epoch
    (those whose newest takeover record is older), leaving the sequences from the next
    one :class:`BucketState` read to the stream's older epochs: put before this broker's
    first WAL object, so that a fenced writer's objects landing later are known as
    zombies (see :attr:`BucketState.zombies`)."""
    for other, at in sorted(fences.items()):
        if at > state.last_epoch(other):
            bucket.put(
                layout.takeover_key(other, at), layout.encode_takeover(state.next_sequence(other))
            )


def delete_leftovers(bucket: Bucket, state: BucketState) -> None:
    """Delete what ``state`` found no longer counts: zombie WAL objects and partition
    objects inside another (see :class:`BucketState`)."""
    if state.zombies:
        bucket.delete(state.zombies)
        log.warning(
            "storage.object.stale_wal_deleted objects=%d (written by a broker after it "
            "had lost the writer lease; never acknowledged)",
            len(state.zombies),
        )
    if state.redundant:
        bucket.delete(state.redundant)
        log.info("storage.object.redundant_deleted objects=%d", len(state.redundant))


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
