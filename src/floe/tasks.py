"""Background asyncio tasks: how an owner stops one it started, waits that end early
when an event comes first, and the outcome of one nobody awaits."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` (None: nothing to do) and wait until it has finished; its
    cancellation is not re-raised."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def retrieve(fut: asyncio.Future[Any]) -> None:
    """Mark ``fut``'s outcome as seen: a done-callback for a future nobody may await any
    more (its waiter gone, or never coming), so that its failure is not logged as
    "exception was never retrieved" when it is collected."""
    if not fut.cancelled():
        fut.exception()


async def first(work: asyncio.Future[Any], *events: asyncio.Event) -> bool:
    """Wait until ``work`` is done (True) or one of ``events`` is set first (False;
    ``work`` is left to its owner)."""
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait({work, *waits}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()
    return work.done()


async def unless_stopping(work: Coroutine[Any, Any, None], stop: asyncio.Event) -> bool:
    """Await ``work`` unless ``stop`` comes first (False: ``work`` cancelled)."""
    done = asyncio.create_task(work)
    try:
        finished = await first(done, stop)
    finally:
        await cancel_and_wait(done)  # raises what ``work`` raised
    return finished
