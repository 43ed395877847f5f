"""ObjectReader's sharing of GETs between concurrent readers. The bucket here is a
stand-in whose GET waits on an event: what is tested is the asyncio side (one GET per
object, a reader that goes away mid-GET); the real bucket is tested in
tests/integration/test_object_storage.py."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, cast

from floe.storage.object.bucket import Bucket
from floe.storage.object.layout import PartObject
from floe.storage.object.reads import ObjectReader


class GatedBucket:
    def __init__(self) -> None:
        self.release = threading.Event()
        self.gets: list[str] = []

    def get(self, key: str) -> bytes:
        self.gets.append(key)
        assert self.release.wait(10)
        return key.encode() * 10


def test_a_reader_that_goes_away_does_not_strand_the_others() -> None:
    bucket = GatedBucket()
    reader = ObjectReader(cast(Bucket, bucket), max_bytes=1 << 20)
    obj = PartObject("k", 0, 10, 10)

    async def go() -> None:
        first = asyncio.create_task(reader.get(obj))
        second = asyncio.create_task(reader.get(obj))
        await asyncio.sleep(0.05)
        first.cancel()  # its client closed the connection
        await asyncio.sleep(0.05)
        bucket.release.set()
        assert await asyncio.wait_for(second, 5) == b"k" * 10
        assert await reader.get(obj) == b"k" * 10  # from memory now

    asyncio.run(go())
    assert bucket.gets == ["k"]


def test_a_failed_get_reaches_every_reader_and_is_retried_next_time() -> None:
    class Failing(GatedBucket):
        def get(self, key: str) -> bytes:
            self.gets.append(key)
            raise FileNotFoundError(key)

    bucket: Any = Failing()
    reader = ObjectReader(cast(Bucket, bucket), max_bytes=1 << 20)
    obj = PartObject("gone", 0, 10, 10)

    async def go() -> list[BaseException | bytes]:
        return await asyncio.gather(reader.get(obj), reader.get(obj), return_exceptions=True)

    results = asyncio.run(go())
    assert all("cannot read gone from the bucket" in str(r) for r in results), results
    assert len(asyncio.run(go())) == 2 and bucket.gets == ["gone", "gone"]
