"""A partition's manifest: what a broker taking a partition over reads instead of
listing the bucket (real SeaweedFS, the real SQLite metadata store, each broker's real
membership and object store in this process).

In a cluster, each upload pass that changes a partition's objects puts a manifest
naming them and points the metadata store at it, at the ownership epoch its broker
owns the partition at. A takeover reads that manifest (and the WAL objects), so its
cost does not grow with the partition's objects in the bucket: listing them was most of
what grew in the takeover benchmark (1k against 50k partition objects). Objects the
pass replaced are deleted only once a manifest that does not name them is committed,
and never by a broker whose manifest was refused.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from test_cluster_commit_point import (
    BUCKET,
    SESSION_S,
    T,
    broker,
    give_away,
    member,
    take_over,
)
from test_cluster_member_open import ListedPrefixes, data_listed
from test_object_partition_moves import config, kill, produce, read_values, values

from floe.cluster.interface import BrokerInfo, MetadataUnavailableError
from floe.cluster.membership import Membership
from floe.cluster.sqlite import SqliteMetadataStore
from floe.storage.interface import TopicMeta
from floe.storage.object import layout
from floe.storage.object.bucket import Bucket
from floe.storage.object.store import ObjectStore
from floe.storage.object.uploads import MERGE_COUNT
from floe.types import PartitionId, TopicName
from helpers.seaweed import SeaweedServer, seaweed_server

P0 = PartitionId(0)
TARGET = 64 * 1024 * 1024
"""storage.s3.object.target.bytes: large, so :data:`MERGE_COUNT` objects merge."""


@pytest.fixture(scope="module")
def s3() -> Iterator[SeaweedServer]:
    with seaweed_server(BUCKET) as server:
        yield server


def objects_of(bucket: Bucket, topic_id: uuid.UUID) -> set[str]:
    """The keys of partition 0's objects in the bucket now."""
    return {
        item.key
        for item in bucket.list(layout.partition_prefix(topic_id, 0))
        if item.key.endswith(".log")
    }


async def one_short_of_a_merge(first: ObjectStore) -> tuple[TopicMeta, set[str]]:
    """Topic ``T`` (one partition) on ``first``, written one record per upload pass:
    ``MERGE_COUNT - 1`` partition objects, none merged yet, and one more record in the
    WAL only (the next upload makes a merge's worth). Returns the topic and the
    objects' keys."""
    first.create_topic(T, 1, {})
    plog = first.partition(T, P0)
    for n in range(MERGE_COUNT - 1):
        await produce(plog, first, [f"v-{n}".encode()])
        await first.upload_partitions()
    await produce(plog, first, [f"v-{MERGE_COUNT - 1}".encode()])
    meta = first.topic(T)
    assert meta is not None
    named = objects_of(first.bucket, meta.topic_id)
    assert len(named) == MERGE_COUNT - 1
    return meta, named


def test_a_takeover_reads_the_partitions_manifest_not_a_listing_of_its_objects(
    s3: SeaweedServer, tmp_path: Path
) -> None:
    async def scenario() -> None:
        prefix, db = f"x-{uuid.uuid4().hex[:8]}", tmp_path / "cluster.db"
        one, first = broker(s3, tmp_path, prefix, 1)
        first.create_topic(T, 1, {})
        for n in range(3):  # three upload passes: three objects
            await produce(first.partition(T, P0), first, values(f"r{n}", 2))
            await first.upload_partitions()
        await produce(first.partition(T, P0), first, values("tail", 2))  # in WAL only
        two = member(db, 2)
        bucket = ListedPrefixes(Bucket.from_config(config(s3, tmp_path, prefix, 2)))
        second = ObjectStore(
            tmp_path / "broker2", config(s3, tmp_path, prefix, 2), bucket=bucket,
            guard=two, member=True,
        )  # fmt: skip
        try:
            taken = await take_over(db, two, second)
            assert data_listed(bucket) == []
            everything = [v for n in range(3) for v in values(f"r{n}", 2)] + values("tail", 2)
            assert read_values(taken) == list(enumerate(everything))
        finally:
            second.close()
            first.close()
            two.leave()
            one.leave()

    asyncio.run(scenario())


def test_a_stale_owners_pass_deletes_nothing_the_next_owners_manifest_names(
    s3: SeaweedServer, tmp_path: Path
) -> None:
    """Broker 1, given partition 0's ownership away behind its back (paused past its
    lease, say), runs an upload pass that merges the objects its last committed
    manifest names: its manifest is refused, so it deletes none of them, and broker 2
    restores every record from that manifest and the WAL."""

    async def scenario() -> None:
        prefix, db = f"x-{uuid.uuid4().hex[:8]}", tmp_path / "cluster.db"
        one, first = broker(s3, tmp_path, prefix, 1)
        meta, named = await one_short_of_a_merge(first)

        give_away(db)
        await first.upload_partitions()  # the 32nd object, then a merge: refused
        assert objects_of(first.bucket, meta.topic_id) >= named

        two, second = broker(s3, tmp_path, prefix, 2)
        try:
            await asyncio.to_thread(two.refresh)
            assert await asyncio.to_thread(two.claim, [(T, P0)]) == [(T, P0)]
            taken = await second.acquire(T, P0)
            expected = [f"v-{n}".encode() for n in range(MERGE_COUNT)]
            assert read_values(taken) == list(enumerate(expected))
        finally:
            second.close()
            first.close()
            two.leave()
            one.leave()

    asyncio.run(scenario())


class ManifestsDown(Membership):
    """A real membership whose manifest commits fail while ``down`` (the metadata
    store out of reach for them)."""

    down = False

    def set_manifests(
        self, manifests: Mapping[tuple[TopicName, PartitionId], str]
    ) -> concurrent.futures.Future[dict[tuple[TopicName, PartitionId], bool]]:
        if not self.down:
            return super().set_manifests(manifests)
        failed: concurrent.futures.Future[dict[tuple[TopicName, PartitionId], bool]]
        failed = concurrent.futures.Future()
        failed.set_exception(MetadataUnavailableError("the metadata store did not answer"))
        return failed


def flaky_writer(
    s3: SeaweedServer, tmp_path: Path, prefix: str, db: Path
) -> tuple[ManifestsDown, ObjectStore]:
    """Broker 1, the writer, whose manifest commits fail while its membership is
    ``down``: its membership and its started object store."""
    one = ManifestsDown(
        SqliteMetadataStore(db), BrokerInfo(1, "127.0.0.1", 9001), SESSION_S,
        f"sqlite:///{db}", share=True,
    )  # fmt: skip
    first = ObjectStore(tmp_path / "broker1", config(s3, tmp_path, prefix, 1), guard=one)
    first.start_background_flush()
    return one, first


def wal_keys(bucket: Bucket) -> set[str]:
    return {item.key for item in bucket.list(layout.WAL_PREFIX)}


def test_a_wal_object_goes_only_once_a_committed_manifest_covers_it(
    s3: SeaweedServer, tmp_path: Path
) -> None:
    """Once a partition has a committed manifest, its WAL objects stay while the pass
    cannot commit the next one (a broker taking the partition over would read the
    last committed manifest, which lacks the new objects); the first pass that
    commits one deletes them."""

    async def scenario() -> None:
        prefix, db = f"x-{uuid.uuid4().hex[:8]}", tmp_path / "cluster.db"
        one, first = flaky_writer(s3, tmp_path, prefix, db)
        try:
            first.create_topic(T, 1, {})
            await produce(first.partition(T, P0), first, values("w", 3))
            await first.upload_partitions()  # a manifest committed
            assert wal_keys(first.bucket) == set()
            await produce(first.partition(T, P0), first, values("x", 3))
            wal = wal_keys(first.bucket)
            assert wal
            one.down = True
            await first.upload_partitions()
            assert wal_keys(first.bucket) >= wal
            one.down = False
            await first.upload_partitions()
            assert wal_keys(first.bucket) & wal == set()
        finally:
            first.close()
            one.leave()

    asyncio.run(scenario())


def test_a_new_owners_first_manifest_sweeps_what_no_committed_manifest_names(
    s3: SeaweedServer, tmp_path: Path
) -> None:
    """Broker 1 puts objects whose manifest it cannot commit (the metadata store out of
    reach for it), then dies: those objects are named by no committed manifest, so no
    restore reads them. Broker 2, taking the partition over, restores from the last
    committed manifest and the WAL, and its first committed manifest deletes them
    (and broker 1's manifests): the bucket holds what broker 2's manifest names."""

    async def scenario() -> None:
        prefix, db = f"x-{uuid.uuid4().hex[:8]}", tmp_path / "cluster.db"
        one, first = flaky_writer(s3, tmp_path, prefix, db)
        first.create_topic(T, 1, {})
        meta = first.topic(T)
        assert meta is not None
        await produce(first.partition(T, P0), first, values("a", 2))
        await first.upload_partitions()  # committed: the a objects
        committed = objects_of(first.bucket, meta.topic_id)
        one.down = True
        await produce(first.partition(T, P0), first, values("b", 2))
        await first.upload_partitions()  # the b objects put, their manifest not committed
        orphans = objects_of(first.bucket, meta.topic_id) - committed
        assert orphans
        kill(first)

        two, second = broker(s3, tmp_path, prefix, 2)
        try:
            taken = await take_over(db, two, second)
            await produce(taken, second, values("c", 2))
            await second.upload_partitions()
            left = {
                item.key for item in second.bucket.list(layout.partition_prefix(meta.topic_id, 0))
            }
            assert left & orphans == set()
            manifests = sorted(k for k in left if k.endswith(layout.MANIFEST_SUFFIX))
            assert manifests == [(await asyncio.to_thread(two.manifests))[(T, P0)]]
            named, _ = layout.decode_manifest(second.bucket.get(manifests[0]), meta.topic_id, 0)
            assert {o.key for o in named} == {k for k in left if k.endswith(".log")}
            everything = values("a", 2) + values("b", 2) + values("c", 2)
            assert read_values(taken) == list(enumerate(everything))
        finally:
            second.close()
            one.leave()
            two.leave()

    asyncio.run(scenario())


def test_a_partition_with_nothing_in_the_bucket_gets_no_manifest(
    s3: SeaweedServer, tmp_path: Path
) -> None:
    """An empty partition has nothing to name: no manifest is put for it, so a topic
    that was never written (the internal ones, on most clusters) leaves the bucket
    empty, as it did before manifests."""

    async def scenario() -> None:
        prefix, db = f"x-{uuid.uuid4().hex[:8]}", tmp_path / "cluster.db"
        one, first = flaky_writer(s3, tmp_path, prefix, db)
        try:
            first.create_topic(T, 2, {})
            await produce(first.partition(T, P0), first, values("w", 1))
            await first.upload_partitions()
            meta = first.topic(T)
            assert meta is not None
            assert list(first.bucket.list(layout.partition_prefix(meta.topic_id, 1))) == []
            assert (await asyncio.to_thread(one.manifests)).keys() == {(T, P0)}
        finally:
            first.close()
            one.leave()

    asyncio.run(scenario())


def test_a_release_leaves_merging_to_the_next_owner(s3: SeaweedServer, tmp_path: Path) -> None:
    """A handover refuses appends to its partition until the release ends, so the
    release copies the tail and writes nothing more: merging the small objects is the
    next owner's upload pass's. In ``floe bench cluster`` releases that merged took up
    to 8.4 s of their 10 s (``merge_ms``), and the member-kill series failed waiting for
    the balancing's moves."""

    async def scenario() -> None:
        prefix = f"x-{uuid.uuid4().hex[:8]}"
        one, first = broker(s3, tmp_path, prefix, 1)
        meta, named = await one_short_of_a_merge(first)

        await first.release(T, P0)  # the 32nd object: a merge's worth, not merged
        released = objects_of(first.bucket, meta.topic_id)
        assert len(released) == MERGE_COUNT and released > named

        two, second = broker(s3, tmp_path, prefix, 2)
        try:
            assert await asyncio.to_thread(one.hand_over, (T, P0), 2)
            await asyncio.to_thread(two.refresh)
            assert await asyncio.to_thread(two.claim, [(T, P0)]) == [(T, P0)]
            taken = await second.acquire(T, P0)
            expected = list(enumerate(f"v-{n}".encode() for n in range(MERGE_COUNT)))
            assert read_values(taken) == expected
            await second.upload_partitions()  # the next owner merges them
            assert len(objects_of(second.bucket, meta.topic_id)) == 1
            assert read_values(taken) == expected
        finally:
            second.close()
            first.close()
            two.leave()
            one.leave()

    asyncio.run(scenario())
