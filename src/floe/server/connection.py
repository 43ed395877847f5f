"""One Kafka client connection: read frames, dispatch, answer in request order.

Ownership: a :class:`Connection` is created by :class:`floe.server.kafka.KafkaServer`
for each accepted socket and owns two tasks: the reader (this coroutine: frames in,
handlers called synchronously in arrival order) and the writer (replies out, awaited
in the same order). It ends when the peer closes, on a protocol violation (one log
line, the socket is closed, other connections carry on), when the server's reaper
closes it (:meth:`close`: idle, a request trickled too slowly, responses not read, the
client gone while its requests wait and the reader is muted), or
at shutdown, when it stops reading and finishes the replies already queued.

Bounds (Kafka's channel muting, with pipelining): the reader reads no further request
while ``Limits.max_in_flight`` requests are unanswered or while the connection holds
``Limits.max_queued_bytes`` (frames of requests still being answered, plus encoded
responses not yet accepted by the socket); the writer wakes it when that drains. So a
connection holds at most that many bytes plus one request and one response, whatever
the client sends or fails to read. The timestamps the reaper reads (``last_active``,
``frame_started``, ``stalled_since``) are written by the two tasks only.

Decoding costs time in proportion to a frame's items (array elements, tagged fields),
which a hostile frame can have by the million: a frame with more than
``Limits.inline_items`` is decoded, and its response encoded, on the server's worker
thread, so the event loop keeps serving other connections meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections import Counter
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, cast

from floe.broker import sasl
from floe.broker.apis import APIS, api_versions_response, supports
from floe.broker.core import Broker, CloseConnection, RequestContext
from floe.broker.stats import error_codes
from floe.config import BrokerConfig
from floe.config import broker as keys
from floe.errors import ErrorCode
from floe.protocol.codec import (
    Chunks,
    DecodeBudgetExceededError,
    MalformedRequestError,
    RequestHeader,
    UnsupportedVersionError,
    decode_request,
    encode_response,
    peek_header,
    response_class,
)
from floe.protocol.framing import FrameTooLargeError, read_frame_size
from floe.security.scram import AuthenticationError
from floe.security.session import SASL_AUTHENTICATE, Session

log = logging.getLogger("floe.server.connection")

API_VERSIONS = 18
MAX_IN_FLIGHT = 64
"""Requests read ahead of their replies before the reader stops reading (Kafka answers
one at a time; clients pipeline up to 5, more with librdkafka's defaults)."""
INLINE_DECODE_ITEMS = 4096
"""Frames with more items than this are decoded and answered off the event loop."""
WRITE_HIGH_WATER = 4 * 1024 * 1024
"""Buffered response bytes above which the writer waits for the socket to drain."""
UNAUTHENTICATED_MAX_FRAME = 512 * 1024
"""Largest frame a SASL listener reads before the client authenticated (Kafka's
``sasl.server.max.receive.size``): a stranger cannot make the broker buffer more."""
AUTHENTICATION_FAILED_LINGER_S = 5.0
"""How long a connection stays open after the answer to a failed authentication, for
the client to read it and close first; a client that does not is closed then."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What one connection may hold and how long it may take (docs/broker.md)."""

    max_request_bytes: int
    max_queued_bytes: int
    read_timeout_s: float
    write_timeout_s: float
    idle_timeout_s: float | None
    max_in_flight: int = MAX_IN_FLIGHT
    inline_items: int = INLINE_DECODE_ITEMS

    @classmethod
    def from_config(cls, config: BrokerConfig, max_request_bytes: int) -> Limits:
        idle_ms = config[keys.CONNECTIONS_MAX_IDLE_MS]
        return cls(
            max_request_bytes=max_request_bytes,
            max_queued_bytes=config[keys.CONNECTIONS_MAX_QUEUED_BYTES],
            read_timeout_s=config[keys.SOCKET_REQUEST_READ_TIMEOUT_MS] / 1000,
            write_timeout_s=config[keys.SOCKET_RESPONSE_WRITE_TIMEOUT_MS] / 1000,
            idle_timeout_s=None if idle_ms < 0 else idle_ms / 1000,
        )


@dataclass(slots=True)
class _Item:
    """A request on its way out: its reply (an entity, an awaitable of one, or None),
    the reply already encoded when it was ready at once, and what it holds."""

    header: RequestHeader
    reply: Any
    pending: bool
    """``reply`` is an awaitable."""
    chunks: Chunks | None
    held: int
    """Bytes counted against ``Limits.max_queued_bytes`` until it is written."""
    heavy: bool
    """Decoded off the loop: its reply is encoded there too."""
    started: float
    """When its frame was read (``time.perf_counter()``; latency runs to the write)."""
    raw: bool = False
    """A bare SASL token (after SaslHandshake v0): ``chunks`` go out as they are."""


def _chunks_size(chunks: Chunks) -> int:
    return sum(len(c) for c in chunks)


class Connection:
    def __init__(
        self,
        broker: Broker,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        limits: Limits,
        worker: Executor | None = None,
        *,
        session: Session | None = None,
    ) -> None:
        """``worker``: where frames over ``limits.inline_items`` are decoded and their
        responses encoded (None: on the loop). ``session``: the client's principal and
        SASL state (None: an anonymous PLAINTEXT session)."""
        self._broker = broker
        if session is None:
            from floe.config.security import ListenerSpec

            session = Session(ListenerSpec("PLAINTEXT", "PLAINTEXT", "", 0, "", 0))
        self.session = session
        self._reader = reader
        self._writer = writer
        self._limits = limits
        self._worker = worker
        peer = writer.get_extra_info("peername")
        self.host = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._queue: asyncio.Queue[_Item | None] = asyncio.Queue()
        self._in_flight = 0
        self._held = 0
        self._drained = asyncio.Event()
        self._high_water = min(WRITE_HIGH_WATER, limits.max_queued_bytes)
        writer.transport.set_write_buffer_limits(high=self._high_water)
        self._stopping = False
        self._broken = False
        self._peer_closed = False
        self.last_active = time.monotonic()
        """Last time a request was read or a response written."""
        self.frame_started: float | None = None
        """When the first byte of the frame being read arrived (None between frames)."""
        self.stalled_since: float | None = None
        """Since when the writer waits for a socket that accepts nothing (or None)."""
        self._stalled_buffer = 0

    def stop_reading(self) -> None:
        """Begin a graceful close: no new requests; queued replies are still sent. A
        plain TCP transport stops reading first: bytes a client still sends would
        otherwise reach the stream reader after its end (asyncio's "feed_data after
        feed_eof", logged as a fatal transport error for every client of a broker that
        stops: a cluster's failover, whose listeners are plain TCP)."""
        self._stopping = True
        transport = cast(asyncio.Transport, self._writer.transport)  # a socket's: it reads
        # not under TLS: its shutdown reads the client's close_notify, and a client of a
        # TLS listener (aiokafka) was once left with an unclosed socket after a close
        if not transport.is_closing() and transport.get_extra_info("sslcontext") is None:
            transport.pause_reading()
        self._reader.feed_eof()
        self._drained.set()

    def close(self) -> None:
        """Close now, dropping whatever is queued (the reaper's verdict)."""
        self._broken = True
        self.stop_reading()
        self._writer.transport.abort()

    def expired(self, now: float) -> str | None:
        """Why the reaper should close this connection now, or None (module docstring)."""
        limits = self._limits
        started = self.frame_started
        if started is not None and now - started > limits.read_timeout_s:
            return "read_timeout"
        if self.stalled_since is not None:
            buffered = self._writer.transport.get_write_buffer_size()
            if buffered < self._stalled_buffer:  # the client reads, however slowly
                self._stalled_buffer = buffered
                self.stalled_since = now
            elif now - self.stalled_since > limits.write_timeout_s:
                return "write_timeout"
            return None
        if self._in_flight and self._peer_gone():
            return "peer_closed"
        idle = limits.idle_timeout_s
        if (
            idle is not None
            and started is None
            and self._in_flight == 0
            and now - self.last_active > idle
        ):
            return "idle"
        return None

    def _peer_gone(self) -> bool:
        """The client closed its side while requests of it are still unanswered. A reader
        muted at its in-flight limit (long polls, parked JoinGroups) reads nothing, so it
        cannot see the close itself; the stream reader still records the end of stream
        the socket delivered."""
        return not self._stopping and bool(getattr(self._reader, "_eof", False))

    async def serve(self) -> None:
        writer_task = asyncio.create_task(self._write_loop(), name=f"kafka-writer {self.peer}")
        try:
            await self._read_loop()
        finally:
            if self._peer_closed or self._broken:
                # the client is gone (or the reaper closed it): nothing queued can reach
                # it, and a long poll (Fetch max_wait up to 2^31-1 ms) must not hold the
                # connection meanwhile
                self._broken = True
                writer_task.cancel()
            self._queue.put_nowait(None)
            try:
                await asyncio.gather(writer_task, return_exceptions=True)
                self._discard_queued()
                if self.session.close_after_reply and not self._broken:
                    await self._let_the_client_close()
            finally:
                self._writer.close()
                with contextlib.suppress(ConnectionError, OSError):
                    await self._writer.wait_closed()

    async def _let_the_client_close(self) -> None:
        """After the last reply of a failed authentication, wait (up to
        ``AUTHENTICATION_FAILED_LINGER_S``) for the client to close: a client that
        reads the reply and the close in one go may drop the reply (kafka-python 3.0
        reports "socket disconnected" instead of the authentication error)."""
        with contextlib.suppress(TimeoutError, ConnectionError, OSError):
            async with asyncio.timeout(AUTHENTICATION_FAILED_LINGER_S):
                while await self._reader.read(4096):
                    pass  # whatever a client still sends after its failure is dropped

    def _discard_queued(self) -> None:
        """Close the replies a cancelled writer left in the queue (never awaited)."""
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is not None and item.pending and inspect.iscoroutine(item.reply):
                item.reply.close()

    # -- reading ---------------------------------------------------------------------

    def _muted(self) -> bool:
        limits = self._limits
        # Strictly above: a buffer alone past the limit is past the transport's high
        # water too, so the writer is draining it and will wake the reader.
        return self._in_flight >= limits.max_in_flight or (
            self._held + self._writer.transport.get_write_buffer_size() > limits.max_queued_bytes
        )

    async def _read_loop(self) -> None:
        try:
            await self._read_frames()
        finally:
            self.frame_started = None

    async def _read_frames(self) -> None:
        reader = self._reader
        while not self._stopping:
            if self._muted():
                self._drained.clear()
                await self._drained.wait()
                continue
            try:
                prefix = await reader.read(4)  # what is there, 1 to 4 bytes (b"": closed)
                if not prefix:
                    self._peer_closed = not self._stopping
                    return
                self.frame_started = time.monotonic()
                if len(prefix) < 4:
                    prefix += await reader.readexactly(4 - len(prefix))
                most = self._limits.max_request_bytes
                if not self.session.authenticated:
                    most = min(most, UNAUTHENTICATED_MAX_FRAME)
                size = read_frame_size(prefix, most)
                frame = await reader.readexactly(size)
            except FrameTooLargeError as exc:
                log.warning(
                    "connection.frame_rejected peer=%s size=%d max=%d",
                    self.peer,
                    exc.size,
                    exc.max_size,
                )
                return
            except (asyncio.IncompleteReadError, ConnectionError, OSError):
                self._peer_closed = not self._stopping
                return
            self.frame_started = None
            self.last_active = time.monotonic()
            if self.session.raw_tokens:
                item = await self._raw_token(frame)
            else:
                item = await self._dispatch(frame)
            if item is None:
                return
            self._in_flight += 1
            self._held += item.held
            self._queue.put_nowait(item)
            if self.session.close_after_reply:  # its reply goes out, then the socket closes
                return

    async def _raw_token(self, frame: bytes) -> _Item | None:
        """Answer a bare SASL token (after SaslHandshake v0) with a bare token; None to
        close (a failed exchange, after the failure delay)."""
        started = time.perf_counter()
        try:
            answer = sasl.raw_token(self._broker, self.session, frame, self.peer)
        except AuthenticationError as exc:
            self._broker.stats.error(SASL_AUTHENTICATE, exc.code)
            await sasl.failure_delay(self._broker)
            return None
        header = RequestHeader(SASL_AUTHENTICATE, 0, 0, None)
        chunks: Chunks = [len(answer).to_bytes(4, "big"), answer]
        return _Item(header, None, False, chunks, 4 + len(answer), False, started, raw=True)

    async def _dispatch(self, frame: bytes) -> _Item | None:
        """Decode and run one request; returns the item to queue, or None to close."""
        started = time.perf_counter()
        try:
            header = peek_header(frame)
        except MalformedRequestError as exc:
            log.warning("connection.malformed_request peer=%s error=%s", self.peer, exc)
            return None
        refused = self.session.refuses(header.api_key)
        if refused is not None:
            log.warning(
                "connection.sasl_refused peer=%s api_key=%d principal=%s reason=%s",
                self.peer, header.api_key, self.session.principal, refused,
            )  # fmt: skip
            return None
        if not supports(header.api_key, header.api_version):
            return self._unsupported(header, started)
        heavy = False
        try:
            try:
                header, body = decode_request(frame, item_budget=self._limits.inline_items)
            except DecodeBudgetExceededError:
                heavy = True
                header, body = await self._off_loop(decode_request, frame)
        except UnsupportedVersionError:
            return self._unsupported(header, started)
        except MalformedRequestError as exc:
            log.warning(
                "connection.malformed_request peer=%s api_key=%d version=%d error=%s",
                self.peer,
                header.api_key,
                header.api_version,
                exc,
            )
            return None
        if heavy:
            log.info(
                "connection.heavy_request peer=%s api_key=%d version=%d bytes=%d",
                self.peer,
                header.api_key,
                header.api_version,
                len(frame),
            )
        ctx = RequestContext(
            api_key=header.api_key,
            api_version=header.api_version,
            correlation_id=header.correlation_id,
            client_id=header.client_id,
            peer=self.peer,
            response_class=response_class(header.api_key, header.api_version),
            session=self.session,
        )
        try:
            reply = APIS[header.api_key].handler(self._broker, ctx, body)
            if isinstance(reply, CloseConnection):
                log.info(
                    "connection.closed_by_broker peer=%s client=%s reason=%s",
                    self.peer,
                    header.client_id,
                    reply.reason,
                )
                self._broker.stats.request(
                    header.api_key, time.perf_counter() - started, reply.response
                )
                return None
            if inspect.isawaitable(reply):  # the coroutine may keep the frame alive
                return _Item(header, reply, True, None, len(frame), heavy, started)
            chunks = None
            if reply is not None and not heavy:
                chunks = encode_response(header, reply)
        except Exception:
            log.exception(
                "request.failed peer=%s api=%s version=%d",
                self.peer,
                APIS[header.api_key].name,
                header.api_version,
            )
            self._broker.stats.error(header.api_key, ErrorCode.unknown_server_error)
            return None
        held = _chunks_size(chunks) if chunks is not None else 0
        return _Item(header, reply, False, chunks, held, heavy, started)

    def _unsupported(self, header: RequestHeader, started: float) -> _Item | None:
        """ApiVersions of an unknown version gets a v0 error answer listing what we
        support (clients retry with it); anything else closes the connection."""
        if header.api_key == API_VERSIONS:
            v0 = RequestHeader(API_VERSIONS, 0, header.correlation_id, header.client_id)
            reply = api_versions_response(
                response_class(API_VERSIONS, 0), ErrorCode.unsupported_version
            )
            return _Item(v0, reply, False, None, 0, False, started)
        log.warning(
            "connection.unsupported_request peer=%s api_key=%d version=%d client=%s",
            self.peer,
            header.api_key,
            header.api_version,
            header.client_id,
        )
        return None

    async def _off_loop(self, fn: Any, *args: Any) -> Any:
        if self._worker is None:
            return fn(*args)
        return await asyncio.get_running_loop().run_in_executor(self._worker, fn, *args)

    # -- writing ---------------------------------------------------------------------

    async def _write_loop(self) -> None:
        writer = self._writer
        while True:
            item = await self._queue.get()
            if item is None:
                return
            try:
                if not self._broken:
                    await self._write(item)
            except (ConnectionError, OSError):
                self._broken = True
                self.stop_reading()
            except Exception:
                log.exception(
                    "request.failed peer=%s api_key=%d version=%d",
                    self.peer,
                    item.header.api_key,
                    item.header.api_version,
                )
                self._broker.stats.error(item.header.api_key, ErrorCode.unknown_server_error)
                self._broken = True
                self.stop_reading()
            finally:
                if item.pending and inspect.iscoroutine(item.reply):
                    item.reply.close()  # never awaited when broken; a no-op once done
                self._in_flight -= 1
                self._held -= item.held
                self._drained.set()
            if not self._broken and writer.transport.get_write_buffer_size() > self._high_water:
                await self._drain()

    async def _write(self, item: _Item) -> None:
        stats = self._broker.stats
        header, reply, chunks = item.header, item.reply, item.chunks
        if item.pending:
            reply = await reply
            if self._broken:
                return
        codes: Counter[int] | None = None
        if chunks is None and reply is not None:
            if item.heavy:
                chunks, codes = await self._off_loop(_encode_counting, header, reply)
            else:
                chunks = encode_response(header, reply)
        if chunks is not None:
            self._writer.writelines(chunks)
        self.last_active = time.monotonic()
        if item.raw:
            return
        seconds = time.perf_counter() - item.started
        if codes is None:
            stats.request(header.api_key, seconds, reply)
        else:
            stats.request(header.api_key, seconds, None)
            for code, n in codes.items():
                key = (header.api_key, code)
                stats.errors[key] = stats.errors.get(key, 0) + n

    async def _drain(self) -> None:
        """Wait until the socket took most of the buffered bytes; the reaper closes the
        connection if the client reads nothing for ``write_timeout_s``."""
        self._stalled_buffer = self._writer.transport.get_write_buffer_size()
        self.stalled_since = time.monotonic()
        try:
            await self._writer.drain()
        except (ConnectionError, OSError):
            self._broken = True
            self.stop_reading()
        finally:
            self.stalled_since = None
            self.last_active = time.monotonic()
            self._drained.set()


def _encode_counting(header: RequestHeader, reply: Any) -> tuple[Chunks, Counter[int]]:
    """Encode a response and count its error codes (both O(items): run off the loop)."""
    codes = Counter(code for code in error_codes(reply) if code)
    return encode_response(header, reply), codes
