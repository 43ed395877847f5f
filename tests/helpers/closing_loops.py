"""Event loops for the test process that let their client sockets finish closing
before the loop closes.

A Kafka client in the test process may close a connection without waiting for it:
aiokafka closes its bootstrap connection, and one that failed SASL, that way. Over TLS
a close is a round trip (the client's close_notify, then the broker's answer, then the
socket closes), and ``asyncio.run`` closes its loop as soon as the test's coroutine
returns. On a loaded machine the broker's answer can come later than that: the socket
outlives its loop and is left to the garbage collector, whose ResourceWarning
("unclosed transport") then fails whichever test it happens to run in (a fresh-clone CI
run once failed a reauthentication test so).

:class:`ClosingEventLoop` remembers every socket it connected and, when asked to close,
first runs on until each of them is closed, for at most :data:`CLOSE_WAIT_S`; then it
closes. A socket its client never closes is still open after that wait and still
reported by the garbage collector, as before: nothing a test leaks is hidden.
:class:`ClosingEventLoopPolicy` makes it the loop of ``asyncio.run`` and
``asyncio.new_event_loop`` (``tests/conftest.py`` installs it).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

CLOSE_WAIT_S = 30.0
"""asyncio's own bound on a TLS close (``ssl_shutdown_timeout``): after it asyncio
aborts the connection itself."""
POLL_S = 0.01


class ClosingEventLoop(asyncio.SelectorEventLoop):
    """A selector loop whose :meth:`close` waits for the sockets it connected.

    Ownership: the loop's own thread; :attr:`_connected` grows with each
    :meth:`create_connection` and is emptied by :meth:`close`.
    """

    def __init__(self) -> None:
        super().__init__()
        self._connected: list[Any] = []
        """The ``socket`` extra of each connection made (asyncio's TransportSocket: its
        ``fileno()`` is -1 once the socket is closed)."""

    async def create_connection(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        transport, protocol = await super().create_connection(*args, **kwargs)
        self._connected.append(transport.get_extra_info("socket"))
        return transport, protocol

    def open_sockets(self) -> int:
        """How many of the sockets this loop connected are not closed yet."""
        return sum(1 for sock in self._connected if sock is not None and sock.fileno() != -1)

    def close(self) -> None:
        if not self.is_closed() and not self.is_running():
            deadline = time.monotonic() + CLOSE_WAIT_S
            while self.open_sockets() and time.monotonic() < deadline:
                self.run_until_complete(asyncio.sleep(POLL_S))
        self._connected.clear()
        super().close()


class ClosingEventLoopPolicy(asyncio.DefaultEventLoopPolicy):
    """The default policy, with :class:`ClosingEventLoop` as every new loop."""

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return ClosingEventLoop()
