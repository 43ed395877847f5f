"""The bucket the object-storage engine writes to: a few S3 operations over ``obstore``,
with request and byte counters.

Why obstore (Rust's ``object_store`` crate): measured against SeaweedFS on the 2-core
reference machine (``floe bench storage``, 2026-11, medians of 3 repetitions of p50),
a 16 KiB PUT took 0.93 ms with obstore, 2.16 ms with boto3 and 4.66 ms with pyarrow's
S3 filesystem; a conditional 16 KiB PUT 1.41 / 2.46 ms (pyarrow has none); a 64 KiB
range GET 2.63 / 4.26 / 3.29 ms; a 200-key LIST 3.1 / 14.7 / 5.6 ms; 4 MiB PUTs were
about equal (36-42 ms, bandwidth-bound). The PUT of a WAL object is on the acks=all
path, so the small-request latency decides; obstore also has native asyncio calls (no
thread per request), conditional PUTs (``mode="create"``) and releases the GIL while it
waits. ``benchmarks/s3_clients.py`` repeats the measurement (docs/benchmarks.md).

Keys are relative to ``storage.s3.prefix`` (the store is built with it).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import obstore
from obstore.exceptions import AlreadyExistsError, PreconditionError
from obstore.store import S3Store

from floe.config import BrokerConfig
from floe.config import broker as keys
from floe.errors import FloeError
from floe.storage.interface import StorageError

log = logging.getLogger(__name__)


CONNECT_TIMEOUT_S = 5.0
RETRIES = 3
"""Retries of a failed request inside storage.s3.request.timeout.ms (obstore's own)."""


class BucketConfigError(FloeError):
    """storage.type = s3 without a usable bucket setting."""


class ObjectExistsError(StorageError):
    """A create-only PUT found the key taken: someone else writes under this prefix."""


def describe(exc: BaseException) -> str:
    """One line for an S3 error (obstore's messages carry a multi-line debug dump)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


@dataclass
class BucketStats:
    """Requests and bytes since start (metrics and the object-storage benchmark)."""

    puts: int = 0
    gets: int = 0
    lists: int = 0
    deletes: int = 0
    bytes_put: int = 0
    bytes_got: int = 0


@dataclass(frozen=True)
class Listed:
    key: str
    size: int


class Bucket:
    """One bucket and prefix. Blocking calls (``put``, ``get``, ``list``, ``delete``)
    are for start-up and the background uploader's thread; the event loop uses the
    ``*_async`` ones.

    Raises (every call): OSError (``FileNotFoundError`` for a missing key) or
    obstore's errors for a failed request.
    """

    def __init__(self, store: S3Store, description: str) -> None:
        self._store = store
        self.description = description
        self.stats = BucketStats()

    @classmethod
    def from_config(cls, config: BrokerConfig) -> Bucket:
        """The bucket of ``storage.s3.*``.

        Raises:
            BucketConfigError: no ``storage.s3.bucket``.
        """
        bucket = config[keys.STORAGE_S3_BUCKET]
        if not bucket:
            raise BucketConfigError("storage.type = s3 needs storage.s3.bucket")
        endpoint = config[keys.STORAGE_S3_ENDPOINT]
        prefix = config[keys.STORAGE_S3_PREFIX].strip("/")
        timeout_s = config[keys.STORAGE_S3_REQUEST_TIMEOUT_MS] / 1000
        options: dict[str, Any] = {
            "region": config[keys.STORAGE_S3_REGION],
            "client_options": {
                "timeout": f"{timeout_s}s",
                "connect_timeout": f"{min(timeout_s, CONNECT_TIMEOUT_S)}s",
            },
            "retry_config": {
                "max_retries": RETRIES,
                "retry_timeout": timedelta(seconds=timeout_s),
                "backoff": {
                    "init_backoff": timedelta(milliseconds=50),
                    "max_backoff": timedelta(seconds=2),
                    "base": 2.0,
                },
            },
        }
        if endpoint:
            options["endpoint"] = endpoint
            options["virtual_hosted_style_request"] = False
            options["client_options"]["allow_http"] = endpoint.startswith("http://")
        if config[keys.STORAGE_S3_ACCESS_KEY_ID]:
            options["access_key_id"] = config[keys.STORAGE_S3_ACCESS_KEY_ID]
            options["secret_access_key"] = config[keys.STORAGE_S3_SECRET_ACCESS_KEY]
        store = S3Store(bucket, prefix=prefix or None, **options)
        where = f"s3://{bucket}/{prefix}" + (f" at {endpoint}" if endpoint else "")
        return cls(store, where)

    # -- writes ------------------------------------------------------------------------

    def put(self, key: str, data: bytes | memoryview, *, create: bool = False) -> None:
        """Write ``key``; with ``create``, only if it does not exist yet (a conditional
        PUT, ``If-None-Match: *``).

        Raises:
            ObjectExistsError: ``create`` and the key exists.
        """
        try:
            obstore.put(self._store, key, data, mode="create" if create else "overwrite")
        except (AlreadyExistsError, PreconditionError) as exc:
            raise ObjectExistsError(f"{key} already exists in {self.description}") from exc
        finally:
            self.stats.puts += 1
        self.stats.bytes_put += len(data)

    async def put_async(self, key: str, data: bytes | memoryview, *, create: bool = False) -> None:
        """:meth:`put` from the event loop."""
        try:
            await obstore.put_async(
                self._store, key, data, mode="create" if create else "overwrite"
            )
        except (AlreadyExistsError, PreconditionError) as exc:
            raise ObjectExistsError(f"{key} already exists in {self.description}") from exc
        finally:
            self.stats.puts += 1
        self.stats.bytes_put += len(data)

    def delete(self, keys_: list[str]) -> None:
        """Delete ``keys_`` (missing ones are fine)."""
        for start in range(0, len(keys_), 1000):
            chunk = keys_[start : start + 1000]
            obstore.delete(self._store, chunk)
            self.stats.deletes += 1

    # -- reads -------------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        data = bytes(obstore.get(self._store, key).bytes())
        self.stats.gets += 1
        self.stats.bytes_got += len(data)
        return data

    def get_range(self, key: str, start: int, length: int) -> bytes:
        data = bytes(obstore.get_range(self._store, key, start=start, length=length))
        self.stats.gets += 1
        self.stats.bytes_got += len(data)
        return data

    def list(self, prefix: str) -> Iterator[Listed]:
        """Every key under ``prefix`` (``/``-terminated for a directory), any order."""
        for page in obstore.list(self._store, prefix=prefix):
            self.stats.lists += 1
            for meta in page:
                yield Listed(meta["path"], int(meta["size"]))
