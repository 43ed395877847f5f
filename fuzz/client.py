"""A minimal blocking Kafka client on kio, for setting up and checking a fuzz run.

Used outside the hot path only: ApiVersions, Metadata and CreateTopics at start, and
decoding the few responses an oracle needs. One :class:`KioClient` owns one socket;
close it (or use it as a context manager) when done.
"""

from __future__ import annotations

import io
import socket
from typing import Any

from kio.index import load_response_schema
from kio.serial import entity_reader, entity_writer

from fuzz.layout import request_schema
from fuzz.wire import I32, frame, request_header


def encode_request(body: Any, correlation_id: int, client_id: bytes = b"fuzz") -> bytes:
    """A framed request for the kio request object ``body``."""
    cls = type(body)
    buf = io.BytesIO()
    entity_writer(cls)(buf, body)
    head = request_header(
        cls.__api_key__,
        cls.__version__,
        correlation_id,
        client_id,
        cls.__header_schema__.__flexible__,
    )
    return frame(head + buf.getvalue())


def decode_response(api_key: int, version: int, payload: bytes) -> Any:
    """Decode a response frame's payload (correlation id onwards) with kio.

    Raises:
        Exception: whatever kio raises for bytes that do not match the schema.
    """
    cls = load_response_schema(api_key, version)
    header_size = 4
    if cls.__flexible__ and api_key != 18:  # ApiVersions keeps response header v0
        header_size = 5
    body, _ = entity_reader(cls)(memoryview(payload), header_size)
    return body


class KioClient:
    """One blocking connection; requests are answered in order."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._cid = 0

    def __enter__(self) -> KioClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def _exactly(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self._sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            buf += chunk
        return bytes(buf)

    def call(self, body: Any) -> Any:
        """Send one request object and return the decoded response.

        Raises:
            ConnectionError: the broker closed the connection.
            OSError: socket errors and timeouts.
        """
        self._cid += 1
        self._sock.sendall(encode_request(body, self._cid))
        size = I32.unpack(self._exactly(4))[0]
        payload = self._exactly(size)
        cls = type(body)
        return decode_response(cls.__api_key__, cls.__version__, payload)

    def raw(self, framed: bytes) -> bytes:
        """Send an already framed request; the reply's payload (correlation id on).

        Raises:
            ConnectionError: the broker closed the connection.
        """
        self._sock.sendall(framed)
        size = I32.unpack(self._exactly(4))[0]
        return self._exactly(size)

    def request(self, api_key: int, version: int, **fields: Any) -> Any:
        """Build kio's request ``api_key``/``version`` from ``fields`` and call it."""
        return self.call(request_schema(api_key, version)(**fields))
