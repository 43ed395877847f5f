"""Reads of partition data that left the local cache (``storage.s3.cache.max.bytes``).

A partition object is read in blocks of :data:`BLOCK_BYTES` (range GETs), kept in
memory, most recently used first, up to ``storage.s3.read.cache.bytes``; concurrent
readers of one block share its GET, and a read ending near its block's end starts the
GET of the next one (read-ahead). Where a batch starts inside an object is learned
while reading: after each read, the position of the next batch is remembered, so a
consumer reading in order goes straight to its next batch, and a seek scans batch
headers forward from the nearest known position (block by block, each fetched once).
Everything runs on the broker's event loop; the GETs run in worker threads.
"""

from __future__ import annotations

import asyncio
import logging
from bisect import bisect_right, insort
from collections import OrderedDict
from collections.abc import Sequence

from floe.protocol.batch import LOG_OVERHEAD, read_header
from floe.protocol.records import decode_batch
from floe.storage.interface import StorageError
from floe.storage.object.bucket import Bucket, describe
from floe.storage.object.layout import (
    BATCH_HEAD_BYTES,
    BATCH_PREFIX,
    CorruptObjectError,
    PartObject,
    batch_head,
)
from floe.tasks import retrieve

log = logging.getLogger(__name__)

BLOCK_BYTES = 4 * 1024 * 1024
"""Bytes per range GET: about 250 GETs per GB read, a few per consumer fetch at most."""
MAX_POSITIONS = 4096
"""Learned batch positions kept per object (a consumer needs one: where it stops)."""


def covering(objs: Sequence[PartObject], offset: int) -> PartObject | None:
    """The object of ``objs`` (sorted, contiguous) holding ``offset``."""
    i = bisect_right(objs, offset, key=lambda o: o.base) - 1
    if i < 0 or objs[i].end <= offset:
        return None
    return objs[i]


class ObjectReader:
    """See the module docstring. Owned by the object store, used on its event loop."""

    def __init__(self, bucket: Bucket, max_bytes: int, block_bytes: int = BLOCK_BYTES) -> None:
        self._bucket = bucket
        self._max_bytes = max_bytes
        self._block_bytes = block_bytes
        self._blocks: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._size = 0
        self._loading: dict[tuple[str, int], asyncio.Task[bytes]] = {}
        self._positions: OrderedDict[str, list[tuple[int, int]]] = OrderedDict()
        """Per object: (first offset of a batch, its byte position), sorted."""

    # -- blocks ----------------------------------------------------------------------

    async def _block(self, obj: PartObject, index: int) -> bytes:
        """Block ``index`` of ``obj``. The GET runs as its own task, shared by every
        reader of the block meanwhile: a reader that goes away (its client closed)
        cancels only its own wait.

        Raises:
            StorageError: the GET failed.
        """
        key = (obj.key, index)
        block = self._blocks.get(key)
        if block is not None:
            self._blocks.move_to_end(key)
            return block
        return await asyncio.shield(self._loading.get(key) or self._start(obj, index))

    def _start(self, obj: PartObject, index: int) -> asyncio.Task[bytes]:
        """Start the GET of block ``index`` of ``obj`` (no GET of it may be running)."""
        task = asyncio.create_task(self._load(obj, index), name=f"floe-s3-read {obj.key}")
        task.add_done_callback(retrieve)  # a failure nobody waits for any more
        self._loading[(obj.key, index)] = task
        return task

    async def _load(self, obj: PartObject, index: int) -> bytes:
        start = index * self._block_bytes
        length = min(self._block_bytes, obj.size - start)
        try:
            block = await asyncio.to_thread(self._bucket.get_range, obj.key, start, length)
        except Exception as exc:
            log.warning("storage.object.read_failed key=%s error=%s", obj.key, describe(exc))
            raise StorageError(f"cannot read {obj.key} from the bucket: {describe(exc)}") from exc
        finally:
            del self._loading[(obj.key, index)]
        if len(block) != length:
            raise StorageError(f"{obj.key} is shorter than its listed size {obj.size}")
        self._keep((obj.key, index), block)
        return block

    def _keep(self, key: tuple[str, int], block: bytes) -> None:
        if len(block) > self._max_bytes:
            return
        self._blocks[key] = block
        self._size += len(block)
        while self._size > self._max_bytes:
            _, dropped = self._blocks.popitem(last=False)
            self._size -= len(dropped)

    async def _bytes(self, obj: PartObject, start: int, length: int) -> bytes:
        """Bytes ``[start, start + length)`` of ``obj`` (within its size)."""
        if start < 0 or length < 0 or start + length > obj.size:
            raise StorageError(f"a batch of {obj.key} runs past its end: corrupt object")
        parts: list[bytes] = []
        position, end = start, start + length
        while position < end:
            index = position // self._block_bytes
            block = await self._block(obj, index)
            offset = position - index * self._block_bytes
            piece = block[offset : offset + (end - position)]
            parts.append(piece)
            position += len(piece)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    # -- batch positions -------------------------------------------------------------

    def _learn(self, obj: PartObject, offset: int, position: int) -> None:
        known = self._positions.get(obj.key)
        if known is None:
            known = self._positions[obj.key] = [(obj.base, 0)]
            while len(self._positions) > MAX_POSITIONS:
                self._positions.popitem(last=False)
        else:
            self._positions.move_to_end(obj.key)
        if (offset, position) not in known:
            insort(known, (offset, position))
            if len(known) > MAX_POSITIONS:
                del known[1]  # the oldest learned (the start stays)

    def _nearest(self, obj: PartObject, offset: int) -> tuple[int, int]:
        known = self._positions.get(obj.key) or [(obj.base, 0)]
        i = bisect_right(known, (offset, obj.size)) - 1
        return known[max(i, 0)]

    async def _seek(self, obj: PartObject, offset: int) -> tuple[int, int] | None:
        """``(position, length)`` of the batch of ``obj`` holding ``offset`` (or the
        first after it), None when every batch ends before it."""
        _, position = self._nearest(obj, offset)
        while position < obj.size:
            if obj.size - position < BATCH_HEAD_BYTES:
                raise StorageError(f"truncated record batch in {obj.key}: corrupt object")
            base, length, delta = batch_head(await self._bytes(obj, position, BATCH_HEAD_BYTES))
            size = LOG_OVERHEAD + length
            if length <= 0:
                raise StorageError(f"bad record batch length in {obj.key}: corrupt object")
            if base + delta >= offset:
                self._learn(obj, base, position)
                return position, size
            position += size
        return None

    # -- reads -----------------------------------------------------------------------

    async def read(
        self, objs: Sequence[PartObject], offset: int, max_bytes: int, min_one: bool
    ) -> bytes:
        """Whole batches from the one holding ``offset``, within one object: at most
        ``max_bytes`` (at least one batch when ``min_one``).

        Raises:
            StorageError: no object holds ``offset``, a GET failed, or the object is
                not whole batches.
        """
        obj = covering(objs, offset)
        if obj is None:
            raise StorageError(f"no object in the bucket holds offset {offset}")
        found = await self._seek(obj, offset)
        if found is None:
            return b""
        start, size = found
        end = start
        while end < obj.size and (end - start + size <= max_bytes or (end == start and min_one)):
            end += size
            if end >= obj.size:
                break
            head = await self._bytes(obj, end, min(BATCH_HEAD_BYTES, obj.size - end))
            if len(head) < LOG_OVERHEAD:
                break
            next_base, length = BATCH_PREFIX.unpack_from(head)
            self._learn(obj, next_base, end)
            size = LOG_OVERHEAD + length
        if end > start:
            self._read_ahead(obj, end)
        return await self._bytes(obj, start, end - start) if end > start else b""

    def _read_ahead(self, obj: PartObject, position: int) -> None:
        """Start the GET of the block after ``position``'s when a read in order is
        about to need it (it ends in the last quarter of its block)."""
        index = position // self._block_bytes
        if position - index * self._block_bytes < self._block_bytes * 3 // 4:
            return
        nxt = (obj.key, index + 1)
        if (index + 1) * self._block_bytes >= obj.size or nxt in self._blocks:
            return
        if nxt not in self._loading:
            self._start(obj, index + 1)

    async def first_at_or_after(
        self, objs: Sequence[PartObject], start: int, timestamp_ms: int
    ) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after offset ``start`` with
        a timestamp >= ``timestamp_ms`` in ``objs``; objects whose largest timestamp is
        below it are not read.

        Raises:
            StorageError: a GET failed, or an object is not whole batches.
        """
        for obj in objs:
            if obj.end <= start or obj.max_timestamp < timestamp_ms:
                continue
            found = await self._seek(obj, start)
            position = found[0] if found is not None else obj.size
            while position < obj.size:
                head = await self._bytes(obj, position, min(BATCH_HEAD_BYTES, obj.size - position))
                if len(head) < LOG_OVERHEAD:
                    raise StorageError(f"truncated record batch in {obj.key}: corrupt object")
                _, length = BATCH_PREFIX.unpack_from(head)
                data = await self._bytes(obj, position, LOG_OVERHEAD + length)
                try:
                    header = read_header(data)
                except Exception as exc:
                    raise CorruptObjectError(f"unreadable batch in {obj.key}: {exc}") from exc
                if header.max_timestamp >= timestamp_ms and header.next_offset > start:
                    for record in decode_batch(data, header):
                        if record.offset >= start and record.timestamp >= timestamp_ms:
                            return record.offset, record.timestamp
                position += LOG_OVERHEAD + length
        return None
