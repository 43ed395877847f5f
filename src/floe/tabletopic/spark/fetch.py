"""Reading a range of a partition through the Kafka protocol: how table-topic Spark
tasks get their records from the broker, wherever they run.

:func:`fetch_range` walks ``[start, end)`` with Fetch requests and hands every whole
batch to a :class:`~floe.protocol.ranges.RangeAccount`, the accounting the local segment
reader (:func:`floe.storage.local.reader.scan_range`) uses too, so both say the same of
every offset: records, skipped control batches and aborted transactions (fetches are
read_committed: each response names the aborted transactions overlapping it, so the
range can be read from whichever broker leads the partition), unusable batches (each
batch's CRC is checked), and missing runs. Offsets below the log start
are found by the broker's OFFSET_OUT_OF_RANGE answer and a ListOffsets for the
earliest offset; offsets compacted or deleted away are gaps between batches; a log that
ends before ``end`` (a topic recreated meanwhile) leaves the rest missing.

One difference from the segment reader: a batch header that cannot frame the bytes
after it (disk damage the broker did not catch) makes the rest of the *range* a
:class:`~floe.protocol.ranges.BadBatch`, not the rest of the segment, as a fetch
cannot see where the next segment starts.

:class:`BrokerConnection` is the blocking transport: one TCP connection to the
broker's Kafka listener, timeouts on connect and on each request, and errors
(:class:`FetchError`) that name the broker's address. On a secured listener
(:class:`FetchAccess`) it speaks TLS, pinned to the broker's own certificate, and
authenticates with SASL as the broker's internal user (re-authenticating before the
session the broker granted runs out). While a task converts one
response, the next Fetch (from the offset after its last whole batch) is already in
flight, so the broker's reading overlaps the task's decoding. Memory: a response
carries at most ``max_bytes`` of records (:data:`FETCH_BYTES`), or one batch when a
single batch is larger; a task holds one at a time (the next waits in the socket's
buffers until it is received).
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

from floe.errors import ErrorCode, FloeError
from floe.protocol.batch import HEADER_SIZE, BatchHeader, read_header
from floe.protocol.client import (
    EARLIEST,
    FetchedPartition,
    ResponseError,
    decode_response,
    encode_request,
    fetch_request,
    fetched,
    list_offsets_request,
    listed_offset,
    sasl_authenticate_request,
    sasl_handshake_request,
)
from floe.protocol.framing import SIZE, FrameTooLargeError, read_frame_size
from floe.protocol.ranges import Chunk, RangeAccount, unusable

FETCH_BYTES = 4 * 1024 * 1024
"""Record bytes asked for per Fetch (the broker's ``fetch.max.bytes`` may cap it)."""
MAX_FRAME_BYTES = 256 * 1024 * 1024
"""Largest response frame accepted (a single batch larger than :data:`FETCH_BYTES`
comes whole; the broker's ``message.max.bytes`` bounds it far below this)."""
CONNECT_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 60.0
CLIENT_ID = "floe-table-topic"


REAUTH_AT = 0.8
"""Re-authenticate once this share of the session lifetime the broker granted is gone."""


@dataclass(frozen=True)
class FetchAccess:
    """How the pipeline's connections get in, as plain picklable data (it travels to
    Spark executors with the job).

    Attributes:
        tls_pin: the broker's certificate chain (PEM text): TLS, trusting exactly that
            certificate (no host name check: it is pinned). "" for a plaintext listener.
        mechanism: the SASL mechanism (SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN), "" for a
            listener without SASL.
        user / password: the broker's internal user (``__floe_pipeline``).
    """

    tls_pin: str = ""
    mechanism: str = ""
    user: str = ""
    password: str = ""

    def __repr__(self) -> str:  # never the password, in a log or a Spark UI
        return f"FetchAccess(tls={bool(self.tls_pin)}, mechanism={self.mechanism!r})"

    def tls(self) -> ssl.SSLContext | None:
        if not self.tls_pin:
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.check_hostname = False  # the certificate itself is the trust anchor
        ctx.load_verify_locations(cadata=self.tls_pin)
        ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
        return ctx


class FetchError(FloeError):
    """The broker cannot be reached, broke the connection, or answered a read with an
    error; the message names the broker's address."""


class Source(Protocol):
    """Where :func:`fetch_range` reads from: a broker (:class:`BrokerConnection`)."""

    address: str

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> FetchedPartition:
        """One partition's read_committed Fetch response entry from ``offset``."""

    def prefetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> None:
        """A hint: the next :meth:`fetch` will likely be this one (start it now)."""

    def earliest(self, topic: str, partition: int) -> int:
        """The partition's log start offset."""


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) as (host, port).

    Raises:
        ValueError: not ``host:port``.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"broker address {address!r} is not host:port")
    return host.strip("[]"), int(port)


class BrokerConnection:
    """A blocking Kafka connection to one broker, for one reader at a time.

    Owned by the task that opened it (not thread-safe). At most one request is in
    flight ahead of the caller: a :meth:`prefetch`, answered while the caller converts
    the previous response, and received by the :meth:`fetch` that asks for the same thing
    (any other request first receives and drops it). Closed by :meth:`close` (or leaving
    its ``with`` block); a failed request leaves it unusable (its stream position is
    unknown), so it is closed.
    """

    def __init__(
        self,
        address: str,
        *,
        access: FetchAccess | None = None,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        """Connect (TLS and SASL as ``access`` says).

        Raises:
            FetchError: the broker cannot be reached within ``connect_timeout_s``, the
                TLS handshake fails, or the broker refuses the credentials.
        """
        self.address = address
        self._access = access or FetchAccess()
        try:
            sock = socket.create_connection(split_address(address), timeout=connect_timeout_s)
            tls = self._access.tls()
            if tls is not None:
                sock = tls.wrap_socket(sock)
        except (OSError, ValueError) as exc:
            raise FetchError(f"cannot connect to the broker at {address}: {exc}") from None
        self._sock: socket.socket | None = sock
        sock.settimeout(request_timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._correlation = 0
        self._ahead: tuple[Any, tuple[str, int, int, int]] | None = None
        """The prefetch in flight: its request and (topic, partition, offset, max bytes)."""
        self._reauth_at: float | None = None
        self._lifetime_ms = 0
        if self._access.mechanism:
            self._authenticate()

    def _authenticate(self) -> None:
        """SaslHandshake v1, then the SCRAM exchange (or the PLAIN token) in
        SaslAuthenticate v2 requests.

        Raises:
            FetchError: the broker refused the mechanism or the credentials.
        """
        from floe.security.scram import AuthenticationError, ScramClient

        access = self._access
        handshake = self._call(sasl_handshake_request(access.mechanism))
        if handshake.error_code != ErrorCode.none:
            raise self._fail(f"SASL handshake: {ErrorCode(handshake.error_code).name}")
        if access.mechanism == "PLAIN":
            self._token(f"\0{access.user}\0{access.password}".encode())
        else:
            client = ScramClient(access.mechanism, access.user, access.password)
            try:
                server_first = self._token(client.first())
                client.verify(self._token(client.final(server_first)))
            except AuthenticationError as exc:
                raise self._fail(f"authentication: {exc}") from None
        self._reauth_at = None
        if self._lifetime_ms > 0:
            self._reauth_at = time.monotonic() + REAUTH_AT * self._lifetime_ms / 1000

    def _token(self, token: bytes) -> bytes:
        answer = self._call(sasl_authenticate_request(token))
        if answer.error_code != ErrorCode.none:
            raise self._fail(f"authentication failed: {answer.error_message}")
        self._lifetime_ms = int(answer.session_lifetime.total_seconds() * 1000)
        return bytes(answer.auth_bytes)

    def _call(self, body: Any) -> Any:
        self._send(body)
        return self._answer(body)

    def __enter__(self) -> BrokerConnection:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _fail(self, what: str) -> FetchError:
        self.close()
        return FetchError(f"broker {self.address}: {what}")

    def _receive(self, sock: socket.socket, size: int) -> bytearray:
        buf = bytearray(size)
        view = memoryview(buf)
        got = 0
        while got < size:
            n = sock.recv_into(view[got:])
            if n == 0:
                raise self._fail("connection closed by the broker")
            got += n
        return buf

    def _send(self, body: Any) -> None:
        sock = self._sock
        if sock is None:
            raise FetchError(f"broker {self.address}: connection closed")
        self._correlation += 1
        try:
            sock.sendall(encode_request(body, self._correlation, CLIENT_ID))
        except TimeoutError:
            raise self._fail("request not sent in time") from None
        except OSError as exc:
            raise self._fail(str(exc)) from None

    def _answer(self, body: Any) -> Any:
        """The response to ``body``, the newest request sent."""
        sock = self._sock
        if sock is None:
            raise FetchError(f"broker {self.address}: connection closed")
        try:
            size = read_frame_size(self._receive(sock, SIZE.size), MAX_FRAME_BYTES)
            frame = bytes(self._receive(sock, size))
        except TimeoutError:
            raise self._fail("no response in time") from None
        except (OSError, FrameTooLargeError) as exc:
            raise self._fail(str(exc)) from None
        try:
            correlation, response = decode_response(body, frame)
        except ResponseError as exc:
            raise self._fail(str(exc)) from None
        if correlation != self._correlation:
            raise self._fail(f"response to request {correlation}, expected {self._correlation}")
        return response

    def _drain(self) -> None:
        """Receive and drop the answer to a prefetch still in flight, if any."""
        if self._ahead is not None:
            ahead, self._ahead = self._ahead[0], None
            self._answer(ahead)

    def request(self, body: Any) -> Any:
        """Send one request (a kio entity) and return the kio response (after receiving
        and dropping the answer to a prefetch still in flight).

        Raises:
            FetchError: not connected, a socket error or timeout, or an undecodable
                response.
        """
        self._drain()
        self._reauthenticate_if_due()
        return self._call(body)

    def _reauthenticate_if_due(self) -> None:
        """KIP-368: a new exchange on the same connection before the broker's session
        lifetime runs out (the broker would close the connection after it)."""
        if self._reauth_at is not None and time.monotonic() >= self._reauth_at:
            self._authenticate()

    def prefetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> None:
        """Send now the Fetch that :meth:`fetch` with the same arguments will receive.

        Raises:
            FetchError: see :meth:`request`.
        """
        self._drain()
        self._reauthenticate_if_due()
        body = fetch_request(topic, partition, offset, max_bytes, committed=True)
        self._send(body)
        self._ahead = (body, (topic, partition, offset, max_bytes))

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> FetchedPartition:
        """Raises: FetchError: see :meth:`request`."""
        if self._ahead is not None and self._ahead[1] == (topic, partition, offset, max_bytes):
            body, self._ahead = self._ahead[0], None
            response = self._answer(body)
        else:
            response = self.request(
                fetch_request(topic, partition, offset, max_bytes, committed=True)
            )
        try:
            return fetched(response, topic, partition)
        except ResponseError as exc:
            raise self._fail(str(exc)) from None

    def earliest(self, topic: str, partition: int) -> int:
        """Raises: FetchError: see :meth:`request`, or the broker's error code."""
        response = self.request(list_offsets_request(topic, partition, EARLIEST))
        try:
            found = listed_offset(response, topic, partition)
        except ResponseError as exc:
            raise self._fail(str(exc)) from None
        if found.error is not ErrorCode.none:
            raise FetchError(
                f"broker {self.address}: list offsets of {topic}-{partition}: {found.error.name}"
            )
        return found.offset


def _frame(data: bytes) -> tuple[list[BatchHeader], str | None]:
    """The whole batches at the start of a response, and why framing stopped before its
    end (None: at its end, or at a partial last batch, which a broker may send)."""
    headers: list[BatchHeader] = []
    i = 0
    while i + HEADER_SIZE <= len(data):
        h = read_header(data, i)
        reason = unusable(h)
        if reason is not None:
            return headers, reason
        if i + h.size > len(data):
            break
        headers.append(h)
        i += h.size
    return headers, None


def fetch_range(
    source: Source,
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    verify_crc: bool = True,
    max_bytes: int = FETCH_BYTES,
) -> Iterator[Chunk]:
    """Every offset of ``[start, end)``, in order, accounted for exactly once, read with
    Fetch requests: the same chunks as :func:`floe.storage.local.reader.scan_range`
    (see the module docstring for the one difference).

    Raises:
        FetchError: the broker cannot be read (unreachable, an error code other than
            OFFSET_OUT_OF_RANGE, such as UNKNOWN_TOPIC_OR_PARTITION for a deleted
            topic), or a response makes no progress.
    """
    account = RangeAccount(start, end, (), verify_crc)
    while account.pos < end:
        before = account.pos
        part = source.fetch(topic, partition, before, max_bytes)
        if part.error is ErrorCode.offset_out_of_range:
            earliest = source.earliest(topic, partition)
            if earliest <= before:
                break  # beyond the log's end: nothing more to read
            account.missing_to(earliest)
            continue
        if part.error is not ErrorCode.none:
            raise FetchError(
                f"broker {source.address}: fetch of {topic}-{partition} at offset {before}: "
                f"{part.error.name}"
            )
        for producer_id, first in part.aborted:
            account.abort(producer_id, first)
        data = part.records
        if not data:
            break  # nothing at or after the offset
        headers, broken = _frame(data)
        if headers and broken is None and headers[-1].next_offset < end:
            source.prefetch(topic, partition, headers[-1].next_offset, max_bytes)
        done = False
        for h in headers:
            if h.next_offset <= account.pos:
                continue
            if h.base_offset >= end:
                done = True
                break
            yield from account.batch(data, h, h.position)
            if account.pos >= end:
                break
        if broken is not None:
            yield from account.bad_to(end, f"{broken} in a fetch from offset {before}")
            return
        if done:
            break
        if account.pos == before:
            raise FetchError(
                f"broker {source.address}: fetch of {topic}-{partition} at offset {before}: "
                f"no whole batch at or after it in {len(data)} bytes"
            )
    yield from account.finish()
