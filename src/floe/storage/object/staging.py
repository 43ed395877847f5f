"""Partitions restored ahead of a takeover (:class:`Stages`): while a dead broker's lease
lapses, the broker that will take its partitions over restores them into a staging
directory, up to the committed ends the metadata store holds then. Once it claimed them
(the dead broker cannot commit any more), a partition whose committed end has not moved
since is opened from its staged copy; any other is restored again.

A broker whose Kafka port refuses connections (:mod:`floe.cluster.reach`) has most
likely died: its lease lapses within a session timeout, and after that wait the restore
was the longest step of a member's failover (0.2-2.0 s under load, more when the bucket
or the disk stalled). Nothing staged is served before the claim, and a
staged copy is used only when it holds exactly the records a restore after the claim
would write: a partition's committed records never change (the commit point), so two
restores up to the same committed end hold the same records. A log start moved since
(retention, DeleteRecords) is applied when the partition opens, as after any restore.

When the partitions taken over were all staged from one read of the bucket, the takeover
opens them from that read too, rather than reading the bucket again (0.2-1.4 s under
load), if it is still what a read would find: the same manifests, committed ends and log
starts (:func:`.restore.reuse_stage_read`; ``storage.object.acquired`` says
``state=staged``, else ``state=read``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import shutil
import time
from collections.abc import Callable, Collection, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from floe.storage.interface import TopicMeta
from floe.storage.local.store import partition_dir_name
from floe.storage.object.bucket import describe
from floe.storage.object.state import BucketState, Key
from floe.types import TopicName

log = logging.getLogger("floe.storage.object.store")

_T = TypeVar("_T")
Reader = Callable[[list[Key]], Coroutine[Any, Any, BucketState]]
"""Reads what the bucket holds of some partitions up to their committed ends."""
Restorer = Callable[[BucketState, TopicMeta, int, Key, Path], Coroutine[Any, Any, tuple[int, bool]]]
"""Restores one partition from a state into a directory: bytes written, from a snapshot."""


@dataclass(frozen=True)
class Staged:
    """A partition restored ahead of its takeover."""

    directory: Path
    end: int
    """The committed end it was restored up to."""
    written: int
    from_snapshot: bool
    state: BucketState
    """The read of the bucket it was restored from (shared by those staged together)."""


@dataclass
class Stages:
    """The partitions staged (or being staged) in ``directory`` (emptied at start: a
    copy left by an earlier run is never used), each restored by ``restore`` from one
    ``read`` shared by the partitions staged together, ``turns`` at a time."""

    directory: Path
    read: Reader
    restore: Restorer
    turns: int
    _stages: dict[Key, asyncio.Task[Staged | None]] = field(default_factory=dict)
    _dropped: set[asyncio.Task[Staged | None]] = field(default_factory=set)
    """Stages no longer wanted, still running: each removes its copy once it ends."""
    _names: itertools.count[int] = field(default_factory=itertools.count)
    _running: set[asyncio.Task[Any]] = field(default_factory=set)
    """Reads and removals under way (an event loop references its tasks weakly)."""

    def __post_init__(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    def start(self, todo: Mapping[tuple[TopicName, int], tuple[TopicMeta, Key]]) -> None:
        """Start staging the partitions of ``todo`` (``{(name, partition): (meta,
        key)}``) not staged yet (on the event loop; it returns at once)."""
        fresh = {k: v for k, v in todo.items() if v[1] not in self._stages}
        if not fresh:
            return
        read = self._keep(self.read([key for _, key in fresh.values()]))
        turns = asyncio.Semaphore(self.turns)
        for (name, p), (meta, key) in fresh.items():
            directory = self.directory / f"{partition_dir_name(name, p)}.{next(self._names)}"
            self._stages[key] = asyncio.create_task(
                self._stage(read, turns, meta=meta, partition=p, key=key, directory=directory),
                name=f"floe-stage {name}-{p}",
            )
        log.info(
            "storage.object.staging partitions=%s (their owner refuses connections: "
            "restored while its lease lapses, opened from the stage once claimed if "
            "nothing was committed since)",
            ",".join(f"{n}-{p}" for n, p in sorted(fresh)),
        )  # fmt: skip

    async def _stage(
        self,
        read: asyncio.Future[BucketState],
        turns: asyncio.Semaphore,
        *,
        meta: TopicMeta,
        partition: int,
        key: Key,
        directory: Path,
    ) -> Staged | None:
        """One partition's stage (None: it failed, logged; or it was dropped)."""
        me = asyncio.current_task()
        started = time.monotonic()
        try:
            state = await read
            async with turns:
                if me in self._dropped:
                    self._dropped.discard(me)
                    return None
                written, from_snapshot = await self.restore(state, meta, partition, key, directory)
        except Exception as exc:  # the takeover restores it, and says why if it fails too
            log.warning(
                "storage.object.staging_failed partition=%s-%d error=%s (restored at the "
                "takeover instead)",
                meta.name, partition, describe(exc),
            )  # fmt: skip
            self._dropped.discard(me)
            await asyncio.to_thread(shutil.rmtree, directory, True)
            return None
        if me in self._dropped:
            self._dropped.discard(me)
            await asyncio.to_thread(shutil.rmtree, directory, True)
            return None
        staged = Staged(directory, state.end(key), written, from_snapshot, state)
        log.info(
            "storage.object.staged partition=%s-%d end=%d bytes=%d objects=%d ms=%.0f",
            meta.name, partition, staged.end, written, state.fetched.get(key, 0),
            (time.monotonic() - started) * 1000,
        )  # fmt: skip
        return staged

    async def shared(self, keys: Collection[Key]) -> tuple[BucketState, dict[Key, int]] | None:
        """The read of the bucket the partitions ``keys`` were all staged from, with the
        end each one's copy reached, waiting for stages still running; None unless
        every one of them was staged, from one read."""
        wanted = list(keys)
        done: list[Staged] = []
        for key in wanted:
            stage = self._stages.get(key)
            if stage is None or (staged := await stage) is None:
                return None
            done.append(staged)
        if not done or len({id(staged.state) for staged in done}) != 1:
            return None
        return done[0].state, {key: s.end for key, s in zip(wanted, done, strict=True)}

    async def take(self, key: Key, end: int, what: str) -> Staged | None:
        """The staged copy of ``key`` (``what``: its name, for the log) when it was
        restored up to ``end`` (the committed end read after the claim), waiting for a
        stage still running; None when there is none, it failed, or it ends elsewhere
        (removed then)."""
        stage = self._stages.pop(key, None)
        if stage is None:
            return None
        staged = await stage
        if staged is None:
            return None
        if staged.end != end:
            log.info(
                "storage.object.stage_stale partition=%s staged_end=%d end=%d (committed "
                "since it was staged: restored again)",
                what, staged.end, end,
            )  # fmt: skip
            await asyncio.to_thread(shutil.rmtree, staged.directory, True)
            return None
        return staged

    def keep(self, wanted: Collection[Key]) -> None:
        """Drop the stages of the partitions not in ``wanted`` (their owner takes
        connections again, or they were taken another way): their copies are removed."""
        for key in [k for k in self._stages if k not in wanted]:
            stage = self._stages.pop(key)
            if not stage.done():
                self._dropped.add(stage)
            elif (staged := stage.result()) is not None:
                self._keep(asyncio.to_thread(shutil.rmtree, staged.directory, True))

    def _keep(self, work: Coroutine[Any, Any, _T]) -> asyncio.Task[_T]:
        """``work`` run as a task referenced until it ends."""
        task = asyncio.create_task(work)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return task
