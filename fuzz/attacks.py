"""Connection-level attacks that run beside the frame lanes: floods and slow clients.

- :func:`flood`: ``n`` connections opened at once, each asks ApiVersions, all held
  open for a while, then closed together.
- :func:`trickle`: slowloris clients sending a valid request one byte at a time.
- :func:`never_read`: clients that pipeline Fetch requests for megabytes of data with a
  tiny receive buffer and never read a byte of the answers.

Each returns plain counts for the report: the oracles that judge them (broker alive,
RSS budget, descriptors back to baseline, sentinel latency) are the run's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from typing import Any

from fuzz.client import encode_request
from fuzz.layout import request_schema
from fuzz.seeds import Topic, build
from fuzz.wire import I32


def _api_versions() -> bytes:
    cls = request_schema(18, 3)
    return encode_request(cls(client_software_name="flood", client_software_version="1"), 7)


async def _open(host: str, port: int, rcvbuf: int | None = None) -> tuple[Any, Any]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, port))
    return await asyncio.open_connection(sock=sock)


async def flood(host: str, port: int, n: int, hold_s: float) -> dict[str, Any]:
    """Open ``n`` connections at once; count how many were answered or refused."""
    request = _api_versions()
    writers: list[asyncio.StreamWriter] = []
    answered = refused = 0
    t0 = time.monotonic()

    async def one() -> None:
        nonlocal answered, refused
        try:
            reader, writer = await _open(host, port)
        except OSError:
            refused += 1
            return
        writers.append(writer)
        try:
            writer.write(request)
            size = I32.unpack(await asyncio.wait_for(reader.readexactly(4), 30))[0]
            await asyncio.wait_for(reader.readexactly(size), 30)
            answered += 1
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            refused += 1

    await asyncio.gather(*(one() for _ in range(n)))
    opened_s = time.monotonic() - t0
    await asyncio.sleep(hold_s)
    for writer in writers:
        writer.close()
    return {
        "connections": n,
        "answered": answered,
        "refused_or_closed": refused,
        "seconds_to_open": round(opened_s, 2),
    }


async def trickle(host: str, port: int, n: int, duration_s: float) -> dict[str, Any]:
    """``n`` clients each send a Metadata request one byte every 0.5 s; count how many
    the broker disconnected before ``duration_s`` ended."""
    request = encode_request(build(request_schema(3, 1), Topic("fuzz-plain", "plain")), 9)
    closed_by_broker = 0

    async def one() -> None:
        nonlocal closed_by_broker
        try:
            reader, writer = await _open(host, port)
        except OSError:
            return
        deadline = time.monotonic() + duration_s
        try:
            for i in range(len(request) - 1):  # never the last byte
                if time.monotonic() > deadline:
                    break
                writer.write(request[i : i + 1])
                await writer.drain()
                try:
                    if await asyncio.wait_for(reader.read(1), 0.5) == b"":
                        closed_by_broker += 1
                        break
                except TimeoutError:
                    continue
        except OSError:
            closed_by_broker += 1
        finally:
            writer.close()

    await asyncio.gather(*(one() for _ in range(n)))
    return {"connections": n, "closed_by_broker": closed_by_broker}


async def never_read(
    host: str, port: int, topic: Topic, *, n: int, requests: int, duration_s: float
) -> dict[str, Any]:
    """``n`` clients pipeline ``requests`` Fetches each and never read the answers."""
    fetch = encode_request(build(request_schema(1, 11), topic), 11)
    closed_by_broker = 0

    async def one() -> None:
        nonlocal closed_by_broker
        try:
            reader, writer = await _open(host, port, rcvbuf=4096)
        except OSError:
            return
        try:
            writer.write(fetch * requests)
            await asyncio.sleep(duration_s)
            # Now read: a broker that gave up on us has closed, so the bytes end.
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                try:
                    chunk = await asyncio.wait_for(reader.read(1 << 20), 0.5)
                except TimeoutError:
                    break
                if not chunk:
                    closed_by_broker += 1
                    break
        except OSError:
            closed_by_broker += 1
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    await asyncio.gather(*(one() for _ in range(n)))
    return {"connections": n, "requests_each": requests, "closed_by_broker": closed_by_broker}
