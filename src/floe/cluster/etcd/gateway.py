"""The etcd gRPC gateway's JSON, as :class:`~floe.cluster.etcd.EtcdMetadataStore` speaks
it: keys and values in base64, int64 as strings, zeros left out; the request, compare
and answer shapes of its KV and lease calls; and its errors in one line."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from floe.cluster.interface import Ownership
from floe.errors import ConfigError

if TYPE_CHECKING:
    from etcd3gw.client import Etcd3Client


@dataclass(frozen=True, slots=True)
class KeyValue:
    """One key as a range returned it."""

    key: bytes
    value: bytes
    mod_revision: int
    lease: int


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


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


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


def range_call(client: Etcd3Client, *, body: dict[str, Any]) -> Any:
    """One Range request through the gateway (its JSON answer)."""
    return client.post(client.get_url("/kv/range"), json=body)


def range_of(key: bytes, end: bytes | None = None) -> dict[str, Any]:
    request = {"key": b64(key)}
    if end is not None:
        request["range_end"] = b64(end)
    return request


def range_request(key: bytes) -> dict[str, Any]:
    return {"request_range": range_of(key)}


def put(key: bytes, value: bytes, lease: int = 0) -> dict[str, Any]:
    return {"request_put": {"key": b64(key), "value": b64(value), "lease": lease}}


def delete(key: bytes) -> dict[str, Any]:
    return {"request_delete_range": range_of(key)}


def created(key: bytes, revision: int) -> dict[str, Any]:
    """Compare: ``key`` was created at ``revision`` (0: it does not exist)."""
    return {"key": b64(key), "result": "EQUAL", "target": "CREATE", "create_revision": revision}


def modified(key: bytes, revision: int) -> dict[str, Any]:
    """Compare: ``key`` was last written at ``revision`` (nobody wrote it since)."""
    return {"key": b64(key), "result": "EQUAL", "target": "MOD", "mod_revision": revision}


def value_is(key: bytes, value: bytes) -> dict[str, Any]:
    return {"key": b64(key), "result": "EQUAL", "target": "VALUE", "value": b64(value)}


def key_value(kv: dict[str, Any]) -> KeyValue:
    """A key from the gateway (bytes in base64, int64 as strings, zeros left out)."""
    return KeyValue(
        key=base64.b64decode(kv["key"]),
        value=base64.b64decode(kv.get("value", "")),
        mod_revision=int(kv.get("mod_revision", 0)),
        lease=int(kv.get("lease", 0)),
    )


def ownership(value: bytes) -> Ownership:
    decoded = json.loads(value)
    return Ownership(decoded["owner"], decoded["epoch"])


def why(exc: Exception) -> tuple[int, str]:
    """etcd's gRPC status code and message when it answered with an error; else -1 and
    the socket error at the root of the exception chain (requests and urllib3 wrap it
    several times); in one line either way."""
    try:
        body = json.loads(getattr(exc, "detail_text", None) or "")
        return int(body["code"]), " ".join(str(body["message"]).split())
    except (ValueError, TypeError, KeyError):
        pass  # not an answer of etcd's
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.strerror:
            return -1, seen.strerror.lower()
        seen = seen.__cause__ or seen.__context__
    return -1, " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
