"""The test process's event loops (helpers/closing_loops.py): a TLS connection its
client closed without waiting, while the server was too busy to answer the close, is
closed before the loop closes, where asyncio's own loop leaves the socket to the
garbage collector (the "unclosed transport" a fresh-clone CI run failed a test on)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ssl
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from helpers.certs import Pki, make_pki
from helpers.closing_loops import ClosingEventLoop, ClosingEventLoopPolicy

STALL_S = 0.5
"""How long the server's loop stalls while a client closes (a broker on a loaded
machine): the TLS layer answers a close_notify at once, unless its loop is busy."""


@dataclass(frozen=True)
class TlsServer:
    port: int
    stall: Callable[[], None]
    """Block the server's loop for :data:`STALL_S`; returns once it is blocked."""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def tls_server(pki: Pki) -> Iterator[TlsServer]:
    """A TLS server on its own thread and loop that reads each connection to its end."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    loop = asyncio.new_event_loop()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()

    async def serve() -> asyncio.Server:
        return await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)

    def stall() -> None:
        blocked = threading.Event()

        def block() -> None:
            blocked.set()
            time.sleep(STALL_S)

        loop.call_soon_threadsafe(block)
        assert blocked.wait(10)

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = asyncio.run_coroutine_threadsafe(serve(), loop).result(10)
    try:
        yield TlsServer(server.sockets[0].getsockname()[1], stall)
    finally:

        async def stop() -> None:
            server.close()
            await server.wait_closed()
            for task in asyncio.all_tasks() - {asyncio.current_task()}:
                task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def unclosed_after(run: Callable[[], None]) -> list[str]:
    """The "unclosed transport" warnings the garbage collector gives after ``run``."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        run()
        gc.collect()
    return [str(w.message) for w in seen if str(w.message).startswith("unclosed transport")]


def close_without_waiting(
    pki: Pki, server: TlsServer, loop_factory: Callable[[], asyncio.AbstractEventLoop]
) -> Callable[[], None]:
    """A client that connects, sends, and closes without waiting for the close (as
    aiokafka closes its bootstrap connection) while the server's loop stalls, on a loop
    of ``loop_factory`` that is closed as soon as the client returns (as ``asyncio.run``
    does)."""

    async def client() -> None:
        context = ssl.create_default_context(cafile=str(pki.ca_cert))
        _, writer = await asyncio.open_connection(
            "127.0.0.1", server.port, ssl=context, server_hostname="localhost"
        )
        writer.write(b"request")
        await writer.drain()
        server.stall()
        writer.close()

    def run() -> None:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(client())

    return run


def test_asyncio_own_loop_leaves_such_a_socket_to_the_garbage_collector(
    pki: Pki, tls_server: TlsServer
) -> None:
    """The failure mode itself, so that the next test can fail."""
    run = close_without_waiting(pki, tls_server, asyncio.SelectorEventLoop)
    assert unclosed_after(run), "asyncio's own loop waited for the close: nothing to prove"


def test_the_test_loops_wait_for_a_tls_close_the_client_did_not_await(
    pki: Pki, tls_server: TlsServer
) -> None:
    assert isinstance(asyncio.get_event_loop_policy(), ClosingEventLoopPolicy)  # conftest
    assert unclosed_after(close_without_waiting(pki, tls_server, ClosingEventLoop)) == []
