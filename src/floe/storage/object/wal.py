"""The WAL writer: group commit into WAL objects.

Every upload is one object holding what was appended to every waiting partition since
its last upload (up to ``storage.s3.wal.max.bytes``; the rest goes in the next one), so
many producers and partitions share one PUT, as they share one fsync in the local
engine. acks=all producers wait in :meth:`WalWriter.sync` until an upload covering
their records has returned; acks=0/1 records are uploaded by the periodic pass
(:meth:`WalWriter.run_every`).

Owned by the store, on its event loop. Only the PUT leaves the loop (obstore's asyncio
call); the bytes are read from the partitions' local logs, which the page cache holds
since they were just appended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable

from floe.storage.interface import (
    NotOwnerError,
    OffsetOutOfRangeError,
    StorageError,
    WriteGuard,
)
from floe.storage.object.bucket import Bucket, ObjectExistsError, describe
from floe.storage.object.layout import Entry, encode_wal, end_offset, wal_key
from floe.storage.object.partition import ObjectPartitionLog
from floe.types import Offset

Logs = Callable[[], Iterable[ObjectPartitionLog]]
"""The store's open partitions, for the periodic pass."""

log = logging.getLogger(__name__)

RETRY_S = 0.5
"""Pause after a failed upload before the next try (acks=all waiters get the error)."""


class WalWriter:
    """Uploads partitions' new records as WAL objects; see the module docstring.

    Attributes:
        written: entries of the WAL objects written since start, by key (the store
            deletes an object once its entries are in partition objects).
        uploads: WAL objects uploaded.
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
        self.written: dict[str, list[Entry]] = {}
        self.uploads = 0
        self.on_upload: Callable[[], None] | None = None
        """Called after each upload that moved a partition's uploaded offset."""

    async def sync(self, logs: Iterable[ObjectPartitionLog]) -> None:
        """Return once everything appended to ``logs`` before the call is in the bucket.

        Raises:
            StorageError: the upload covering this call failed (the records stay
                queued: the next upload retries them).
        """
        targets = [(lg, lg.log_end_offset) for lg in logs]
        while True:
            self.check_fenced()
            targets = [(lg, t) for lg, t in targets if lg.uploaded < t and not lg.closed]
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
            await self._wake.wait()
            self._wake.clear()
            while self._dirty:
                # storage.s3.wal.min.interval.ms: fewer, larger PUTs under load
                pause = self._last_start + self._min_interval_s - time.monotonic()
                if pause > 0:
                    await asyncio.sleep(pause)
                fut, self._next = self._next, None
                self._last_start = time.monotonic()
                try:
                    await self.upload_round()
                except NotOwnerError as exc:  # in the bucket, but not ours to acknowledge
                    log.warning("storage.wal.not_acknowledged reason=%s", exc)
                    if fut is not None and not fut.done():
                        fut.set_exception(exc)
                        fut.exception()
                    await asyncio.sleep(RETRY_S)
                except Exception as exc:
                    log.error(
                        "storage.wal.upload_failed bucket=%s error=%s",
                        self._bucket.description,
                        describe(exc),
                    )
                    if fut is not None and not fut.done():
                        fut.set_exception(
                            StorageError(f"upload to the bucket failed: {describe(exc)}")
                        )
                        fut.exception()  # retrieved here; waiters re-raise it
                    await asyncio.sleep(RETRY_S)
                else:
                    if fut is not None and not fut.done():
                        fut.set_result(None)
            if self._next is not None and not self._next.done() and not self._dirty:
                self._next.set_result(None)  # nothing was left to upload for them
                self._next = None

    def _collect(self) -> tuple[list[Entry], list[bytes], list[tuple[ObjectPartitionLog, int]]]:
        """Read what the queued logs hold beyond their uploaded offset, up to the
        object size; logs not finished stay queued."""
        entries: list[Entry] = []
        data: list[bytes] = []
        taken: list[tuple[ObjectPartitionLog, int]] = []
        size = 0
        for lg in list(self._dirty):
            del self._dirty[lg]
            if lg.closed:
                continue
            start = max(lg.uploaded, lg.log_start_offset)
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

    async def upload_round(self) -> None:
        """One WAL object of the queued logs (nothing when nothing is new).

        Raises:
            Exception: the PUT failed; the logs are queued again.
        """
        entries, data, taken = self._collect()
        if entries:
            sequence = self._sequence
            self._sequence += 1
            key = wal_key(self.stream, sequence, self.epoch)
            started = time.monotonic()
            try:
                await self._bucket.put_async(key, encode_wal(entries, data), create=True)
            except ObjectExistsError as exc:
                self.fence(str(exc))
                raise
            except Exception:
                for lg, _ in taken:
                    self._dirty[lg] = None
                raise
            self.written[key] = entries
            self.uploads += 1
            for lg, position in taken:
                lg.uploaded = max(lg.uploaded, position)
            if self._guard is not None:  # the PUT may have outlived this broker's lease
                self._guard.check()
            if self.on_upload is not None:
                self.on_upload()
            log.debug(
                "storage.wal.uploaded key=%s partitions=%d bytes=%d ms=%.1f",
                key, len(entries), sum(e.length for e in entries),
                (time.monotonic() - started) * 1000,
            )  # fmt: skip
            return
        for lg, position in taken:
            lg.uploaded = max(lg.uploaded, position)

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
                sequence = self._sequence
                self._sequence += 1
                key = wal_key(self.stream, sequence, self.epoch)
                self._bucket.put(key, encode_wal(entries, data), create=True)
                self.written[key] = entries
                self.uploads += 1
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
        for task in (self._periodic, self._runner):
            if task is not None:
                task.cancel()
        self._periodic = self._runner = None
        if self._next is not None and not self._next.done():
            self._next.set_exception(StorageError("the store is closing"))
            self._next.exception()
        self._next = None
        with contextlib.suppress(Exception):
            self._wake.clear()
