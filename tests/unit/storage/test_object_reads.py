"""ObjectReader: range GETs of blocks, shared between concurrent readers, and batch
positions learned so that in-order reads GET each block once. The bucket here is a
stand-in serving one real object's bytes (whose GET may wait on an event): what is
tested is the reader's side; the real bucket is in tests/integration/test_object_storage.py."""

from __future__ import annotations

import asyncio
import threading
from typing import cast

import pytest

from floe.protocol.batch import scan
from floe.protocol.records import Record, encode_batch
from floe.storage.interface import StorageError
from floe.storage.object.bucket import Bucket
from floe.storage.object.layout import PartObject
from floe.storage.object.reads import ObjectReader

BLOCK = 4096


def object_of(batches: int, per_batch: int = 3) -> tuple[PartObject, bytes]:
    data = b"".join(
        encode_batch(
            [Record(b * per_batch + i, 1000 + b, b"k", b"v" * 300) for i in range(per_batch)],
            base_offset=b * per_batch,
        )
        for b in range(batches)
    )
    return PartObject("obj", 0, batches * per_batch, len(data), 1000 + batches - 1), data


class Bucket1:
    """One object; ``release`` gates every GET."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.release = threading.Event()
        self.release.set()
        self.gets: list[tuple[int, int]] = []
        self.fail = False

    def get_range(self, key: str, start: int, length: int) -> bytes:
        self.gets.append((start, length))
        assert self.release.wait(10)
        if self.fail:
            raise FileNotFoundError(key)
        return self.data[start : start + length]


def reader_on(bucket: Bucket1, max_bytes: int = 1 << 20) -> ObjectReader:
    return ObjectReader(cast(Bucket, bucket), max_bytes, block_bytes=BLOCK)


def test_in_order_reads_get_each_block_once_and_return_whole_batches() -> None:
    obj, data = object_of(60)  # about 60 x 1 KB: 15 blocks
    bucket = Bucket1(data)
    reader = reader_on(bucket)

    async def read_all() -> list[int]:
        offsets: list[int] = []
        offset = 0
        while offset < obj.end:
            got = await reader.read([obj], offset, 5000, min_one=True)
            headers = scan(got)  # whole, valid batches
            offsets += [h.base_offset for h in headers]
            offset = headers[-1].next_offset
        return offsets

    assert asyncio.run(read_all()) == [3 * b for b in range(60)]
    blocks = -(-len(data) // BLOCK)
    assert sorted(bucket.gets) == [
        (i * BLOCK, min(BLOCK, len(data) - i * BLOCK)) for i in range(blocks)
    ]


def test_a_read_from_the_middle_of_a_batch_and_limits() -> None:
    obj, data = object_of(10)
    reader = reader_on(Bucket1(data))
    one = len(data) // 10

    async def go() -> None:
        got = await reader.read([obj], 7, 10, min_one=True)  # offset 7 is in batch 2
        assert [h.base_offset for h in scan(got)] == [6]
        assert await reader.read([obj], 7, 10, min_one=False) == b""
        got = await reader.read([obj], 0, 3 * one + 1, min_one=False)
        assert [h.base_offset for h in scan(got)] == [0, 3, 6]
        assert await reader.first_at_or_after([obj], 0, 1004) == (12, 1004)
        assert await reader.first_at_or_after([obj], 20, 1000) == (20, 1006)
        assert await reader.first_at_or_after([obj], 0, 2000) is None
        with pytest.raises(StorageError, match="no object"):
            await reader.read([obj], 30, 10, min_one=True)

    asyncio.run(go())


def test_a_reader_that_goes_away_does_not_strand_the_others() -> None:
    obj, data = object_of(2)
    bucket = Bucket1(data)
    bucket.release.clear()
    reader = reader_on(bucket)

    async def go() -> None:
        first = asyncio.create_task(reader.read([obj], 0, 10_000, min_one=True))
        second = asyncio.create_task(reader.read([obj], 0, 10_000, min_one=True))
        await asyncio.sleep(0.05)
        first.cancel()  # its client closed the connection
        await asyncio.sleep(0.05)
        bucket.release.set()
        assert await asyncio.wait_for(second, 5) == data

    asyncio.run(go())
    assert bucket.gets == [(0, len(data))]


def test_a_failed_get_reaches_every_reader_and_is_retried_next_time() -> None:
    obj, data = object_of(2)
    bucket = Bucket1(data)
    bucket.fail = True
    reader = reader_on(bucket)

    async def go() -> list[BaseException | bytes]:
        reads = [reader.read([obj], 0, 100, min_one=True) for _ in range(2)]
        return await asyncio.gather(*reads, return_exceptions=True)

    results = asyncio.run(go())
    assert all("cannot read obj from the bucket" in str(r) for r in results), results
    assert len(bucket.gets) == 1
    bucket.fail = False
    assert asyncio.run(go()) == [data[: len(data) // 2]] * 2
