"""Group commit: fsync rounds shared by every caller waiting at the same time.

A round takes a :class:`~floe.storage.local.log.FlushTicket` from each log (dup'ed
fds and the sizes they cover), runs the fdatasyncs in a thread so the event loop keeps
appending, then records the result on the loop. Callers that arrive while a round
runs join the *next* round, which covers all of them; so under load there is at most
one round in flight and one forming, whatever the number of waiters.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Iterable

from floe.storage.interface import StorageError
from floe.storage.local.log import FlushTicket, LocalPartitionLog

log = logging.getLogger(__name__)


def fsync_tickets(tickets: list[FlushTicket]) -> None:
    """fdatasync every fd of ``tickets`` and close the dups (runs in a thread).

    Raises:
        OSError: an fsync failed (every dup is still closed).
    """
    try:
        for t in tickets:
            for fd in t.fds:
                os.fdatasync(fd)
    finally:
        for t in tickets:
            for fd in t.fds:
                os.close(fd)


def flush_now(logs: Iterable[LocalPartitionLog]) -> None:
    """Synchronously fsync ``logs`` (used at close, when no loop may be running).

    Raises:
        OSError: an fsync failed.
    """
    tickets = [t for lg in logs if (t := lg.flush_ticket()) is not None]
    fsync_tickets(tickets)
    for t in tickets:
        t.log.flushed(t)


class GroupCommitter:
    """Runs fsync rounds for one store.

    Owned by the store, used from its event loop. The runner task exists only while
    rounds are pending; the optional background flusher task lives from
    :meth:`start_background` to :meth:`shutdown`. ``shutdown`` cancels both and
    resolves every outstanding waiter (the store fsyncs everything right after).

    Attributes:
        rounds: fsync rounds run so far (a metric; tests use it to see sharing).
    """

    def __init__(self) -> None:
        self.rounds = 0
        self._pending: dict[LocalPartitionLog, None] = {}
        self._next: asyncio.Future[None] | None = None
        self._inflight: asyncio.Future[None] | None = None
        self._runner: asyncio.Task[None] | None = None
        self._background: asyncio.Task[None] | None = None

    async def sync(self, logs: Iterable[LocalPartitionLog]) -> None:
        """Return once everything appended to ``logs`` before the call is fsynced.

        Raises:
            StorageError: the fsync round covering this call failed.
        """
        mine = [lg for lg in logs if lg.dirty]
        if not mine:
            return
        self._pending.update(dict.fromkeys(mine))
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
        fut = self._next
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run(), name="floe-group-commit")
        await asyncio.shield(fut)

    async def _run(self) -> None:
        while self._pending and self._next is not None:
            logs = list(self._pending)
            self._pending.clear()
            fut, self._next = self._next, None
            self._inflight = fut
            try:
                await self._round(logs)
            except Exception as exc:
                log.exception("log.flush.failed error=%s", exc)
                if not fut.done():
                    fut.set_exception(StorageError(f"fsync failed: {exc}"))
                    fut.exception()  # retrieved here; waiters re-raise it
            else:
                if not fut.done():
                    fut.set_result(None)
            finally:
                self._inflight = None

    async def _round(self, logs: list[LocalPartitionLog]) -> None:
        tickets = [t for lg in logs if (t := lg.flush_ticket()) is not None]
        if not tickets:
            return
        self.rounds += 1
        try:
            await asyncio.to_thread(fsync_tickets, tickets)
        except OSError:
            for t in tickets:
                t.log.flush_failed(t)
            raise
        for t in tickets:
            t.log.flushed(t)

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
                fut.set_result(None)
        self._inflight = self._next = None
