"""Sending mutated frames fast: pipelined connections that count what the broker took.

A *lane* is one connection at a time that keeps up to ``window`` frames in flight. The
broker answers in request order, so a reply with correlation id ``c`` means every frame
sent before ``c`` on that connection was processed too (Produce with acks=0 has no
reply of its own). When the broker closes a connection, the oldest unanswered frame is
the one it refused (the *suspect*, counted as processed); frames queued behind it were
never read and are sent again on the next connection, so each frame index is processed
exactly once.

Frames the broker may legitimately hold (JoinGroup, SyncGroup: they wait for a
rebalance) go to a side pool that sends each on its own short-lived connection, so they
never block a lane. A lane whose oldest frame gets neither a reply nor a close for
``stall_s`` records a *stall* finding (a Fetch may wait ``max_wait``: it is only
abandoned, after one second).

Everything here runs on one event loop and is owned by :class:`Engine`.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from fuzz.client import decode_response
from fuzz.mutate import Frame, Mutator
from fuzz.wire import I32, frame_api, frame_correlation_id, request_header
from fuzz.wire import frame as framed

REPLY_HEAD = struct.Struct(">ii")
PARKING_APIS = frozenset({11, 14})
PRODUCE = 0
FETCH = 1
MAX_SAMPLES_PER_KIND = 20


@dataclass(slots=True)
class Entry:
    index: int
    cid: int | None
    frame: Frame
    sent: float


@dataclass
class FrameRecord:
    """A frame kept for a report: enough to resend it byte for byte."""

    index: int
    frame_seed: int
    label: str
    hex: str

    @classmethod
    def of(cls, mutator: Mutator, index: int, frame: Frame, limit: int = 1 << 20) -> FrameRecord:
        data = frame.data if len(frame.data) <= limit else frame.data[:limit]
        return cls(index, mutator.frame_seed(index), frame.label, data.hex())


@dataclass
class Finding:
    """Something the broker did that it must not: kind, what we saw, frames to replay."""

    kind: str
    detail: str
    frames: list[FrameRecord] = field(default_factory=list)


@dataclass
class Stats:
    frames: int = 0
    answered: int = 0
    closes: int = 0
    parked: int = 0
    requeued: int = 0
    connections: int = 0
    batches: int = 0
    bombs: int = 0
    sent_by_family: Counter[str] = field(default_factory=Counter)
    closed_by_family: Counter[str] = field(default_factory=Counter)


class _Conn(asyncio.Protocol):
    """One connection's receive side: splits reply frames and hands them to the lane."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.transport: asyncio.Transport | None = None
        self.head = bytearray()  # the size and correlation id of the next reply
        self.skip = 0  # bytes of the current reply still to discard
        self.keep: Entry | None = None  # an oracle wants this reply's body ...
        self.body = bytearray()  # ... collected here
        self.body_size = 0
        self.inflight: deque[Entry] = deque()
        self.cids: set[int] = set()
        self.closed = False
        self.wake = asyncio.Event()
        self.progress = time.monotonic()
        self.port = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        sockname = transport.get_extra_info("sockname")
        self.port = int(sockname[1]) if isinstance(sockname, tuple) else 0

    def data_received(self, data: bytes) -> None:
        """Match replies by their first 8 bytes; skip bodies nobody reads (Fetch answers
        can be megabytes) instead of buffering them."""
        view = memoryview(data)
        pos, end = 0, len(data)
        while pos < end:
            if self.skip:
                take = min(self.skip, end - pos)
                self.skip -= take
                pos += take
            elif self.keep is not None:
                take = min(self.body_size - len(self.body), end - pos)
                self.body += view[pos : pos + take]
                pos += take
                if len(self.body) == self.body_size:
                    self.engine.check_internal_produce(self.keep, bytes(self.body))
                    self.keep = None
                    self.body.clear()
            else:
                take = min(8 - len(self.head), end - pos)
                self.head += view[pos : pos + take]
                pos += take
                if len(self.head) == 8:
                    size, cid = REPLY_HEAD.unpack(self.head)
                    self.head.clear()
                    entry = self._reply(cid)
                    if entry is not None and entry.frame.internal_produce:
                        self.keep, self.body_size = entry, size
                        self.body += I32.pack(cid)
                    else:
                        self.skip = max(size - 4, 0)
        self.progress = time.monotonic()
        self.wake.set()

    def _reply(self, cid: int) -> Entry | None:
        """Retire the frames this reply answers; the matched entry, if any."""
        if cid not in self.cids:
            if self.inflight:  # a reply whose id we mutated: it answers the oldest frame
                self._done(self.inflight.popleft())
            return None
        while self.inflight:
            entry = self.inflight.popleft()
            self._done(entry)
            if entry.cid == cid:
                return entry
        return None

    def _done(self, entry: Entry) -> None:
        if entry.cid is not None:
            self.cids.discard(entry.cid)
        if entry.index >= 0:  # not a barrier
            self.engine.stats.frames += 1
            self.engine.stats.answered += 1

    def is_closed(self) -> bool:
        return self.closed  # a call, so type checkers do not keep a narrowed value

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.wake.set()


class Engine:
    """Drives lanes until ``total`` frames were processed or ``deadline`` passed.

    Args:
        host, port: the broker's Kafka listener.
        mutator: builds each frame.
        total: frames to process.
        lanes: concurrent pipelined connections.
        window: frames in flight per lane.
        stall_s: how long a non-waiting request may go unanswered.
    """

    def __init__(
        self,
        host: str,
        port: int,
        mutator: Mutator,
        total: int,
        *,
        lanes: int = 4,
        window: int = 16,
        stall_s: float = 10.0,
        side_workers: int = 4,
    ) -> None:
        self.host = host
        self.port = port
        self.mutator = mutator
        self.total = total
        self.lanes = lanes
        self.window = window
        self.stall_s = stall_s
        self.side_workers = side_workers
        self.stats = Stats()
        self.findings: list[Finding] = []
        self.finding_counts: Counter[str] = Counter()
        self.recent: deque[tuple[int, Frame]] = deque(maxlen=64)
        self.stopped = asyncio.Event()
        self._next = 0
        self._cid = 0
        self._conns: set[_Conn] = set()
        self._side: asyncio.Queue[tuple[int, Frame]] = asyncio.Queue(maxsize=256)
        self.closed_by_port: dict[int, list[tuple[float, int]]] = {}
        """Local port -> (when, frame index) of each connection the broker closed: the
        broker logs a failed request with the peer's port, so its frame can be found."""

    # --- bookkeeping ----------------------------------------------------------------

    def stop(self) -> None:
        self.stopped.set()

    def record(self, kind: str, detail: str, frames: list[tuple[int, Frame]]) -> None:
        """Keep a finding (the first few of each kind with their frames)."""
        self.finding_counts[kind] += 1
        if self.finding_counts[kind] <= MAX_SAMPLES_PER_KIND:
            records = [FrameRecord.of(self.mutator, i, f) for i, f in frames]
            self.findings.append(Finding(kind, detail, records))

    def in_flight(self) -> list[tuple[int, Frame]]:
        """Every frame sent and not yet answered, oldest first per connection."""
        return [(e.index, e.frame) for c in self._conns for e in c.inflight]

    def check_internal_produce(self, entry: Entry, payload: bytes) -> None:
        """An internal topic must refuse a Produce: an error-free partition is a finding."""
        key, version = frame_api(entry.frame.data)
        try:
            resp: Any = decode_response(key, version, payload)
        except Exception:
            return  # not decodable: some other oracle's business
        for topic in resp.responses:
            for part in topic.partition_responses:
                if int(part.error_code) == 0:
                    self.record(
                        "internal-topic-write-accepted",
                        f"{topic.name} partition {part.index} answered error 0 "
                        f"(base offset {part.base_offset})",
                        [(entry.index, entry.frame)],
                    )

    def _take_index(self) -> int | None:
        if self._next >= self.total or self.stopped.is_set():
            return None
        self._next += 1
        return self._next - 1

    def _make(self, index: int) -> Frame:
        self._cid = (self._cid + 1) & 0x3FFFFFFF or 1
        frame = self.mutator.make(index, self._cid)
        family = frame.label.split(":", 1)[0]
        self.stats.sent_by_family[family] += 1
        if family == "batch" or "[" in frame.label:
            self.stats.batches += 1
            if "bomb-" in frame.label:
                self.stats.bombs += 1
        return frame

    # --- running --------------------------------------------------------------------

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(self._lane()) for _ in range(self.lanes)]
        side = [loop.create_task(self._side_worker()) for _ in range(self.side_workers)]
        try:
            await asyncio.gather(*tasks)
            await self._side.join()
        finally:
            self.stop()
            for t in side:
                t.cancel()
            for t in [*tasks, *side]:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
            for c in list(self._conns):
                if c.transport is not None:
                    c.transport.abort()

    async def _connect(self) -> tuple[asyncio.Transport, _Conn] | None:
        loop = asyncio.get_running_loop()
        try:
            transport, conn = await loop.create_connection(
                lambda: _Conn(self), self.host, self.port
            )
        except OSError:
            await asyncio.sleep(0.05)
            return None
        self.stats.connections += 1
        return transport, conn

    async def _lane(self) -> None:
        pending: deque[tuple[int, Frame]] = deque()
        closers: deque[tuple[int, Frame]] = deque()
        while not self.stopped.is_set():
            made = await self._connect()
            if made is None:
                if self._next >= self.total and not pending and not closers:
                    return
                continue
            transport, conn = made
            self._conns.add(conn)
            try:
                exhausted = await self._fill_and_wait(transport, conn, pending, closers)
            finally:
                self._conns.discard(conn)
                transport.abort()
            self._settle(conn, pending)
            if exhausted and not pending and not closers:
                return

    def _next_frame(self, pending: deque[tuple[int, Frame]]) -> tuple[int, Frame] | None:
        if pending:
            return pending.popleft()
        index = self._take_index()
        return None if index is None else (index, self._make(index))

    async def _fill_and_wait(
        self,
        transport: asyncio.Transport,
        conn: _Conn,
        pending: deque[tuple[int, Frame]],
        closers: deque[tuple[int, Frame]],
    ) -> bool:
        """Pipeline frames on ``conn`` until it closes; True when no frames are left.

        Frames likely to make the broker close the connection wait in ``closers`` and
        go last: each connection carries up to ``window - 1`` ordinary frames, then one
        closer, then nothing until that closer is answered.
        """
        exhausted = False
        normals = 0
        closer_out = False
        while not conn.closed and not self.stopped.is_set():
            out: list[bytes] = []
            while len(conn.inflight) < self.window and not closer_out:
                if closers and (normals >= self.window - 1 or len(closers) >= 4 or exhausted):
                    index, frame = closers.popleft()
                    self._track(conn, index, frame, out)
                    closer_out, normals = True, 0
                    break
                if exhausted:
                    break
                got = self._next_frame(pending)
                if got is None:
                    exhausted = True
                    continue
                index, frame = got
                if frame_api(frame.data)[0] in PARKING_APIS:
                    await self._side.put((index, frame))
                elif frame.likely_close:
                    closers.append((index, frame))
                else:
                    self._track(conn, index, frame, out)
                    normals += 1
            if out:
                last = conn.inflight[-1].frame
                if last.terminal:
                    transport.write(b"".join(out))
                    if transport.can_write_eof():
                        transport.write_eof()
                else:
                    if closer_out or frame_api(last.data)[0] == PRODUCE:
                        self._track(conn, -1, self._barrier(), out)
                    transport.write(b"".join(out))  # one syscall per window
            if not conn.inflight:
                if exhausted and not closers:
                    return True
                closer_out = False
                continue
            conn.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(conn.wake.wait(), 0.25)
            if conn.is_closed():
                break
            if not conn.inflight:
                closer_out = False
                continue
            head = conn.inflight[0]
            waited = time.monotonic() - max(conn.progress, head.sent)
            key = frame_api(head.frame.data)[0]
            if (key == FETCH and waited > 1.0) or (head.frame.terminal and waited > 2.0):
                self.stats.parked += 1
                break
            if waited > self.stall_s:
                self.record(
                    "stall",
                    f"no reply and no close for {waited:.1f} s (api {key})",
                    [(head.index, head.frame)],
                )
                break
        return exhausted and not closers and not pending

    def _track(self, conn: _Conn, index: int, frame: Frame, out: list[bytes]) -> None:
        cid = frame_correlation_id(frame.data)
        conn.inflight.append(Entry(index, cid, frame, time.monotonic()))
        if cid is not None:
            conn.cids.add(cid)
        if index >= 0:
            self.recent.append((index, frame))
        out.append(frame.data)

    def _barrier(self) -> Frame:
        """An ApiVersions v0 request (index -1, never counted) whose reply proves every
        frame before it was read: Produce with acks=0 and some refused requests have no
        reply of their own."""
        self._cid = (self._cid + 1) & 0x3FFFFFFF or 1
        return Frame(framed(request_header(18, 0, self._cid, b"fuzz-barrier", False)), "barrier")

    def _settle(self, conn: _Conn, pending: deque[tuple[int, Frame]]) -> None:
        """After a close: the oldest unanswered frame is the suspect; requeue the rest."""
        if not conn.inflight:
            return
        suspect = conn.inflight.popleft()
        if suspect.index < 0:  # the barrier: everything before it was answered
            suspect = Entry(-1, None, suspect.frame, suspect.sent)
        else:
            self.stats.frames += 1
        if conn.closed and suspect.index >= 0:
            self.stats.closes += 1
            self.stats.closed_by_family[suspect.frame.label.split(":", 1)[0]] += 1
            self.closed_by_port.setdefault(conn.port, []).append((time.time(), suspect.index))
        for entry in conn.inflight:
            if entry.index >= 0:
                pending.append((entry.index, entry.frame))
                self.stats.requeued += 1
        conn.inflight.clear()

    async def _side_worker(self) -> None:
        """Send frames that may wait for a rebalance, one per short-lived connection."""
        while True:
            index, frame = await self._side.get()
            try:
                made = await self._connect()
                if made is None:
                    continue
                transport, conn = made
                cid = frame_correlation_id(frame.data)
                conn.inflight.append(Entry(index, cid, frame, time.monotonic()))
                if cid is not None:
                    conn.cids.add(cid)
                self._conns.add(conn)
                self.recent.append((index, frame))
                transport.write(frame.data)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(conn.wake.wait(), 0.3)
                self._conns.discard(conn)
                transport.abort()
                if conn.inflight:
                    conn.inflight.clear()
                    self.stats.frames += 1
                    self.stats.parked += 1
            finally:
                self._side.task_done()
