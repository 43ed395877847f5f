"""What a member's object store reads of the bucket when it opens (real SeaweedFS, the
real SQLite metadata store, each broker's real membership and object store in this
process): the manifests of the partitions it leads, and of those its own WAL objects
hold, not a listing of the bucket. A restart of a member of a cluster whose bucket held
50k partition objects spent 8.8 s listing them all.

Its own WAL objects' partitions are listed too because its upload pass deletes those
objects once another broker's partition objects hold their records: without them
listed, a member restarted after its partitions were taken over would keep its old WAL
objects for ever.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_cluster_commit_point import BUCKET, T, broker, member
from test_object_partition_moves import config, kill, produce, read_values, values

from floe.cluster.membership import Membership
from floe.cluster.sqlite import SqliteMetadataStore
from floe.storage.interface import StorageError
from floe.storage.object import layout
from floe.storage.object.bucket import Bucket, Listed
from floe.storage.object.partition import ObjectPartitionLog
from floe.storage.object.store import ObjectStore
from floe.types import PartitionId
from helpers.seaweed import SeaweedServer, seaweed_server

P0 = PartitionId(0)


@pytest.fixture(scope="module")
def s3() -> Iterator[SeaweedServer]:
    with seaweed_server(BUCKET) as server:
        yield server


class ListedPrefixes(Bucket):
    """The real bucket, noting each prefix listed."""

    def __init__(self, real: Bucket) -> None:
        super().__init__(real._store, real.description)
        self.prefixes: list[str] = []

    def list(self, prefix: str) -> Iterator[Listed]:
        self.prefixes.append(prefix)
        return super().list(prefix)


class DataUnreadable(Bucket):
    """The real bucket, whose data objects cannot be listed nor read (an error class of
    the S3 client's own, as obstore raises)."""

    def __init__(self, real: Bucket) -> None:
        super().__init__(real._store, real.description)

    def list(self, prefix: str) -> Iterator[Listed]:
        if prefix.startswith(layout.DATA_PREFIX):
            raise RuntimeError("GenericError: the store answered 503")
        return super().list(prefix)

    def get(self, key: str) -> bytes:
        if key.startswith(layout.DATA_PREFIX):
            raise RuntimeError("GenericError: the store answered 503")
        return super().get(key)


def data_listed(bucket: ListedPrefixes) -> list[str]:
    return [p for p in bucket.prefixes if p.startswith(layout.DATA_PREFIX)]


def stream_objects(bucket: Bucket, stream: str) -> set[str]:
    return {item.key for item in bucket.list(layout.wal_folder(stream))}


def test_a_members_open_reads_the_manifests_of_its_partitions_not_a_listing(
    s3: SeaweedServer, tmp_path: Path
) -> None:
    async def scenario() -> None:
        prefix = f"m-{uuid.uuid4().hex[:8]}"
        one, first = broker(s3, tmp_path, prefix, 1)
        first.create_topic(T, 3, {})
        for p in range(3):
            await produce(first.partition(T, PartitionId(p)), first, values(f"p{p}", 3))
        await first.upload_partitions()  # every partition in partition objects
        await first.release(T, P0)
        assert await asyncio.to_thread(one.hand_over, (T, P0), 2)

        two = member(tmp_path / "cluster.db", 2)
        bucket = ListedPrefixes(Bucket.from_config(config(s3, tmp_path, prefix, 2)))
        second = ObjectStore(
            tmp_path / "broker2", config(s3, tmp_path, prefix, 2), bucket=bucket,
            guard=two, member=True,
        )  # fmt: skip
        try:
            assert data_listed(bucket) == []
            assert read_values(second.partition(T, P0)) == list(enumerate(values("p0", 3)))
        finally:
            second.close()
            first.close()
            two.leave()
            one.leave()

    asyncio.run(scenario())


def test_a_member_that_cannot_read_its_partitions_at_open_says_the_bucket_cannot_be_read(
    s3: SeaweedServer, tmp_path: Path
) -> None:
    async def scenario() -> None:
        prefix = f"m-{uuid.uuid4().hex[:8]}"
        one, first = broker(s3, tmp_path, prefix, 1)
        first.create_topic(T, 1, {})
        await first.release(T, P0)
        assert await asyncio.to_thread(one.hand_over, (T, P0), 2)
        two = member(tmp_path / "cluster.db", 2)
        bucket = DataUnreadable(Bucket.from_config(config(s3, tmp_path, prefix, 2)))
        try:
            with pytest.raises(StorageError, match="cannot read the bucket"):
                ObjectStore(
                    tmp_path / "broker2", config(s3, tmp_path, prefix, 2), bucket=bucket,
                    guard=two, member=True,
                )  # fmt: skip
        finally:
            first.close()
            two.leave()
            one.leave()

    asyncio.run(scenario())


@dataclass
class TakenOver:
    """Broker 2 led partition 0 and was killed with WAL objects of its own (``old``,
    before its upload pass); the writer (broker 1) took the partition over (``taken``)
    while broker 2 was still registered: its stream is not fenced, so the writer's
    upload pass leaves its objects alone."""

    s3: SeaweedServer
    tmp_path: Path
    prefix: str
    writer: Membership
    first: ObjectStore
    two: Membership
    old: set[str]
    taken: ObjectPartitionLog

    @classmethod
    async def make(cls, s3: SeaweedServer, tmp_path: Path) -> TakenOver:
        prefix = f"m-{uuid.uuid4().hex[:8]}"
        one, first = broker(s3, tmp_path, prefix, 1)
        first.create_topic(T, 2, {})
        await first.release(T, P0)
        assert await asyncio.to_thread(one.hand_over, (T, P0), 2)
        two = member(tmp_path / "cluster.db", 2)
        second = ObjectStore(
            tmp_path / "broker2", config(s3, tmp_path, prefix, 2), guard=two, member=True
        )
        await produce(second.partition(T, P0), second, values("m", 4))
        old = stream_objects(first.bucket, "2")
        assert old
        kill(second)
        store = SqliteMetadataStore(tmp_path / "cluster.db")
        assert store.claim(T, P0, 1, store.owners()[(T, P0)]) is not None
        store.close()
        await asyncio.to_thread(one.refresh)
        assert await asyncio.to_thread(one.claim, [(T, P0)]) == [(T, P0)]
        taken = await first.acquire(T, P0)
        return cls(s3, tmp_path, prefix, one, first, two, old, taken)

    def restart(self) -> tuple[Membership, ObjectStore]:
        """Broker 2 started again: its membership and store."""
        self.two.leave()
        again = member(self.tmp_path / "cluster.db", 2)
        settings = config(self.s3, self.tmp_path, self.prefix, 2)
        return again, ObjectStore(self.tmp_path / "broker2", settings, guard=again, member=True)

    def close(self, again: Membership, third: ObjectStore) -> None:
        """Stop both brokers: restarted broker 2 (``again``, ``third``) and the writer."""
        third.close()
        self.first.close()
        again.leave()
        self.writer.leave()

    def left(self) -> set[str]:
        """Broker 2's old WAL objects still in the bucket."""
        return stream_objects(self.first.bucket, "2") & self.old


def test_a_restarted_member_deletes_its_wal_objects_once_another_brokers_objects_hold_them(
    s3: SeaweedServer, tmp_path: Path
) -> None:
    async def scenario() -> None:
        t = await TakenOver.make(s3, tmp_path)
        await t.first.upload_partitions()  # its records in partition objects now
        assert t.left() == t.old
        again, third = t.restart()
        try:
            await third.upload_partitions()
            assert t.left() == set()
            assert read_values(t.taken) == list(enumerate(values("m", 4)))
        finally:
            t.close(again, third)

    asyncio.run(scenario())


def test_a_member_restarted_before_the_new_owners_upload_deletes_its_wal_objects_after_it(
    s3: SeaweedServer, tmp_path: Path
) -> None:
    """As above, but broker 2 starts again before the writer's upload pass put the
    taken-over records in partition objects: at its open they are not covered yet. Its
    upload passes must see the writer's later commit (the manifest the metadata store
    names), not keep the objects until its next restart: they piled up to 1,120 in the
    member-kill benchmark (each kill restarts the member at once), and every open and
    takeover read their indexes."""

    async def scenario() -> None:
        t = await TakenOver.make(s3, tmp_path)
        again, third = t.restart()  # before the writer's upload pass
        try:
            await third.upload_partitions()
            assert t.left() == t.old  # not in partition objects yet
            await t.first.upload_partitions()  # now they are, named by a committed manifest
            await third.upload_partitions()
            assert t.left() == set()
            assert read_values(t.taken) == list(enumerate(values("m", 4)))
        finally:
            t.close(again, third)

    asyncio.run(scenario())
