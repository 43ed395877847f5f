"""Reads of partition data that left the local cache (``storage.s3.cache.max.bytes``):
whole partition objects fetched from the bucket and kept in memory, most recently used
first, up to ``storage.s3.read.cache.bytes``. A consumer reading old data in order GETs
each object once; concurrent reads of one object share its GET. Everything runs on the
broker's event loop; the GETs run in worker threads.
"""

from __future__ import annotations

import asyncio
import logging
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Sequence

from floe.protocol.batch import scan
from floe.protocol.records import decode_batch
from floe.storage.interface import StorageError
from floe.storage.object import layout
from floe.storage.object.bucket import Bucket, describe
from floe.storage.object.layout import PartObject

log = logging.getLogger(__name__)


def covering(objs: Sequence[PartObject], offset: int) -> PartObject | None:
    """The object of ``objs`` (sorted, contiguous) holding ``offset``."""
    i = bisect_right(objs, offset, key=lambda o: o.base) - 1
    if i < 0 or objs[i].end <= offset:
        return None
    return objs[i]


class ObjectReader:
    """See the module docstring. Owned by the object store."""

    def __init__(self, bucket: Bucket, max_bytes: int) -> None:
        self._bucket = bucket
        self._max_bytes = max_bytes
        self._blobs: OrderedDict[str, bytes] = OrderedDict()
        self._size = 0
        self._loading: dict[str, asyncio.Task[bytes]] = {}

    async def get(self, obj: PartObject) -> bytes:
        """The bytes of ``obj``. The GET runs as its own task, shared by every reader of
        the object meanwhile: a reader that goes away (its client closed) cancels only
        its own wait.

        Raises:
            StorageError: the GET failed.
        """
        blob = self._blobs.get(obj.key)
        if blob is not None:
            self._blobs.move_to_end(obj.key)
            return blob
        task = self._loading.get(obj.key)
        if task is None:
            task = asyncio.create_task(self._load(obj), name=f"floe-s3-read {obj.key}")
            task.add_done_callback(_retrieve)  # a failure nobody waits for any more
            self._loading[obj.key] = task
        return await asyncio.shield(task)

    async def _load(self, obj: PartObject) -> bytes:
        try:
            blob = await asyncio.to_thread(self._bucket.get, obj.key)
        except Exception as exc:
            log.warning("storage.object.read_failed key=%s error=%s", obj.key, describe(exc))
            raise StorageError(f"cannot read {obj.key} from the bucket: {describe(exc)}") from exc
        finally:
            del self._loading[obj.key]
        self._keep(obj.key, blob)
        return blob

    def _keep(self, key: str, blob: bytes) -> None:
        if len(blob) > self._max_bytes:
            return
        self._blobs[key] = blob
        self._size += len(blob)
        while self._size > self._max_bytes:
            _, dropped = self._blobs.popitem(last=False)
            self._size -= len(dropped)

    async def read(
        self, objs: Sequence[PartObject], offset: int, max_bytes: int, min_one: bool
    ) -> bytes:
        """Whole batches from the one holding ``offset``, within one object: at most
        ``max_bytes`` (at least one batch when ``min_one``).

        Raises:
            StorageError: no object holds ``offset``, or the GET failed.
        """
        obj = covering(objs, offset)
        if obj is None:
            raise StorageError(f"no object in the bucket holds offset {offset}")
        found = layout.slice_from(await self.get(obj), offset)
        if found is None:
            return b""
        return bytes(layout.cut_to(found[0], max_bytes, min_one))

    async def first_at_or_after(
        self, objs: Sequence[PartObject], start: int, timestamp_ms: int
    ) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after offset ``start`` with
        a timestamp >= ``timestamp_ms`` in ``objs``; objects whose largest timestamp is
        below it are not read.

        Raises:
            StorageError: a GET failed.
        """
        for obj in objs:
            if obj.end <= start or obj.max_timestamp < timestamp_ms:
                continue
            blob = await self.get(obj)
            for header in scan(blob, verify_crc=False):
                if header.max_timestamp < timestamp_ms or header.next_offset <= start:
                    continue
                for record in decode_batch(blob, header):
                    if record.offset >= start and record.timestamp >= timestamp_ms:
                        return record.offset, record.timestamp
        return None


def _retrieve(task: asyncio.Task[bytes]) -> None:
    if not task.cancelled():
        task.exception()
