"""Free loopback ports for the servers a test or ``floe dev cluster`` starts."""

from __future__ import annotations

import socket
from contextlib import ExitStack


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports on ``host`` that were free a moment ago (every socket is held
    until all are picked, so they differ)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind((host, 0))
        return [int(s.getsockname()[1]) for s in socks]
