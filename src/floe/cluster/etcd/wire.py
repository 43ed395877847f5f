"""etcd's KV and lease messages as :class:`~floe.cluster.etcd.EtcdMetadataStore` builds
them: the requests, compares and operations of its transactions (etcd's own protobuf
messages, generated from its ``rpc.proto`` and shipped by ``python3-etcd3``), the keys
an answer holds, and the canonical form of every value it writes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from etcd3.etcdrpc import kv_pb2, rpc_pb2

from floe.cluster.interface import Ownership
from floe.errors import ConfigError

KeyValue = kv_pb2.KeyValue
"""One key as a range returned it (``key``, ``value``, ``mod_revision``, ``lease``)."""
Compare = rpc_pb2.Compare
RequestOp = rpc_pb2.RequestOp
RangeRequest = rpc_pb2.RangeRequest


@dataclass(frozen=True, slots=True)
class Txn:
    """A transaction's outcome: which branch ran, and what each range request of that
    branch returned, in order."""

    succeeded: bool
    ranges: list[list[KeyValue]]


def endpoint(text: str) -> tuple[str, int]:
    host, _, port = text.strip().rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"etcd endpoint {text.strip()!r} is not host:port")
    return host, int(port)


def dumps(value: dict[str, Any]) -> bytes:
    """The one canonical form every value is written in (a commit compares the owner's
    bytes)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def prefix_end(prefix: bytes) -> bytes:
    """The first key after every key starting with ``prefix`` (etcd's range_end)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return b"\0"  # every key
    return stripped[:-1] + bytes([stripped[-1] + 1])


def range_of(key: bytes, end: bytes = b"") -> RangeRequest:
    """``key`` alone, or every key from it up to ``end`` (excluded)."""
    return RangeRequest(key=key, range_end=end)


def range_request(key: bytes) -> RequestOp:
    return RequestOp(request_range=range_of(key))


def put(key: bytes, value: bytes, lease: int = 0) -> RequestOp:
    return RequestOp(request_put=rpc_pb2.PutRequest(key=key, value=value, lease=lease))


def delete(key: bytes, end: bytes = b"") -> RequestOp:
    """Delete ``key``, or every key from it up to ``end`` (excluded)."""
    return RequestOp(request_delete_range=rpc_pb2.DeleteRangeRequest(key=key, range_end=end))


def created(key: bytes, revision: int) -> Compare:
    """Compare: ``key`` was created at ``revision`` (0: it does not exist)."""
    return Compare(key=key, result=Compare.EQUAL, target=Compare.CREATE, create_revision=revision)


def modified(key: bytes, revision: int) -> Compare:
    """Compare: ``key`` was last written at ``revision`` (nobody wrote it since)."""
    return Compare(key=key, result=Compare.EQUAL, target=Compare.MOD, mod_revision=revision)


def value_is(key: bytes, value: bytes) -> Compare:
    return Compare(key=key, result=Compare.EQUAL, target=Compare.VALUE, value=value)


def txn_request(
    compare: list[Compare], success: list[RequestOp], failure: list[RequestOp]
) -> rpc_pb2.TxnRequest:
    return rpc_pb2.TxnRequest(compare=compare, success=success, failure=failure)


def txn_outcome(response: rpc_pb2.TxnResponse) -> Txn:
    ranges = [
        list(r.response_range.kvs) for r in response.responses if r.HasField("response_range")
    ]
    return Txn(response.succeeded, ranges)


def ownership(value: bytes) -> Ownership:
    decoded = json.loads(value)
    return Ownership(decoded["owner"], decoded["epoch"])
