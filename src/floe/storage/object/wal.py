"""The WAL writer: group commit into WAL objects.

Every upload is one object holding what was appended to every waiting partition since
its last upload (up to ``storage.s3.wal.max.bytes``; the rest goes in the next one), so
many producers and partitions share one PUT, as they share one fsync in the local
engine. acks=all producers wait in :meth:`WalWriter.sync` until an upload covering
their records has returned; acks=0/1 records are uploaded by the periodic pass
(:meth:`WalWriter.run_every`).

In a cluster the PUT is not the end: the records become part of their partitions' logs
only when the metadata store commits them (the commit point, :meth:`WriteGuard.commit`:
a compare-and-set on each partition's ownership epoch and committed end). Only then does
a partition's ``uploaded`` offset move, which is its high watermark and what acks=all
waits for. A partition whose commit is refused was taken over by another broker: it is
fenced (``NOT_LEADER_OR_FOLLOWER``), and what this broker put in the bucket for it beyond
the committed end is garbage no reader takes (each WAL entry carries the ownership epoch
it was written at; see ``BucketState``).

The commit of one WAL object and the PUT of the next overlap (the commit's round trip
hidden behind the PUT): commits still apply one at a time, in order, and the next one is
sent only once the one before it is known. When a commit fails, the object put behind it
is never committed (its records follow records the log lacks): both objects' records are
queued again from the uploaded offset and go into a new object. A partition's ownership
epoch is asked of the store's thread once and then taken from its cache's mark, and
checked again, in order with the commits, before each commit.

An acks=all waiter is answered only once the fate of its records is known: committed
(acknowledged), or not part of the log (its partition fenced). A failed PUT or a commit
whose answer was lost leaves it waiting while the next rounds retry: an error answered
then would be "possibly persisted", and a client that later bumps its producer epoch
sends such records again as new ones (librdkafka does), so a commit that had in fact
landed would be written twice. The produce request's own timeout bounds the wait.

Owned by the store, on its event loop. Only the PUT and the commit leave the loop
(obstore's asyncio call, the membership's thread); the bytes are read from the
partitions' local logs, which the page cache holds since they were just appended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable

from floe.storage.interface import (
    OffsetOutOfRangeError,
    StorageError,
    WriteGuard,
)
from floe.storage.object.bucket import Bucket, ObjectExistsError, describe
from floe.storage.object.layout import Entry, encode_wal, end_offset, wal_key
from floe.storage.object.partition import ObjectPartitionLog
from floe.storage.object.wal_commit import (
    Taken,
    apply_commit,
    continuing,
    ends_of,
    rightly_stamped,
    stamped,
)
from floe.types import Offset, PartitionId, TopicName

Logs = Callable[[], Iterable[ObjectPartitionLog]]
"""The store's open partitions, for the periodic pass."""

log = logging.getLogger(__name__)

RETRY_S = 0.5
"""Pause after a failed upload before the next try (acks=all waiters keep waiting)."""


class WalWriter:
    """Uploads partitions' new records as WAL objects; see the module docstring.

    Attributes:
        written: entries of the WAL objects written since start, by key (the store
            deletes an object once its entries are in partition objects).
        uploads: WAL objects uploaded.
        put_seconds: time the WAL objects' PUTs took, all together.
        commits: commits asked of the metadata store (in a cluster).
        commit_seconds: time from asking each commit to its answer, all together (the
            store's transaction, and the wait for its thread).
    """

    def __init__(
        self,
        bucket: Bucket,
        max_bytes: int,
        stream: str,
        next_sequence: int,
        min_interval_s: float = 0.0,
        *,
        guard: WriteGuard | None = None,
        epoch: int = 0,
    ) -> None:
        self._bucket = bucket
        self._guard = guard
        self.epoch = epoch
        """The epoch in this writer's WAL keys: its stream lease's (0: no cluster)."""
        self.stream = stream
        """This broker's WAL stream (its node id): the folder of its WAL keys."""
        self._max_bytes = max_bytes
        self._min_interval_s = min_interval_s
        self._last_start = 0.0
        self.fenced: str | None = None
        self._sequence = next_sequence
        self._dirty: dict[ObjectPartitionLog, None] = {}
        self._next: asyncio.Future[None] | None = None
        self._wake = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None
        self._periodic: asyncio.Task[None] | None = None
        self._put_ends: dict[ObjectPartitionLog, int] = {}
        """In a cluster: how far each partition's records are in WAL objects, committed
        or not (the next object starts there while the last one's commit is in flight)."""
        self._committing: asyncio.Task[BaseException | None] | None = None
        """The commit of the last WAL object put, in flight (its error, or None)."""
        self.written: dict[str, list[Entry]] = {}
        self.uploads = 0
        self.put_seconds = 0.0
        self.commits = 0
        self.commit_seconds = 0.0
        self.on_upload: Callable[[], None] | None = None
        """Called after each upload that moved a partition's uploaded offset."""

    async def sync(self, logs: Iterable[ObjectPartitionLog]) -> None:
        """Return once everything appended to ``logs`` before the call is in the bucket.

        Failed uploads and commits are retried meanwhile (see the module docstring).

        Raises:
            StorageError: this writer is fenced for good, or the store is closing.
            NotOwnerError: a partition was fenced: its records beyond its uploaded
                offset are not part of the log.
        """
        targets = [(lg, lg.log_end_offset) for lg in logs]
        while True:
            if self.fenced is not None:
                raise StorageError(f"not writable: {self.fenced}")
            targets = [(lg, t) for lg, t in targets if lg.uploaded < t and not lg.closed]
            for lg, _ in targets:
                lg.check_committable()
            if not targets:
                return
            for lg, _ in targets:
                self._dirty[lg] = None
            if self._next is None:
                self._next = asyncio.get_running_loop().create_future()
            fut = self._next
            self._start()
            self._wake.set()
            await asyncio.shield(fut)

    def mark(self, logs: Iterable[ObjectPartitionLog]) -> None:
        """Queue ``logs`` for the next upload without waiting (acks=0/1 records)."""
        if self.mark_only(logs):
            self._start()
            self._wake.set()

    def check_fenced(self) -> None:
        """Raises:
        StorageError: another writer took over this prefix (see :meth:`fence`).
        NotOwnerError: in a cluster, this broker may not write now (its lease lapsed).
        """
        if self.fenced is not None:
            raise StorageError(f"not writable: {self.fenced}")
        if self._guard is not None:
            self._guard.check()

    def fence(self, reason: str) -> None:
        """Stop uploading for good: a WAL object this writer was about to create exists,
        so another broker writes under the same prefix. Nothing more is acknowledged
        (acks=all waiters and new appends get KAFKA_STORAGE_ERROR) until a restart
        reads the bucket again."""
        if self.fenced is None:
            self.fenced = f"another broker writes under this prefix ({reason})"
            log.error("storage.wal.fenced bucket=%s reason=%s", self._bucket.description, reason)
        self._dirty.clear()
        if self._next is not None and not self._next.done():
            self._next.set_exception(StorageError(f"not writable: {self.fenced}"))
            self._next.exception()
        self._next = None

    def forget(self, logs: Iterable[ObjectPartitionLog]) -> None:
        """Drop ``logs`` (a deleted topic) from the queue."""
        for lg in logs:
            self._dirty.pop(lg, None)

    def run_every(
        self, interval_s: float, logs: Callable[[], Iterable[ObjectPartitionLog]]
    ) -> None:
        """Queue every log with records not yet uploaded, every ``interval_s``."""
        if self._periodic is None:
            self._periodic = asyncio.create_task(self._every(interval_s, logs), name="floe-wal")

    async def _every(
        self, interval_s: float, logs: Callable[[], Iterable[ObjectPartitionLog]]
    ) -> None:
        while True:
            await asyncio.sleep(interval_s)
            self.mark(logs())

    def _start(self) -> None:
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run(), name="floe-wal-upload")

    async def _run(self) -> None:
        while self.fenced is None:
            if not self._dirty:
                await self._idle()
                continue
            # storage.s3.wal.min.interval.ms: fewer, larger PUTs under load
            pause = self._last_start + self._min_interval_s - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
            fut, self._next = self._next, None
            self._last_start = time.monotonic()
            try:
                await self.upload_round(fut)
            except Exception as exc:
                await self._failed(exc, fut)

    async def _idle(self) -> None:
        """Nothing queued: wait for new records, or for the commit in flight to end
        (new records meanwhile go into the next object at once, its PUT overlapping
        the commit)."""
        committing = self._committing
        if committing is None:
            if self._next is not None and not self._next.done():
                self._next.set_result(None)  # nothing was left to upload for them
                self._next = None
            await self._wake.wait()
            self._wake.clear()
            return
        woken = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({woken, committing}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
        self._wake.clear()
        if committing.done():
            try:
                await self._settle()
            except Exception as exc:
                await self._failed(exc, None)

    async def _failed(self, exc: Exception, fut: asyncio.Future[None] | None) -> None:
        """A round failed: log it, keep its waiters for the next one, pause."""
        log.error(
            "storage.wal.upload_failed bucket=%s error=%s (retried; acks=all waiters wait for it)",
            self._bucket.description,
            describe(exc),
        )
        self._hold(fut)
        await asyncio.sleep(RETRY_S)

    def _hold(self, fut: asyncio.Future[None] | None) -> None:
        """Keep the waiters of a failed round waiting for the next one (none comes once
        this writer is fenced for good: they get its error)."""
        if fut is None or fut.done():
            return
        if self.fenced is not None:
            fut.set_exception(StorageError(f"not writable: {self.fenced}"))
            fut.exception()
            return
        if self._next is None or self._next.done():
            self._next = fut
        else:
            self._next.add_done_callback(lambda done: _follow(done, fut))

    def _collect(self) -> tuple[list[Entry], list[bytes], Taken]:
        """Read what the queued logs hold beyond their uploaded offset, up to the
        object size; logs not finished stay queued."""
        entries: list[Entry] = []
        data: list[bytes] = []
        taken: Taken = []
        size = 0
        for lg in list(self._dirty):
            del self._dirty[lg]
            if lg.closed or lg.fenced is not None:
                continue
            start = max(lg.uploaded, self._put_ends.get(lg, 0), lg.log_start_offset)
            end = lg.log_end_offset
            position, chunks, length = start, [], 0
            while position < end and size + length < self._max_bytes:
                try:
                    chunk = lg.local.read(
                        Offset(position), self._max_bytes - size - length, min_one=True
                    )
                except OffsetOutOfRangeError:  # retention moved the start: skip to it
                    position = max(position, lg.local.log_start_offset)
                    continue
                if not chunk:
                    break
                chunks.append(chunk)
                length += len(chunk)
                position = end_offset(chunk)
            if chunks:
                entries.append(Entry(lg.topic_id, lg.partition, start, position, size, length))
                data.extend(chunks)
                size += length
            taken.append((lg, position))
            if position < end:
                self._dirty[lg] = None
            if size >= self._max_bytes:
                break
        return entries, data, taken

    async def upload_round(self, fut: asyncio.Future[None] | None = None) -> None:
        """One WAL object of the queued logs (nothing when nothing is new). In a
        cluster its commit in the metadata store is started, not awaited: the next
        object's PUT overlaps it, and each commit starts once the one before it is
        done (commits apply in order). ``fut`` is settled once this round's records are
        committed (or, without a cluster, put).

        Raises:
            Exception: the PUT failed, or the commit before this one did; the logs are
                queued again.
        """
        if self._guard is not None and self._guard.fenced is not None:
            with contextlib.suppress(Exception):
                await self._settle()
            self._put_ends.clear()
            entries, _, taken = self._collect()
            if entries:
                await self._commit(entries, taken)  # commits nothing: says what the log holds
            _settle_future(fut)
            return
        entries, data, taken = self._collect()
        if not entries:
            pending = {lg for lg, _ in taken if self._put_ends.get(lg, 0) > lg.uploaded}
            await self._settle()  # what is left for them is the commit in flight
            for lg, position in taken:
                if lg not in pending and lg.fenced is None:
                    lg.uploaded = max(lg.uploaded, position)
            _settle_future(fut)
            return
        try:
            if self._guard is not None:
                entries = await self._stamp(entries, taken)
            sequence = self._sequence
            self._sequence += 1
            key = wal_key(self.stream, sequence, self.epoch)
            started = time.monotonic()
            await self._bucket.put_async(key, encode_wal(entries, data), create=True)
        except ObjectExistsError as exc:
            self.fence(str(exc))
            raise
        except BaseException:
            for lg, _ in taken:
                self._dirty[lg] = None  # from where they were: a commit may be in flight
            raise
        took = time.monotonic() - started
        self.written[key] = entries
        self.uploads += 1
        self.put_seconds += took
        log.debug(
            "storage.wal.uploaded key=%s partitions=%d bytes=%d ms=%.1f",
            key, len(entries), sum(e.length for e in entries), took * 1000,
        )  # fmt: skip
        if self._guard is None:
            for lg, position in taken:
                lg.uploaded = max(lg.uploaded, position)
            self._uploaded()
            _settle_future(fut)
            return
        for lg, position in taken:
            self._put_ends[lg] = position
        try:
            await self._settle()
        except BaseException:
            self._requeue(taken)  # this object's records are never committed
            raise
        entries, taken = self._continuing(entries, taken)
        self._committing = asyncio.create_task(
            self._commit_in_flight(entries, taken, fut), name="floe-wal-commit"
        )

    def _continuing(self, entries: list[Entry], taken: Taken) -> tuple[list[Entry], Taken]:
        """What of an object put while the commit before it was in flight may be
        committed now (:func:`~.wal_commit.continuing`); the rest is queued again."""
        entries, kept, dropped = continuing(entries, taken)
        self._requeue(dropped)
        return entries, kept

    async def _commit_in_flight(
        self,
        entries: list[Entry],
        taken: Taken,
        fut: asyncio.Future[None] | None,
    ) -> BaseException | None:
        """Commit what a WAL object holds; its error for :meth:`_settle`, or None."""
        try:
            entries, taken = await self._stamped_right(entries, taken)
            await self._commit(entries, taken)
        except Exception as exc:
            self._requeue(taken)
            self._hold(fut)
            return exc
        self._uploaded()
        _settle_future(fut)
        return None

    async def _stamped_right(self, entries: list[Entry], taken: Taken) -> tuple[list[Entry], Taken]:
        """What of an object may be committed: the partitions whose entries carry the
        epoch this broker owns them at now (asked of the store's thread, in order with
        the commits: :func:`~.wal_commit.rightly_stamped`). The others (their ownership
        changed while they stayed open) are queued again, their marks forgotten, so
        their records go again into an object stamped right."""
        assert self._guard is not None
        keys = [(lg.topic, lg.partition) for lg, _ in taken]
        now = await asyncio.wrap_future(self._guard.epochs(keys))
        entries, kept, dropped = rightly_stamped(entries, taken, now)
        for lg, _ in dropped:
            log.warning(
                "storage.wal.restamped partition=%s-%d stamped=%d owned=%s (its records go "
                "again into the next WAL object)",
                lg.topic, lg.partition, lg.owner_epoch, now.get((lg.topic, lg.partition)),
            )  # fmt: skip
            lg.forget_owner_mark()
        self._requeue(dropped)
        return entries, kept

    async def _settle(self) -> None:
        """Wait for the commit in flight, if any.

        Raises:
            Exception: it failed: every record put since is uncommitted, and queued
                again (the next object holds them again).
        """
        task, self._committing = self._committing, None
        if task is None:
            return
        error = await task
        if error is not None:
            for lg in self._put_ends:
                self._dirty[lg] = None
            self._put_ends.clear()
            raise error

    def _requeue(self, taken: Iterable[tuple[ObjectPartitionLog, int]]) -> None:
        """Queue ``taken``'s logs again from their uploaded offset."""
        for lg, _ in taken:
            self._put_ends.pop(lg, None)
            self._dirty[lg] = None

    def _uploaded(self) -> None:
        if self.on_upload is not None:
            self.on_upload()

    async def _stamp(self, entries: list[Entry], taken: Taken) -> list[Entry]:
        """``entries`` with the ownership epoch of each partition (a former owner's
        entries lose to a newer owner's at the same offsets). A partition's epoch is
        asked of the metadata store's thread once (after the claims queued before it),
        then taken from its cache's mark: it holds while the partition is open here,
        and :meth:`_commit_in_flight` checks it again before committing."""
        assert self._guard is not None
        unknown = [(lg.topic, lg.partition) for lg, _ in taken if not lg.owner_epoch]
        asked = await asyncio.wrap_future(self._guard.epochs(unknown)) if unknown else {}
        epochs = {(lg.topic, lg.partition): lg.owner_epoch for lg, _ in taken}
        epochs.update(asked)
        return self._marked(entries, taken, epochs)

    def _marked(
        self,
        entries: list[Entry],
        taken: Taken,
        epochs: dict[tuple[TopicName, PartitionId], int],
    ) -> list[Entry]:
        """``entries`` stamped with ``epochs``, each partition's cache marked with its
        epoch first (a cache whose mark is not its owner's epoch is dropped at the next
        open: :mod:`~floe.storage.object.owner_mark`)."""
        for lg, _ in taken:
            lg.mark_owner(int(self.stream), epochs.get((lg.topic, lg.partition), 0))
        return stamped(entries, taken, epochs)

    async def _commit(self, entries: list[Entry], taken: Taken) -> None:
        """Commit what the WAL object just put holds (see the module docstring); the
        partitions committed move their uploaded offset, those refused are fenced.

        Raises:
            Exception: the metadata store did not answer (the logs are queued again;
                the next upload commits their records again).
        """
        assert self._guard is not None
        ends = ends_of(entries, taken)
        started = time.monotonic()
        try:
            done = await asyncio.wrap_future(self._guard.commit(ends))
        except BaseException:
            self._requeue(taken)
            raise
        finally:
            self.commits += 1
            self.commit_seconds += time.monotonic() - started
        apply_commit(taken, ends, done)

    def upload_all_blocking(self, logs: Iterable[ObjectPartitionLog]) -> None:
        """Upload everything ``logs`` hold beyond their uploaded offset, with blocking
        PUTs (the store's close, off any running loop).

        Raises:
            StorageError: fenced (nothing is uploaded).
            Exception: a PUT failed.
        """
        self.check_fenced()
        self.mark_only(logs)
        while self._dirty:
            entries, data, taken = self._collect()
            if entries:
                if self._guard is not None:
                    keys = [(lg.topic, lg.partition) for lg, _ in taken]
                    entries = self._marked(entries, taken, self._guard.epochs(keys).result())
                sequence = self._sequence
                self._sequence += 1
                key = wal_key(self.stream, sequence, self.epoch)
                started = time.monotonic()
                self._bucket.put(key, encode_wal(entries, data), create=True)
                self.put_seconds += time.monotonic() - started
                self.written[key] = entries
                self.uploads += 1
                if self._guard is not None:
                    ends = ends_of(entries, taken)
                    started = time.monotonic()
                    try:
                        done = self._guard.commit(ends).result()
                    finally:
                        self.commits += 1
                        self.commit_seconds += time.monotonic() - started
                    apply_commit(taken, ends, done)
                    continue
            for lg, position in taken:
                lg.uploaded = max(lg.uploaded, position)

    def mark_only(self, logs: Iterable[ObjectPartitionLog]) -> bool:
        """Queue ``logs`` that have records to upload; True when any had."""
        added = False
        for lg in logs:
            if lg.uploaded < lg.log_end_offset and not lg.closed:
                self._dirty[lg] = None
                added = True
        return added

    def shutdown(self) -> None:
        """Cancel the tasks and release waiters (the store uploads the rest next)."""
        for task in (self._periodic, self._runner, self._committing):
            if task is not None:
                task.cancel()
        self._periodic = self._runner = self._committing = None
        self._put_ends.clear()  # the close uploads (and commits) again from uploaded
        if self._next is not None and not self._next.done():
            self._next.set_exception(StorageError("the store is closing"))
            self._next.exception()
        self._next = None
        with contextlib.suppress(Exception):
            self._wake.clear()


def _settle_future(fut: asyncio.Future[None] | None) -> None:
    if fut is not None and not fut.done():
        fut.set_result(None)


def _follow(done: asyncio.Future[None], fut: asyncio.Future[None]) -> None:
    """Settle ``fut`` as ``done`` was settled."""
    if fut.done():
        return
    error = None if done.cancelled() else done.exception()
    if error is None:
        fut.set_result(None)
    else:
        fut.set_exception(error)
        fut.exception()
