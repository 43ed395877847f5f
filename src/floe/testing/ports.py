"""Free loopback ports for the servers a test or ``floe dev cluster`` starts.

A port picked by binding port 0 comes from the OS's ephemeral range, which the OS also
gives every outgoing connection and every other process that binds port 0: between the
pick and the server's own bind, another test worker's server could take it (a CI run
met an HTTP server on a broker's Kafka port). So ports are handed out from a slice of
their own per pytest-xdist worker (``PYTEST_XDIST_WORKER``; one slice outside pytest),
below the ephemeral range, in turn, each checked free by binding it. Processes that
share a slice (runs outside pytest-xdist side by side) each start at a place of their
own in it, so that a port one of them frees for a moment (a chaos run restarting etcd
on its ports) is not the next the other hands out.
"""

from __future__ import annotations

import os
import re
import socket
from contextlib import ExitStack
from pathlib import Path

FIRST_PORT = 10000
"""The first port of the first slice."""
SLICE = 5000
"""Ports per slice."""
_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_next: dict[int, int] = {}
"""Each slice's next port to try, in this process."""
_SPREAD = 2654435761
"""Knuth's multiplicative hash constant: spreads neighbouring process ids over the
slice."""


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports on ``host`` that are free now: from this worker's slice
    below the ephemeral range, or, where that slice would reach into it (a machine with
    a low ephemeral range, or many workers), from the OS (port 0). Every socket is held
    until all are picked, so they differ.

    Raises:
        OSError: not ``n`` free ports in the slice.
    """
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        first = _slice_start()
        if first is None:
            for s in socks:
                s.bind((host, 0))
        else:
            for s in socks:
                _bind_next(s, host, first)
        return [int(s.getsockname()[1]) for s in socks]


def _slice_start() -> int | None:
    """The first port of this process's slice, or None when it would not end below the
    ephemeral range."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    found = re.fullmatch(r"gw(\d+)", worker)
    start = FIRST_PORT + (int(found.group(1)) if found else 0) * SLICE
    try:
        low = int(_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):  # not Linux: the common default
        low = 32768
    return start if start + SLICE <= low else None


def _bind_next(sock: socket.socket, host: str, first: int) -> None:
    """Bind ``sock`` to the next free port of the slice starting at ``first``.

    Raises:
        OSError: every port of the slice is taken.
    """
    for _ in range(SLICE):
        offset = _next.get(first, os.getpid() * _SPREAD % SLICE)
        _next[first] = (offset + 1) % SLICE
        try:
            sock.bind((host, first + offset))
            return
        except OSError:
            continue
    raise OSError(f"no free port in {first}..{first + SLICE - 1}")
