"""The etcd store's connection: one gRPC channel to one endpoint at a time, each call
within the deadline of the store's public call, and etcd's or the network's failures as
one-line :class:`~floe.cluster.interface.MetadataUnavailableError`.

A channel that failed (no answer in time, the connection refused or reset) is closed
and the next call opens a new one, to the next endpoint when there are several. gRPC
would otherwise keep the failed channel and, after a restart of etcd, fail calls at once
for as long as its reconnect backoff lasts (up to two minutes): a fresh channel connects
at the first call, as a new HTTP request would. A call is never retried (a write whose
answer was lost may have been applied: the store reads before it decides again).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import grpc
from etcd3.etcdrpc import rpc_pb2_grpc

from floe.cluster.interface import MetadataUnavailableError

R = TypeVar("R")

_OPTIONS = [
    ("grpc.max_receive_message_length", -1),  # a range of every key of a large cluster
    ("grpc.enable_retries", 0),  # never retried (see the module docstring)
]
_NO_ANSWER = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
    }
)
"""Statuses of a call etcd did not answer (the channel's or the connection's)."""


class LeaseNotFoundError(MetadataUnavailableError):
    """etcd does not know the lease a request named (it expired or was revoked)."""


class Stubs:
    """etcd's KV and Lease services on one channel, to the endpoint ``where`` names."""

    def __init__(self, channel: grpc.Channel, where: str) -> None:
        self.channel = channel
        self.where = where
        # the generated service stubs are untyped (their messages are typed)
        self.kv = rpc_pb2_grpc.KVStub(channel)  # type: ignore[no-untyped-call]
        self.lease = rpc_pb2_grpc.LeaseStub(channel)  # type: ignore[no-untyped-call]


class Connection:
    """See the module docstring. Used by one thread at a time (the store's owner)."""

    def __init__(self, endpoints: list[tuple[str, int]], timeout_s: float) -> None:
        self._endpoints = endpoints
        self._timeout_s = timeout_s
        self._current = 0
        self._stubs: Stubs | None = None

    @property
    def where(self) -> str:
        host, port = self._endpoints[self._current]
        return f"etcd at {host}:{port}"

    def call(self, request: Callable[[Stubs, float], R], deadline: float) -> R:
        """``request(stubs, seconds left)`` on the current endpoint's channel, before
        ``deadline`` (``time.monotonic()``).

        Raises:
            MetadataUnavailableError: no answer in time, or etcd unreachable (the channel
                is closed and the next call goes to the next endpoint), or etcd refused
                the request (:class:`LeaseNotFoundError` when it named an unknown lease).
        """
        where = self.where
        timed_out = f"{where}: no answer within {self._timeout_s:g} s"
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise MetadataUnavailableError(timed_out)
        if self._stubs is None:
            host, port = self._endpoints[self._current]
            channel = grpc.insecure_channel(f"{host}:{port}", options=_OPTIONS)
            self._stubs = Stubs(channel, where)
        try:
            return request(self._stubs, remaining)
        except grpc.RpcError as exc:
            code, details = exc.code(), " ".join(str(exc.details() or "").split())
            if code == grpc.StatusCode.NOT_FOUND:
                raise LeaseNotFoundError(f"{where}: {details}") from None
            if code not in _NO_ANSWER:
                raise MetadataUnavailableError(f"{where}: {details}") from None
            self._drop()
            self._current = (self._current + 1) % len(self._endpoints)
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise MetadataUnavailableError(timed_out) from None
            raise MetadataUnavailableError(f"{where}: {_reason(details)}") from None

    def close(self) -> None:
        self._drop()

    def _drop(self) -> None:
        stubs, self._stubs = self._stubs, None
        if stubs is not None:
            stubs.channel.close()


def _reason(details: str) -> str:
    """The socket error in gRPC's account of a failed connection, else its account."""
    lowered = details.lower()
    for error in ("connection refused", "connection reset", "broken pipe", "no route to host"):
        if error in lowered:
            return error
    return details[:200] or "no answer"
