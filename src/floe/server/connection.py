"""One Kafka client connection: read frames, dispatch, answer in request order.

Ownership: a :class:`Connection` is created by :class:`floe.server.kafka.KafkaServer`
for each accepted socket and owns two tasks: the reader (this coroutine: frames in,
handlers called synchronously in arrival order) and the writer (replies out, awaited
in the same order). It ends when the peer closes, on a protocol violation (one log
line, the socket is closed, other connections carry on) or at shutdown, when it stops
reading and finishes the replies already queued.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from typing import Any

from floe.broker.apis import APIS, api_versions_response, supports
from floe.broker.core import Broker, RequestContext
from floe.errors import ErrorCode
from floe.protocol.codec import (
    MalformedRequestError,
    RequestHeader,
    UnsupportedVersionError,
    decode_request,
    encode_response,
    peek_header,
    response_class,
)
from floe.protocol.framing import SIZE

log = logging.getLogger("floe.server.connection")

API_VERSIONS = 18
MAX_IN_FLIGHT = 64
"""Requests read ahead of their replies before the reader stops reading (backpressure)."""
WRITE_HIGH_WATER = 4 * 1024 * 1024

_CLOSE = object()
_Item = tuple[RequestHeader, Any, float]
"""A request's header, its reply (or an awaitable of it) and when its frame was read
(``time.perf_counter()``: request latency is measured up to its reply being written)."""


class Connection:
    def __init__(
        self,
        broker: Broker,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        max_request_bytes: int,
    ) -> None:
        self._broker = broker
        self._reader = reader
        self._writer = writer
        self._max = max_request_bytes
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._queue: asyncio.Queue[_Item | None] = asyncio.Queue(MAX_IN_FLIGHT)
        self._stopping = False

    def stop_reading(self) -> None:
        """Begin a graceful close: no new requests; queued replies are still sent."""
        self._stopping = True
        self._reader.feed_eof()

    async def serve(self) -> None:
        writer_task = asyncio.create_task(self._write_loop(), name=f"kafka-writer {self.peer}")
        try:
            await self._read_loop()
        finally:
            await self._queue.put(None)
            try:
                await writer_task
            finally:
                self._writer.close()
                with contextlib.suppress(ConnectionError, OSError):
                    await self._writer.wait_closed()

    async def _read_loop(self) -> None:
        reader = self._reader
        while not self._stopping:
            try:
                prefix = await reader.readexactly(4)
                (size,) = SIZE.unpack(prefix)
                if size < 0 or size > self._max:
                    log.warning(
                        "connection.frame_rejected peer=%s size=%d max=%d",
                        self.peer,
                        size,
                        self._max,
                    )
                    return
                frame = await reader.readexactly(size)
            except (asyncio.IncompleteReadError, ConnectionError, OSError):
                return
            item = self._dispatch(frame)
            if item is _CLOSE:
                return
            await self._queue.put(item)  # type: ignore[arg-type]

    def _dispatch(self, frame: bytes) -> _Item | object:
        """Decode and run one request; returns the queued item or ``_CLOSE``."""
        started = time.perf_counter()
        try:
            header = peek_header(frame)
        except MalformedRequestError as exc:
            log.warning("connection.malformed_request peer=%s error=%s", self.peer, exc)
            return _CLOSE
        if not supports(header.api_key, header.api_version):
            return self._unsupported(header, started)
        try:
            header, body = decode_request(frame)
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
            return _CLOSE
        ctx = RequestContext(
            api_key=header.api_key,
            api_version=header.api_version,
            correlation_id=header.correlation_id,
            client_id=header.client_id,
            peer=self.peer,
            response_class=response_class(header.api_key, header.api_version),
        )
        try:
            reply = APIS[header.api_key].handler(self._broker, ctx, body)
        except Exception:
            log.exception(
                "request.failed peer=%s api=%s version=%d",
                self.peer,
                APIS[header.api_key].name,
                header.api_version,
            )
            self._broker.stats.error(header.api_key, ErrorCode.unknown_server_error)
            return _CLOSE
        return header, reply, started

    def _unsupported(self, header: RequestHeader, started: float) -> _Item | object:
        """ApiVersions of an unknown version gets a v0 error answer listing what we
        support (clients retry with it); anything else closes the connection."""
        if header.api_key == API_VERSIONS:
            v0 = RequestHeader(API_VERSIONS, 0, header.correlation_id, header.client_id)
            reply = api_versions_response(
                response_class(API_VERSIONS, 0), ErrorCode.unsupported_version
            )
            return v0, reply, started
        log.warning(
            "connection.unsupported_request peer=%s api_key=%d version=%d client=%s",
            self.peer,
            header.api_key,
            header.api_version,
            header.client_id,
        )
        return _CLOSE

    async def _write_loop(self) -> None:
        writer = self._writer
        stats = self._broker.stats
        broken = False
        while True:
            item = await self._queue.get()
            if item is None:
                return
            header, reply, started = item
            if broken:
                if inspect.iscoroutine(reply):
                    reply.close()
                continue
            try:
                if inspect.isawaitable(reply):
                    reply = await reply
                if reply is not None:
                    writer.writelines(encode_response(header, reply))
                    if writer.transport.get_write_buffer_size() > WRITE_HIGH_WATER:
                        await writer.drain()
                stats.request(header.api_key, time.perf_counter() - started, reply)
            except (ConnectionError, OSError):
                broken = True
                self.stop_reading()
            except Exception:
                log.exception(
                    "request.failed peer=%s api_key=%d version=%d",
                    self.peer,
                    header.api_key,
                    header.api_version,
                )
                stats.error(header.api_key, ErrorCode.unknown_server_error)
                broken = True
                self.stop_reading()
