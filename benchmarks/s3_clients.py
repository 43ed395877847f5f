"""The S3 client comparison that chose obstore for ``storage.type = s3``.

The same five requests against the same SeaweedFS bucket, from three Python clients:
obstore (Rust ``object_store``, what Floe uses), boto3, and pyarrow's
``S3FileSystem`` (the AWS C++ SDK). Per operation and client, ``samples`` calls are
timed one at a time (after one unmeasured warm-up call), giving p50 and p99 per
repetition; repetitions alternate the client order like the broker suites do.

The requests are the ones Floe makes: a 16 KiB PUT (a small WAL object on the acks=all
path), a 4 MiB PUT (a full WAL or partition object), a 64 KiB range GET (a read behind
the cache), a LIST of 200 keys (start-up) and a conditional PUT (``If-None-Match: *``,
``topics.json`` and the WAL sequence). pyarrow's filesystem API has no conditional
write: that cell is recorded as a failure saying so.

Runs in the suite's own process (the brokers are not started yet); every client is
imported lazily, here only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.harness import Workload, percentile
from floe.testing.seaweed import SeaweedServer

CLIENTS = ("obstore", "boto3", "pyarrow")
BASELINE = "obstore"
LIST_KEYS = 200
RANGE_START = 100_000
RANGE_BYTES = 64 * 1024


@dataclass(frozen=True)
class Operation:
    """One timed request kind; ``share`` scales the suite's sample count for it."""

    key: str
    title: str
    share: float


OPERATIONS = (
    Operation("put-16k", "PUT 16 KiB", 1.0),
    Operation("put-4m", "PUT 4 MiB", 0.1),
    Operation("get-range-64k", "range GET 64 KiB of a 4 MiB object", 1.0),
    Operation("list-200", f"LIST {LIST_KEYS} keys", 0.25),
    Operation("put-if-none-match", "conditional PUT 16 KiB (If-None-Match: *)", 0.25),
)


class UnsupportedError(Exception):
    """The client has no API for the operation."""


class _Client:
    """One client's five calls, on keys under ``<bucket>/<name>/``."""

    name = "client"

    def put(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    def put_if_absent(self, key: str, data: bytes) -> None:
        """Raises: UnsupportedError (the client cannot), or the client's conflict error."""
        raise NotImplementedError

    def get_range(self, key: str, start: int, length: int) -> bytes:
        raise NotImplementedError

    def count(self, prefix: str) -> int:
        """Keys under ``prefix`` (one LIST request for up to 1000 keys)."""
        raise NotImplementedError


class _Obstore(_Client):
    name = "obstore"

    def __init__(self, server: SeaweedServer, bucket: str) -> None:
        from obstore.store import S3Store

        self._store = S3Store(
            bucket,
            endpoint=server.s3_endpoint,
            region=server.region,
            access_key_id=server.access_key,
            secret_access_key=server.secret_key,
            virtual_hosted_style_request=False,
            client_options={"allow_http": True},
        )

    def put(self, key: str, data: bytes) -> None:
        import obstore

        obstore.put(self._store, key, data)

    def put_if_absent(self, key: str, data: bytes) -> None:
        import obstore

        obstore.put(self._store, key, data, mode="create")

    def get_range(self, key: str, start: int, length: int) -> bytes:
        import obstore

        return bytes(obstore.get_range(self._store, key, start=start, length=length))

    def count(self, prefix: str) -> int:
        import obstore

        return sum(len(page) for page in obstore.list(self._store, prefix=prefix))


class _Boto3(_Client):
    name = "boto3"

    def __init__(self, server: SeaweedServer, bucket: str) -> None:
        self._s3 = server.s3_client()
        self._bucket = bucket

    def put(self, key: str, data: bytes) -> None:
        self._s3.put_object(Bucket=self._bucket, Key=key, Body=data)

    def put_if_absent(self, key: str, data: bytes) -> None:
        self._s3.put_object(Bucket=self._bucket, Key=key, Body=data, IfNoneMatch="*")

    def get_range(self, key: str, start: int, length: int) -> bytes:
        got = self._s3.get_object(
            Bucket=self._bucket, Key=key, Range=f"bytes={start}-{start + length - 1}"
        )
        data: bytes = got["Body"].read()
        return data

    def count(self, prefix: str) -> int:
        listed = self._s3.list_objects_v2(Bucket=self._bucket, Prefix=prefix)
        return len(listed.get("Contents", []))


class _Pyarrow(_Client):
    name = "pyarrow"

    def __init__(self, server: SeaweedServer, bucket: str) -> None:
        import pyarrow.fs as pafs

        self._fs = pafs.S3FileSystem(
            access_key=server.access_key,
            secret_key=server.secret_key,
            endpoint_override=server.s3_endpoint,
            scheme="http",
            region=server.region,
        )
        self._bucket = bucket

    def put(self, key: str, data: bytes) -> None:
        with self._fs.open_output_stream(f"{self._bucket}/{key}") as out:
            out.write(data)

    def put_if_absent(self, key: str, data: bytes) -> None:
        raise UnsupportedError("pyarrow.fs.S3FileSystem has no conditional write")

    def get_range(self, key: str, start: int, length: int) -> bytes:
        with self._fs.open_input_file(f"{self._bucket}/{key}") as f:
            data: bytes = f.read_at(length, start)
            return data

    def count(self, prefix: str) -> int:
        import pyarrow.fs as pafs

        selector = pafs.FileSelector(f"{self._bucket}/{prefix}".rstrip("/"))
        return len(self._fs.get_file_info(selector))


_MAKERS: dict[str, Callable[[SeaweedServer, str], _Client]] = {
    "obstore": _Obstore,
    "boto3": _Boto3,
    "pyarrow": _Pyarrow,
}


def _calls(client: _Client, op: str, rep: int, small: bytes, big: bytes) -> Callable[[int], Any]:
    """The call that op ``op`` times, as a function of the sample index."""
    home = f"{client.name}/r{rep}"
    if op == "put-16k":
        return lambda i: client.put(f"{home}/small/{i}", small)
    if op == "put-4m":
        return lambda i: client.put(f"{home}/big/{i}", big)
    if op == "get-range-64k":
        return lambda _i: client.get_range(f"{client.name}/range", RANGE_START, RANGE_BYTES)
    if op == "list-200":
        return lambda _i: client.count(f"{client.name}/list/")
    if op == "put-if-none-match":
        return lambda i: client.put_if_absent(f"{home}/cond/{i}", small)
    raise ValueError(f"unknown operation {op!r}")


def _prepare(clients: dict[str, _Client], small: bytes, big: bytes) -> None:
    """Each client's own fixtures: the object for range GETs and 200 keys to list.

    Raises:
        RuntimeError: a client lists the wrong number of keys, or a conditional PUT
            on an existing key succeeded.
    """
    for client in clients.values():
        client.put(f"{client.name}/range", big)
        for i in range(LIST_KEYS):
            client.put(f"{client.name}/list/{i:04d}", b"x")
        if (n := client.count(f"{client.name}/list/")) != LIST_KEYS:
            raise RuntimeError(f"{client.name} listed {n} keys, expected {LIST_KEYS}")
        try:
            client.put_if_absent(f"{client.name}/range", small)
        except UnsupportedError:
            continue
        except Exception:
            continue  # the conflict was detected: what a conditional PUT is for
        raise RuntimeError(f"{client.name}: a conditional PUT overwrote an existing key")


def compare(
    server: SeaweedServer,
    bucket: str,
    samples: int,
    reps: int,
    log: Callable[[str], None],
) -> list[Workload]:
    """Time every operation with every client; one Workload per (operation, client).

    Raises:
        RuntimeError: a client misbehaved while preparing (see ``_prepare``).
    """
    small, big = os.urandom(16 * 1024), os.urandom(4 * 1024 * 1024)
    clients = {name: _MAKERS[name](server, bucket) for name in CLIENTS}
    _prepare(clients, small, big)
    workloads = {
        (op.key, name): Workload(
            key=f"s3-client-{op.key}",
            group="s3-client",
            title=op.title,
            target=name,
            params={"samples": max(5, round(samples * op.share))},
        )
        for op in OPERATIONS
        for name in CLIENTS
    }
    for rep in range(reps):
        shift = rep % len(CLIENTS)
        for name in CLIENTS[shift:] + CLIENTS[:shift]:
            for op in OPERATIONS:
                w = workloads[op.key, name]
                try:
                    w.reps.append(_time(_calls(clients[name], op.key, rep, small, big), w))
                except UnsupportedError as exc:
                    if not w.failures:
                        w.failures.append(f"not supported: {exc}")
                    continue
                m = w.reps[-1]
                log(f"{w.key} {name} rep {rep + 1}: p50 {m['p50_ms']:.2f} ms, "
                    f"p99 {m['p99_ms']:.2f} ms")  # fmt: skip
    return list(workloads.values())


def _time(call: Callable[[int], Any], w: Workload) -> dict[str, float]:
    """p50, p99 and mean of ``samples`` sequential calls, after one warm-up call."""
    n = int(w.params["samples"])
    call(-1)
    took: list[float] = []
    for i in range(n):
        t0 = time.perf_counter()
        call(i)
        took.append((time.perf_counter() - t0) * 1000.0)
    took.sort()
    return {
        "p50_ms": percentile(took, 50),
        "p99_ms": percentile(took, 99),
        "mean_ms": sum(took) / n,
    }
