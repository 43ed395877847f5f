"""A takeover staged while the dead owner's lease lapses (real SeaweedFS, the real SQLite
metadata store, each broker's real membership and object store in this process): the
partition is restored into a staging directory before the claim, and opened from it
after the claim only when nothing was committed to it since; otherwise it is restored
again, and no committed record is lost to a stale copy. The takeover's record in the
bucket is written while the partitions open, and tried again until it is.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from test_cluster_commit_point import broker, member, take_over, take_over_all
from test_object_partition_moves import config, kill, produce, read_values, values

from floe.cluster.membership import Membership
from floe.storage.object import layout
from floe.storage.object.bucket import Bucket
from floe.storage.object.sharing import PartitionSharing
from floe.storage.object.store import ObjectStore
from floe.types import Offset, PartitionId, TopicName
from helpers.seaweed import SeaweedServer, seaweed_server

BUCKET = "floe-moves"  # the bucket of the config() shared with those modules
T = TopicName("commits")  # the topic take_over() moves
P0 = PartitionId(0)
P1 = PartitionId(1)


@pytest.fixture(scope="module")
def s3() -> Iterator[SeaweedServer]:
    with seaweed_server(BUCKET) as server:
        yield server


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="floe.storage.object.store")
    return caplog


def lines(caplog: pytest.LogCaptureFixture, event: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if event in r.getMessage()]


async def staged(
    store: ObjectStore,
    caplog: pytest.LogCaptureFixture,
    keys: Sequence[tuple[TopicName, PartitionId]] = ((T, P0),),
) -> str:
    """Stage the partitions of ``keys`` (partition 0) on ``store`` and return the last
    log line once every one is staged."""
    store.stage(keys)
    deadline = time.monotonic() + 30
    while True:
        if len(done := lines(caplog, "storage.object.staged ")) >= len(keys):
            return done[-1]
        assert not lines(caplog, "staging_failed")
        assert time.monotonic() < deadline, "the partition was never staged"
        await asyncio.sleep(0.05)


async def pair(
    s3: SeaweedServer, tmp_path: Path
) -> tuple[tuple[Membership, ObjectStore], tuple[Membership, ObjectStore]]:
    """Broker 1 with three records committed to partition 0 (a-0..a-2), and broker 2."""
    prefix = f"st-{uuid.uuid4().hex[:8]}"
    one, first = broker(s3, tmp_path, prefix, 1)
    first.create_topic(T, 1, {})
    await produce(first.partition(T, P0), first, values("a", 3))
    return (one, first), broker(s3, tmp_path, prefix, 2)


def staging_left(tmp_path: Path) -> list[Path]:
    """What broker 2's staging directory holds."""
    return list((tmp_path / "broker2" / "staging").iterdir())


def stop(stores: list[ObjectStore], members: list[Membership], tmp_path: Path) -> None:
    """Close ``stores`` and leave the cluster, once no staged copy is left behind."""
    assert not staging_left(tmp_path)
    for store in stores:
        store.close()
    for membership in members:
        membership.leave()


def acquired(caplog: pytest.LogCaptureFixture) -> str:
    (line,) = lines(caplog, "storage.object.acquired")
    return line


def test_a_partition_staged_while_its_dead_owner_lapses_is_opened_from_the_stage(
    s3: SeaweedServer, tmp_path: Path, logged: pytest.LogCaptureFixture
) -> None:
    """Broker 1 dies with three committed records; broker 2 stages the partition before
    it claims it. The takeover opens the staged copy (it fetches no object) with every
    committed record, and appends after them."""

    async def scenario() -> None:
        (one, first), (two, second) = await pair(s3, tmp_path)
        kill(first)
        assert "end=3 " in await staged(second, logged)
        taken = await take_over(tmp_path / "cluster.db", two, second)
        line = acquired(logged)
        assert "staged=True" in line and "objects=0 " in line, line
        assert read_values(taken) == list(enumerate(values("a", 3)))
        await produce(taken, second, values("b", 2))
        assert read_values(taken) == list(enumerate(values("a", 3) + values("b", 2)))
        stop([second], [two, one], tmp_path)

    asyncio.run(scenario())


def test_a_stage_nothing_changed_since_opens_without_reading_the_bucket_again(
    s3: SeaweedServer, tmp_path: Path, logged: pytest.LogCaptureFixture
) -> None:
    """What the stage read of the bucket is still what a read after the claim would
    find (the same committed end, manifest and log start): the takeover opens from it
    without reading the bucket again (0.2-1.4 s of a member kill's outage under load)."""

    async def scenario() -> None:
        (one, first), (two, second) = await pair(s3, tmp_path)
        await first.upload_partitions()  # a manifest names partition 0's objects
        await produce(first.partition(T, P0), first, values("b", 2))  # in the WAL too
        kill(first)
        assert "end=5 " in await staged(second, logged)
        taken = await take_over(tmp_path / "cluster.db", two, second)
        line = acquired(logged)
        assert "staged=True" in line and "state=staged" in line, line
        every = values("a", 3) + values("b", 2)
        assert read_values(taken) == list(enumerate(every))
        await produce(taken, second, values("c", 2))
        await second.upload_partitions()
        assert read_values(taken) == list(enumerate(every + values("c", 2)))
        stop([second], [two, one], tmp_path)

    asyncio.run(scenario())


def test_a_stage_beside_a_partition_never_written_opens_without_reading_the_bucket_again(
    s3: SeaweedServer, tmp_path: Path, logged: pytest.LogCaptureFixture
) -> None:
    """The dead owner also led a partition nobody ever wrote to, which no manifest
    names: the takeover of both still opens from the stage's read. (In the failover
    bench, every member kill read the bucket again for the idle partitions of another
    topic, 0.2-1.7 s of each outage.)"""

    async def scenario() -> None:
        prefix, keys = f"st-{uuid.uuid4().hex[:8]}", [(T, P0), (T, P1)]
        one, first = broker(s3, tmp_path, prefix, 1)
        first.create_topic(T, 2, {})
        await produce(first.partition(T, P0), first, values("a", 3))
        await first.upload_partitions()  # a manifest names partition 0's objects only
        two, second = broker(s3, tmp_path, prefix, 2)
        kill(first)
        await staged(second, logged, keys)
        p0, p1 = await take_over_all(tmp_path / "cluster.db", two, second, keys)
        taken = lines(logged, "storage.object.acquired")
        assert len(taken) == 2 and all("state=staged" in line for line in taken), taken
        assert read_values(p0) == list(enumerate(values("a", 3)))
        assert p1.log_end_offset == 0
        await produce(p1, second, values("b", 2))
        assert read_values(p1) == list(enumerate(values("b", 2)))
        stop([second], [two, one], tmp_path)

    asyncio.run(scenario())


@pytest.mark.parametrize("change", ["manifest", "log start"])
def test_a_stage_whose_manifest_or_log_start_moved_since_reads_the_bucket_again(
    s3: SeaweedServer, tmp_path: Path, logged: pytest.LogCaptureFixture, change: str
) -> None:
    """The owner, alive, committed a new manifest (its upload pass moved records into
    partition objects) or moved its log start (DeleteRecords) after the stage, with no
    new record: the staged copy still holds the committed records, but the takeover
    reads the bucket again for what names them, and honours the new log start."""

    async def scenario() -> None:
        (one, first), (two, second) = await pair(s3, tmp_path)
        assert "end=3 " in await staged(second, logged)
        if change == "manifest":
            await first.upload_partitions()
        else:
            first.partition(T, P0).delete_records(Offset(2))
        taken = await take_over(tmp_path / "cluster.db", two, second)
        line = acquired(logged)
        assert "staged=True" in line and "state=read" in line, line
        start = 0 if change == "manifest" else 2
        assert taken.log_start_offset == start
        assert read_values(taken) == list(enumerate(values("a", 3)))[start:]
        stop([second, first], [two, one], tmp_path)

    asyncio.run(scenario())


def test_a_stage_older_than_the_committed_end_is_restored_again(
    s3: SeaweedServer, tmp_path: Path, logged: pytest.LogCaptureFixture
) -> None:
    """The owner was alive (its port refused connections, yet it committed): records
    committed after the stage are in the takeover, restored again from the bucket, not
    lost to the staged copy."""

    async def scenario() -> None:
        (one, first), (two, second) = await pair(s3, tmp_path)
        assert "end=3 " in await staged(second, logged)
        await produce(first.partition(T, P0), first, values("b", 2))  # after the stage
        taken = await take_over(tmp_path / "cluster.db", two, second)
        assert "staged=False" in acquired(logged)
        assert lines(logged, "storage.object.stage_stale")
        assert read_values(taken) == list(enumerate(values("a", 3) + values("b", 2)))
        stop([second, first], [two, one], tmp_path)

    asyncio.run(scenario())


def test_a_stage_no_longer_wanted_is_removed_and_never_opened(
    s3: SeaweedServer, tmp_path: Path, logged: pytest.LogCaptureFixture
) -> None:
    """The owner takes connections again: the stage is dropped (its copy removed), and
    a later takeover restores the partition from the bucket."""

    async def scenario() -> None:
        (one, first), (two, second) = await pair(s3, tmp_path)
        await staged(second, logged)
        second.keep_staged([])
        deadline = time.monotonic() + 10
        while staging_left(tmp_path):
            assert time.monotonic() < deadline, "the dropped stage was never removed"
            await asyncio.sleep(0.05)
        kill(first)
        taken = await take_over(tmp_path / "cluster.db", two, second)
        assert "staged=False" in acquired(logged)
        assert read_values(taken) == list(enumerate(values("a", 3)))
        stop([second], [two, one], tmp_path)

    asyncio.run(scenario())


class RefusesTakeoverRecords(Bucket):
    """The real bucket, refusing the next ``refusals`` PUTs of takeover records."""

    def __init__(self, real: Bucket, refusals: int) -> None:
        super().__init__(real._store, real.description)
        self.refusals = refusals

    def put(self, key: str, data: bytes | memoryview, *, create: bool = False) -> None:
        if key.startswith(layout.TAKEOVER_PREFIX) and self.refusals:
            self.refusals -= 1
            raise OSError("injected: the bucket refused the PUT")
        super().put(key, data, create=create)


def takeover_records(bucket: Bucket, stream: str) -> list[int]:
    """The epochs of ``stream``'s takeover records in the bucket."""
    return [
        named[1]
        for item in bucket.list(layout.TAKEOVER_PREFIX)
        if (named := layout.parse_takeover_key(item.key)) is not None and named[0] == stream
    ]


def test_a_takeover_record_the_bucket_refuses_is_written_later_and_serves_meanwhile(
    s3: SeaweedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Broker 2 dies leading a partition; the writer's pass takes it over, and the PUT
    of the dead stream's takeover record fails: the partition is served all the same,
    with every committed record (the claim already ended the dead broker's epoch), and
    the next pass writes the record. Before, the record was written before the claim,
    and its failure failed the whole takeover."""
    caplog.set_level(logging.INFO, logger="floe.storage.object.sharing")

    async def scenario() -> None:
        prefix, db = f"st-{uuid.uuid4().hex[:8]}", tmp_path / "cluster.db"
        one = member(db, 1)
        settings = config(s3, tmp_path, prefix, 1)
        bucket = RefusesTakeoverRecords(Bucket.from_config(settings), refusals=0)
        first = ObjectStore(tmp_path / "broker1", settings, bucket=bucket, guard=one)
        first.start_background_flush()
        first.create_topic(T, 1, {})
        await produce(first.partition(T, P0), first, values("a", 3))
        two, second = broker(s3, tmp_path, prefix, 2)
        await first.release(T, P0)  # handed over to broker 2, as a balancing move does
        assert await asyncio.to_thread(one.hand_over, (T, P0), 2)
        await asyncio.to_thread(two.refresh)
        assert await asyncio.to_thread(two.claim, [(T, P0)]) == [(T, P0)]
        await produce(await second.acquire(T, P0), second, values("b", 2))
        kill(second)
        two.leave()  # dead: no longer registered, its stream lease free
        await asyncio.to_thread(one.refresh)
        sharing = PartitionSharing(first, one, 1, 60.0)
        bucket.refusals = 1
        await sharing.step()
        assert first.leads(T, P0)
        every = list(enumerate(values("a", 3) + values("b", 2)))
        assert read_values(first.partition(T, P0)) == every
        (unrecorded,) = lines(caplog, "cluster.stream_fence_unrecorded stream=2")
        epoch = int(unrecorded.split("epoch=")[1].split()[0])
        assert epoch not in takeover_records(bucket, "2")
        await sharing.step()
        assert epoch in takeover_records(bucket, "2")
        assert not lines(caplog, "cluster.fenced")
        first.close()
        one.leave()

    asyncio.run(scenario())
