"""Following a topic another broker leads: a read-only copy of state kept on a journal.

A cluster member runs table-topic coordinators that read the Schema Registry, whose
journal (``_schemas``) the writer leads. :class:`TopicFollower` keeps a member's copy:
it fetches the journal's partition from its leader over the Kafka protocol, from the
offset after the last record it applied, and hands every record to ``apply`` in offset
order (control batches skipped; a batch that does not decode skipped and logged, as
replay skips it). A Fetch that finds nothing new waits at the leader for a record (a
long poll, :data:`WAIT_MS`), so an idle copy costs the leader a request every few
seconds, and a new schema reaches it within a WAL upload. When the leader's log starts after
what was read (compaction, a journal rewritten) the copy is ``reset`` and read again
from the log start.

Ownership: one per followed topic, its task on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from floe.cluster.interface import BrokerInfo
from floe.cluster.peers import PeerError, call
from floe.errors import ErrorCode, FloeError
from floe.protocol.batch import HEADER_SIZE, read_header
from floe.protocol.client import (
    EARLIEST,
    ResponseError,
    fetch_request,
    fetched,
    list_offsets_request,
    listed_offset,
)
from floe.protocol.ranges import BadBatch, RangeAccount, Records, unusable
from floe.types import TopicName

log = logging.getLogger("floe.cluster.follow")

FETCH_BYTES = 4 * 1024 * 1024
"""Record bytes asked for per Fetch (a larger batch comes whole)."""
WAIT_MS = 5_000
"""How long the leader holds a Fetch that finds nothing new (a long poll, as Kafka's
followers do: an idle copy asks about once in ``WAIT_MS`` + ``interval_s``)."""
WARN_AFTER_S = 10.0
"""How long the leader may fail to answer before the copy says it is falling behind."""


class FollowError(FloeError):
    """The leader could not be read now (no answer, an error code)."""


class TopicFollower:
    """Partition 0 of ``topic`` as its leader (``leader()``: None while there is none:
    the copy waits) has it, fed to ``apply(offset, key, value)``; ``reset()`` empties
    the copy."""

    def __init__(
        self,
        topic: TopicName,
        leader: Callable[[], BrokerInfo | None],
        apply: Callable[[int, bytes | None, bytes | None], None],
        reset: Callable[[], None],
        *,
        interval_s: float = 0.5,
        wait_ms: int = WAIT_MS,
        timeout_s: float = 10.0,
    ) -> None:
        self.topic = topic
        self._leader = leader
        self._apply = apply
        self._reset = reset
        self._interval_s = interval_s
        self._wait_ms = wait_ms
        self._timeout_s = timeout_s + wait_ms / 1000
        self.next = 0
        """The offset after the last record applied."""
        self.caught_up = asyncio.Event()
        """Set once a fetch reached the leader's high watermark."""

    async def run(self) -> None:
        """Follow until cancelled; failures are retried, and logged once they last
        :data:`WARN_AFTER_S` (a leader moving or restarting fails a few fetches)."""
        failing_since: float | None = None
        warned = False
        while True:
            try:
                more = await self.step()
            except FollowError as exc:
                now = time.monotonic()
                failing_since = failing_since if failing_since is not None else now
                if not warned and now - failing_since >= WARN_AFTER_S:
                    log.warning(
                        "cluster.follow_failing topic=%s offset=%d for_s=%.0f error=%s",
                        self.topic, self.next, now - failing_since, exc,
                    )  # fmt: skip
                    warned = True
                more = False
            else:
                if warned:
                    log.info("cluster.follow_resumed topic=%s offset=%d", self.topic, self.next)
                failing_since, warned = None, False
            if not more:
                await asyncio.sleep(self._interval_s)

    async def step(self) -> bool:
        """One Fetch from the leader, applied; whether more is there to read now.

        Raises:
            FollowError: see the class.
        """
        leader = self._leader()
        if leader is None:  # none yet (a cluster starting), or the writer just died
            return False
        request = fetch_request(self.topic, 0, self.next, FETCH_BYTES, max_wait_ms=self._wait_ms)
        response = await self._call(leader, request)
        try:
            part = fetched(response, self.topic, 0)
        except ResponseError as exc:
            raise FollowError(f"broker {leader.broker_id}: {exc}") from None
        if part.error is ErrorCode.offset_out_of_range:
            await self._restart(leader)
            return True
        if part.error is not ErrorCode.none:
            raise FollowError(f"broker {leader.broker_id}: {part.error.name}")
        end = part.high_watermark
        if end <= self.next or not part.records:
            self.caught_up.set()
            return False
        self._take(part.records, end)
        if self.next >= end:
            self.caught_up.set()
            return False
        return True

    def _take(self, data: bytes, end: int) -> None:
        """Apply the records of the whole batches of ``data`` below ``end``."""
        account = RangeAccount(self.next, end, (), True)
        at = 0
        while at + HEADER_SIZE <= len(data):
            header = read_header(data, at)
            reason = unusable(header)
            if reason is not None and at == 0:  # nothing after it can be framed
                raise FollowError(f"offset {self.next}: {reason}")
            if reason is not None or at + header.size > len(data):
                break  # a partial last batch: the next Fetch starts with it
            for chunk in account.batch(data, header, at):
                if isinstance(chunk, Records):
                    for record in chunk.records:
                        self._apply(record.offset, record.key, record.value)
                elif isinstance(chunk, BadBatch):
                    log.warning(
                        "cluster.follow_batch_skipped topic=%s offset=%d last_offset=%d "
                        "reason=%s",
                        self.topic, chunk.first, chunk.last, chunk.reason,
                    )  # fmt: skip
            at += header.size
        self.next = max(self.next, account.pos)

    async def _restart(self, leader: BrokerInfo) -> None:
        """The leader's log does not hold :attr:`next`: read it again from its start."""
        request = list_offsets_request(self.topic, 0, EARLIEST)
        response = await self._call(leader, request)
        try:
            found = listed_offset(response, self.topic, 0)
        except ResponseError as exc:
            raise FollowError(f"broker {leader.broker_id}: {exc}") from None
        if found.error is not ErrorCode.none:
            raise FollowError(f"broker {leader.broker_id}: {found.error.name}")
        log.info(
            "cluster.follow_reset topic=%s from=%d log_start=%d (read again from the start)",
            self.topic, self.next, found.offset,
        )  # fmt: skip
        self._reset()
        self.next = found.offset

    async def _call(self, leader: BrokerInfo, request: Any) -> Any:
        try:
            return await call(leader.host, leader.port, request, self._timeout_s)
        except PeerError as exc:
            raise FollowError(str(exc)) from None
