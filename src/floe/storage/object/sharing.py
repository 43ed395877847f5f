"""Partitions shared among the live brokers of a cluster (``cluster.share.partitions``):
the background work that brings partitions to this broker.

* A member (a broker without the writer lease) mirrors the writer's topics from the
  bucket every pass, and at once when a client names a topic it does not know.
* Every broker opens the partitions the metadata store says it owns and it does not lead
  yet (the writer assigned them: it spreads new topics' partitions over the live
  brokers), claiming each at a new ownership epoch first, so that a run of it before a
  crash can never be mistaken for this one.
* The writer takes over the partitions of brokers that died: it fences each dead
  broker's WAL stream (once its lease lapsed), claims the partitions and restores them
  from the bucket (their partition objects and every stream's WAL objects).
* The writer balances: when no move is in flight and one live broker leads two or more
  shareable partitions more than another, it assigns partitions from the most loaded to
  the least (by count: every broker leads its share, a joining one too). An owner whose
  partition is assigned to another live broker hands it over: it releases it (appends
  refused, everything copied into partition objects, its cache closed), then records the
  new owner by compare-and-set, which opens it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict

from floe.storage.interface import WriteGuard
from floe.storage.local.meta import topics_from_doc
from floe.storage.object import layout
from floe.storage.object.bucket import describe
from floe.storage.object.store import ObjectStore, stays_with_writer
from floe.types import PartitionId, TopicName

log = logging.getLogger(__name__)

Key = tuple[TopicName, PartitionId]


class PartitionSharing:
    """See the module docstring. Owned by the event loop: :meth:`start` starts the
    passes (every ``interval_s``), :meth:`stop` ends them."""

    def __init__(self, store: ObjectStore, guard: WriteGuard, me: int, interval_s: float) -> None:
        self._store = store
        self._guard = guard
        self._me = me
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None
        self._mirroring: asyncio.Future[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="floe-partition-sharing")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        failing: str | None = None
        while True:
            try:
                await self.step()
                failing = None
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                reason = describe(exc)
                if reason != failing:  # once per distinct failure, not every pass
                    log.warning("cluster.sharing_pass_failed error=%s (retried)", reason)
                failing = reason
            await asyncio.sleep(self._interval_s)

    async def step(self) -> None:
        """One pass: mirror the topics (a member), hand over the partitions assigned
        elsewhere, open those owned here, take over dead brokers' and balance (the
        writer)."""
        if self._store.member:
            await self.refreshed()
        await self._hand_over()
        await self._open_owned()
        if not self._store.member:
            await self._take_over()
            self._balance()

    async def refreshed(self) -> None:
        """A member reads the writer's topics from the bucket now; concurrent callers
        share one read.

        Raises:
            Exception: the bucket could not be read (the topics known stay).
        """
        if self._mirroring is None:
            self._mirroring = asyncio.ensure_future(self._mirror())
        try:
            await asyncio.shield(self._mirroring)
        finally:
            if self._mirroring is not None and self._mirroring.done():
                self._mirroring = None

    async def _mirror(self) -> None:
        try:
            doc = await asyncio.to_thread(self._store.bucket.get, layout.TOPICS_KEY)
        except FileNotFoundError:
            return  # no topic yet
        self._store.mirror_topics(topics_from_doc(doc))

    def _unled(self) -> list[Key]:
        """The partitions of every known topic that this broker does not lead."""
        return [
            (meta.name, PartitionId(p))
            for meta in self._store.topics().values()
            for p in range(meta.partitions)
            if not self._store.leads(meta.name, PartitionId(p))
        ]

    async def _open_owned(self) -> None:
        mine = [k for k in self._unled() if self._guard.owner(*k) == self._me]
        if mine:
            await self._open(await asyncio.to_thread(self._guard.claim, mine), "assigned")

    async def _take_over(self) -> None:
        """The writer claims the partitions of dead owners once it fenced their streams
        (a broker whose lease lapsed and that rejoined before the fence is live again
        and keeps them: its stream is not fenced), and those with no owner (an
        assignment that never got recorded; one recorded a moment ago stays its new
        owner's: claims run after assignments in the metadata store's queue, and skip
        live owners)."""
        live = set(self._guard.live())
        orphans = [k for k in self._unled() if self._guard.owner(*k) not in live]
        if not orphans:
            return
        dead = sorted({str(o) for k in orphans if (o := self._guard.owner(*k)) is not None})
        started = time.monotonic()
        fences = await asyncio.to_thread(self._guard.fence_streams, dead)
        for stream, epoch in sorted(fences.items()):
            await self._store.fence_stream(stream, epoch)
        orphans = [k for k in orphans if (o := self._guard.owner(*k)) is None or str(o) in fences]
        won = await asyncio.to_thread(self._guard.claim, orphans)
        await self._open(won, "taken_over")
        if won:
            log.info(
                "cluster.partitions_taken_over broker=%d from=%s partitions=%d ms=%.0f",
                self._me, ",".join(dead) or "none", len(won),
                (time.monotonic() - started) * 1000,
            )  # fmt: skip

    async def _hand_over(self) -> None:
        live = set(self._guard.live())
        for key in self._store.led():
            to = self._guard.assigned(*key)
            if to is None or to == self._me or to not in live:
                continue
            started = time.monotonic()
            await self._store.release(*key)
            moved = await asyncio.to_thread(self._guard.hand_over, key, to)
            log.info(
                "cluster.partition_handed_over broker=%d partition=%s-%d to=%d moved=%s ms=%.0f",
                self._me, key[0], key[1], to, moved, (time.monotonic() - started) * 1000,
            )  # fmt: skip

    def _balance(self) -> None:
        """Assign partitions from the broker leading the most shareable partitions to
        the one leading the fewest until they differ by one at most; nothing while a
        move is in flight (an assignment to a live broker that does not own it yet)."""
        live = self._guard.live()
        if len(live) < 2:
            return
        led: dict[int, list[Key]] = {b: [] for b in live}
        for meta in self._store.topics().values():
            if stays_with_writer(meta):
                continue
            for p in range(meta.partitions):
                key = (meta.name, PartitionId(p))
                owner = self._guard.owner(*key)
                wanted = self._guard.assigned(*key)
                if wanted is not None and wanted in led and wanted != owner:
                    return  # a move in flight
                if owner in led:
                    led[owner].append(key)
        moves: dict[Key, int] = {}
        counts = {b: len(keys) for b, keys in led.items()}
        while True:
            most = max(counts, key=lambda b: (counts[b], b))
            fewest = min(counts, key=lambda b: (counts[b], b))
            if counts[most] - counts[fewest] <= 1:
                break
            key = led[most].pop()
            moves[key] = fewest
            counts[most] -= 1
            counts[fewest] += 1
        if moves:
            self._guard.plan(moves)
            by: dict[int, int] = defaultdict(int)
            for to in moves.values():
                by[to] += 1
            log.info(
                "cluster.balancing broker=%d moves=%d to=%s",
                self._me, len(moves), ",".join(f"{b}:{n}" for b, n in sorted(by.items())),
            )  # fmt: skip

    async def _open(self, keys: list[Key], why: str) -> None:
        for name, p in keys:
            if self._store.topic(name) is None:
                continue  # deleted meanwhile
            plog = await self._store.acquire(name, p)
            log.info(
                "cluster.partition_led broker=%d partition=%s-%d reason=%s log_end_offset=%d",
                self._me, name, p, why, plog.log_end_offset,
            )  # fmt: skip
