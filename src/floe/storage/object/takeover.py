"""Partitions a running broker starts leading (a dead broker's, or one a balancing move
gives it): once claimed, each partition restored from the bucket into a fresh cache
directory and opened (:meth:`Takeover.restore`), :data:`RESTORES` at a time, while the
dead broker's WAL stream's takeover is recorded (:meth:`Takeover.fence_stream`). A
partition restored ahead of its takeover, while its dead owner's lease lapsed, is opened
from that copy when nothing was committed since (:mod:`.staging`, :meth:`Takeover.stage`).

The bucket's WAL indexes are read once for all the partitions of one takeover (only the
objects new since the last read: :func:`~.restore.read_for_takeover`), up to each
partition's committed end. A broker of a cluster whose brokers share partitions follows
them meanwhile (:meth:`Takeover.follow_every`, as a standby does): under load the WAL
held a thousand objects and a takeover read the indexes of hundreds written since the
last one, 0.7-2.7 s of the dead broker's partitions' outage; now only those of the last
:data:`FOLLOW_S`. It costs every such broker one LIST and one small ranged GET per new
WAL object every :data:`FOLLOW_S`.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path

from floe.storage.interface import (
    StorageError,
    TopicMeta,
    UnknownTopicOrPartitionError,
    WriteGuard,
)
from floe.storage.local import LocalStore
from floe.storage.local.store import partition_dir_name
from floe.storage.object.bucket import Bucket, describe
from floe.storage.object.inventory import Inventory
from floe.storage.object.partition import ObjectPartitionLog
from floe.storage.object.restore import (
    cut_short,
    fence,
    read_for_takeover,
    restore_led,
    reuse_stage_read,
)
from floe.storage.object.staging import Stages
from floe.storage.object.state import BucketState, Key, WalIndexes, follow_wal
from floe.types import PartitionId, TopicName

log = logging.getLogger("floe.storage.object.store")

RESTORES = 4
"""Partitions a takeover restores at once (each mostly waits for the bucket's GETs)."""
FOLLOW_S = 2.0
"""How often a broker sharing partitions reads the new WAL objects' indexes."""

Opener = Callable[[TopicMeta, PartitionId, BucketState], ObjectPartitionLog]
"""Opens a restored partition's log (the store's own bookkeeping)."""


def to_restore(
    local: LocalStore,
    partitions: Iterable[tuple[TopicName, PartitionId]],
    led: Collection[tuple[TopicName, int]],
) -> dict[tuple[TopicName, int], tuple[TopicMeta, Key]]:
    """The ``partitions`` not ``led`` yet, as :meth:`Takeover.restore` takes them.

    Raises:
        UnknownTopicOrPartitionError: no such topic or partition.
    """
    todo: dict[tuple[TopicName, int], tuple[TopicMeta, Key]] = {}
    for name, partition in partitions:
        meta = local.topic(name)
        if meta is None or not 0 <= partition < meta.partitions:
            raise UnknownTopicOrPartitionError(f"unknown topic or partition {name}-{partition}")
        if (name, int(partition)) not in led:
            todo[(name, int(partition))] = (meta, (meta.topic_id, int(partition)))
    return todo


class Takeover:
    """The takeover side of an :class:`~.store.ObjectStore`: its bucket, cache and
    inventory, and how it opens a partition once restored."""

    def __init__(
        self,
        bucket: Bucket,
        local: LocalStore,
        held: Inventory,
        guard: WriteGuard | None,
        wal_indexes: WalIndexes,
        *,
        bounded: bool,
        open_partition: Opener,
    ) -> None:
        self._bucket = bucket
        self._local = local
        self._held = held
        self._guard = guard
        self._wal_indexes = wal_indexes
        self._bounded = bounded
        self._open_partition = open_partition
        self._reading = asyncio.Lock()
        """Held while the WAL indexes are read (a takeover's read, or a follow): one
        at a time, as they update the indexes in place."""
        self._opening: dict[tuple[TopicName, int], asyncio.Future[None]] = {}
        """The partitions :meth:`restore` is opening, each done once it serves."""
        self._stages = Stages(
            Path(local.log_dir()).with_name("staging"), self._read, self._restore_into, RESTORES
        )

    async def _read(self, keys: list[Key]) -> BucketState:
        """What the bucket holds of the partitions ``keys``, up to their committed ends."""
        async with self._reading:
            return await read_for_takeover(self._bucket, keys, self._guard, self._wal_indexes)

    async def _restore_into(
        self, state: BucketState, meta: TopicMeta, partition: int, key: Key, directory: Path
    ) -> tuple[int, bool]:
        return await restore_led(
            self._bucket, state, key, directory, f"{meta.name}-{partition}",
            segment_bytes=self._local.topic_config(meta.name).segment_bytes, bounded=self._bounded,
        )  # fmt: skip

    def stage(self, todo: Mapping[tuple[TopicName, int], tuple[TopicMeta, Key]]) -> None:
        """Start restoring the partitions of ``todo`` (as :meth:`restore` takes them)
        ahead of their takeover (see :mod:`.staging`)."""
        self._stages.start(todo)

    def keep_staged(self, wanted: Collection[Key]) -> None:
        """Drop the staged partitions not in ``wanted``."""
        self._stages.keep(wanted)

    def opening(self, name: TopicName, partition: PartitionId) -> asyncio.Future[None] | None:
        """The open of a partition :meth:`restore` is restoring: done once the
        partition serves, or once its restore failed (None: it is not being opened)."""
        return self._opening.get((name, int(partition)))

    async def restore(self, todo: Mapping[tuple[TopicName, int], tuple[TopicMeta, Key]]) -> None:
        """Restore and open each partition of ``todo`` (``{(name, partition): (meta,
        key)}``), :data:`RESTORES` at a time, each as soon as it is restored (those opened
        stay open if another one fails).

        Raises:
            StorageError: the bucket cannot be read, or the cache written.
        """
        loop = asyncio.get_running_loop()
        opening = {key: self._opening.setdefault(key, loop.create_future()) for key in todo}
        try:
            await self._restore_all(todo)
        finally:  # those that failed to open: refused at once from now on
            for key, opened in opening.items():
                if self._opening.get(key) is opened:
                    del self._opening[key]
                _served(opened)

    async def _restore_all(
        self, todo: Mapping[tuple[TopicName, int], tuple[TopicMeta, Key]]
    ) -> None:
        """:meth:`restore`, the opens apart."""
        started = time.monotonic()
        state, reused = await self._state_for([key for _, key in todo.values()])
        self._held.take_wal(state)
        read_s = time.monotonic() - started
        turns = asyncio.Semaphore(RESTORES)

        async def restore(meta: TopicMeta, p: int, key: Key) -> None:
            async with turns:
                await self._restore_one(
                    state, meta, PartitionId(p), key, since=started, read_s=read_s, reused=reused
                )

        done = await asyncio.gather(
            *(restore(meta, p, key) for (_, p), (meta, key) in todo.items()),
            return_exceptions=True,
        )
        for failed in done:
            if isinstance(failed, BaseException):
                raise failed

    async def _state_for(self, keys: list[Key]) -> tuple[BucketState, bool]:
        """What the bucket holds of the partitions ``keys``, just claimed: the read they
        were all staged from when it is still current (:func:`.restore.reuse_stage_read`;
        True), else a read now (False). A failed check reads the bucket again."""
        shared = await self._stages.shared(keys)
        if shared is not None and self._guard is not None:
            state, ends = shared
            try:
                reused = await asyncio.to_thread(
                    reuse_stage_read, self._bucket, state, self._guard, ends
                )
                if reused is not None:
                    return reused, True
            except Exception as exc:  # the read that follows says it if the bucket fails
                log.info(
                    "storage.object.stage_unchecked error=%s (the bucket is read again)",
                    describe(exc),
                )
        return await self._read(keys), False

    async def _restore_one(
        self,
        state: BucketState,
        meta: TopicMeta,
        partition: PartitionId,
        key: Key,
        *,
        since: float,
        read_s: float,
        reused: bool,
    ) -> None:
        """Restore and open one partition of :meth:`restore`, read from ``state``
        (``read_s`` after ``since``; ``reused``: the read it was staged from)."""
        name = meta.name
        directory = Path(self._local.log_dir()) / partition_dir_name(name, partition)
        staged = await self._stages.take(key, state.end(key), f"{name}-{partition}")
        if staged is not None:
            await asyncio.to_thread(_replace, directory, staged.directory)
            written, from_snapshot = staged.written, staged.from_snapshot
        else:
            written, from_snapshot = await self._restore_into(
                state, meta, partition, key, directory
            )
        self._held.take(state, key)
        opened = self._local.open_partition(name, partition)
        short = cut_short(name, partition, opened.log_end_offset, state.end(key))
        if short is not None:
            self._local.close_partition(name, partition)
            raise short
        plog = self._open_partition(meta, partition, state)
        _served(self._opening.pop((name, int(partition)), None))
        log.info(
            "storage.object.acquired partition=%s-%d log_end_offset=%d bytes=%d "
            "from_snapshot=%s objects=%d staged=%s ms=%.0f read_ms=%.0f state=%s",
            name, partition, plog.log_end_offset, written, from_snapshot,
            0 if staged is not None else state.fetched.get(key, 0), staged is not None,
            (time.monotonic() - since) * 1000, read_s * 1000, "staged" if reused else "read",
        )  # fmt: skip

    async def follow_every(self, interval_s: float) -> None:
        """Read the new WAL objects' indexes every ``interval_s``, until cancelled; a
        failed read is logged once per outage and tried again."""
        failing = False
        while True:
            await asyncio.sleep(interval_s)
            try:
                async with self._reading:
                    fresh = await asyncio.to_thread(follow_wal, self._bucket, self._wal_indexes)
                    self._wal_indexes.clear()
                    self._wal_indexes.update(fresh)
                failing = False
            except Exception as exc:  # obstore raises its own error classes
                if not failing:
                    log.warning(
                        "storage.object.wal_follow_failed error=%s (tried again every %.0f s; "
                        "a takeover meanwhile reads the indexes it lacks itself)",
                        describe(exc), interval_s,
                    )  # fmt: skip
                failing = True

    async def fence_stream(self, stream: str, epoch: int) -> None:
        """See :meth:`~.store.ObjectStore.fence_stream`.

        Raises:
            StorageError: the bucket cannot be read or written.
        """
        started = time.monotonic()
        try:
            first = await asyncio.to_thread(fence, self._bucket, stream, epoch)
        except Exception as exc:
            raise StorageError(f"cannot fence WAL stream {stream}: {describe(exc)}") from exc
        self._held.streams.add(stream)
        log.info(
            "storage.object.stream_fenced stream=%s epoch=%d first_sequence=%d ms=%.0f",
            stream, epoch, first, (time.monotonic() - started) * 1000,
        )  # fmt: skip


def _replace(directory: Path, staged: Path) -> None:
    """Put the ``staged`` copy of a partition in its cache ``directory`` (a cache from an
    earlier lead is removed first)."""
    shutil.rmtree(directory, ignore_errors=True)
    staged.rename(directory)


def _served(opened: asyncio.Future[None] | None) -> None:
    """Mark an open (:meth:`Takeover.opening`) ended."""
    if opened is not None and not opened.done():
        opened.set_result(None)
