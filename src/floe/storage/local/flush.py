"""Group commit: fsync rounds shared by every caller waiting at the same time.

A round takes a :class:`~floe.storage.local.log.FlushTicket` from each log (the files
and the sizes they cover), runs the fdatasyncs in a thread on private fds (so the event
loop keeps appending, and the fd cache may close its own fds meanwhile), then records
the result on the loop. Callers that arrive while a round runs join the *next* round,
which covers all of them; so under load there is at most one round in flight and one
forming, whatever the number of waiters.

A failed fdatasync takes its log offline (see :mod:`floe.storage.local.log`): its
waiters, and every later one, get KAFKA_STORAGE_ERROR, and it is never fsynced again
until a restart. Other logs of the same round are not affected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Iterable

from floe.storage.interface import StorageError
from floe.storage.local import fileio
from floe.storage.local.fdcache import FileCache, FileHandle
from floe.storage.local.log import FlushTicket, LocalPartitionLog

log = logging.getLogger(__name__)


def _sync_file(files: FileCache, handle: FileHandle, *, directory: bool = False) -> None:
    fd = files.dup(handle)
    if fd is None:  # deleted or replaced since the ticket: nothing left to sync
        return
    try:
        fileio.fsync(fd) if directory else fileio.fdatasync(fd)
    finally:
        os.close(fd)


def fsync_tickets(files: FileCache, tickets: list[FlushTicket]) -> dict[FlushTicket, OSError]:
    """fdatasync every file of ``tickets`` (runs in a thread): the segment files and
    indexes first, then the directory, each on a private fd; returns the tickets that
    failed with their error (a failed ticket's remaining files are skipped)."""
    failed: dict[FlushTicket, OSError] = {}
    for t in tickets:
        try:
            for handle in (*t.files, *t.extra):
                _sync_file(files, handle)
            if t.directory is not None:
                _sync_file(files, t.directory, directory=True)
        except OSError as exc:
            failed[t] = exc
    return failed


def settle(
    tickets: list[FlushTicket], failed: dict[FlushTicket, OSError]
) -> dict[LocalPartitionLog, StorageError]:
    """Record a round's outcome in its logs (on the loop); returns the failed logs."""
    errors: dict[LocalPartitionLog, StorageError] = {}
    for t in tickets:
        exc = failed.get(t)
        if exc is None:
            t.log.flushed(t)
        else:
            log.error(
                "log.flush.failed topic=%s partition=%d error=%s",
                t.log.topic, t.log.partition, exc,
            )  # fmt: skip
            errors[t.log] = t.log.flush_failed(t, exc)
    return errors


def flush_now(files: FileCache, logs: Iterable[LocalPartitionLog], *, final: bool = False) -> None:
    """Synchronously fsync ``logs`` (used at close, when no loop may be running); a
    failing log goes offline (logged), the others are synced."""
    tickets = [t for lg in logs if (t := lg.flush_ticket(final=final)) is not None]
    settle(tickets, fsync_tickets(files, tickets))


def check_online(logs: Iterable[LocalPartitionLog]) -> None:
    """Raises: StorageError: one of ``logs`` is offline."""
    for lg in logs:
        if lg.offline:
            raise lg.offline_error()


class GroupCommitter:
    """Runs fsync rounds for one store.

    Owned by the store, used from its event loop. The runner task exists only while
    rounds are pending; the optional background flusher task lives from
    :meth:`start_background` to :meth:`shutdown`. ``shutdown`` cancels both and
    resolves every outstanding waiter (the store fsyncs everything right after).

    Attributes:
        rounds: fsync rounds run so far (a metric; tests use it to see sharing).
    """

    def __init__(self, files: FileCache) -> None:
        self.rounds = 0
        self._files = files
        self._pending: dict[LocalPartitionLog, None] = {}
        self._next: asyncio.Future[dict[LocalPartitionLog, StorageError]] | None = None
        self._inflight: asyncio.Future[dict[LocalPartitionLog, StorageError]] | None = None
        self._runner: asyncio.Task[None] | None = None
        self._background: asyncio.Task[None] | None = None

    async def sync(self, logs: Iterable[LocalPartitionLog]) -> None:
        """Return once everything appended to ``logs`` before the call is fsynced.

        Raises:
            StorageError: one of ``logs`` is offline, or the fsync round covering this
                call failed for one of them.
        """
        logs = list(logs)
        check_online(logs)
        mine = [lg for lg in logs if lg.dirty]
        if not mine:
            return
        self._pending.update(dict.fromkeys(mine))
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
        fut = self._next
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run(), name="floe-group-commit")
        failed = await asyncio.shield(fut)
        for lg in mine:
            if lg in failed:
                raise failed[lg]
        check_online(mine)  # offline since: a later round failed, nothing is durable

    async def _run(self) -> None:
        while self._pending and self._next is not None:
            logs = list(self._pending)
            self._pending.clear()
            fut, self._next = self._next, None
            self._inflight = fut
            try:
                failed = await self._round(logs)
            except Exception as exc:
                log.exception("log.flush.round_failed error=%s", exc)
                if not fut.done():
                    fut.set_exception(StorageError(f"fsync failed: {exc}"))
                    fut.exception()  # retrieved here; waiters re-raise it
            else:
                if not fut.done():
                    fut.set_result(failed)
            finally:
                self._inflight = None

    async def _round(self, logs: list[LocalPartitionLog]) -> dict[LocalPartitionLog, StorageError]:
        tickets = [t for lg in logs if (t := lg.flush_ticket()) is not None]
        if not tickets:
            return {}
        self.rounds += 1
        failed = await asyncio.to_thread(fsync_tickets, self._files, tickets)
        return settle(tickets, failed)

    def start_background(
        self, interval_ms: int, dirty_logs: Callable[[], list[LocalPartitionLog]]
    ) -> None:
        """Start a task that fsyncs ``dirty_logs()`` every ``interval_ms``."""
        if self._background is None:
            self._background = asyncio.create_task(
                self._flush_every(interval_ms / 1000, dirty_logs), name="floe-log-flusher"
            )

    async def _flush_every(
        self, interval_s: float, dirty_logs: Callable[[], list[LocalPartitionLog]]
    ) -> None:
        while True:
            await asyncio.sleep(interval_s)
            with contextlib.suppress(StorageError):  # logged by the round; next tick retries
                await self.sync(dirty_logs())

    def shutdown(self) -> None:
        """Cancel the tasks and release waiters; the caller fsyncs everything next
        (an fsync thread still running holds dup'ed fds, so closing files is safe)."""
        for task in (self._background, self._runner):
            if task is not None:
                task.cancel()
        self._background = self._runner = None
        self._pending.clear()
        for fut in (self._inflight, self._next):
            if fut is not None and not fut.done():
                fut.set_result({})
        self._inflight = self._next = None
