"""The commit point: a record is part of a partition's log only once the metadata store
committed it at the partition's current ownership epoch (real SeaweedFS, the real
SQLite metadata store, each broker's real membership and object store in this process).

The scenario is a broker whose view of the cluster is stale: paused (SIGSTOP, a long
GC) past its lease while another broker took its partition over, and awake again
before its next renewal tells it so. Its WAL upload still reaches the bucket, but:

* its acks=all producer gets NOT_LEADER_OR_FOLLOWER, not an acknowledgement (the new
  owner restored the partition without those records and gives their offsets to
  others: an acknowledgement would be a lost write);
* its high watermark does not move, so no consumer reads the records a failover
  erases (Jepsen's "inconsistent offsets");
* the partition is fenced on it at once (produce and fetch answer
  NOT_LEADER_OR_FOLLOWER), without waiting for a renewal;
* any later restore reads the new owner's records at those offsets, never the stale
  broker's, though its WAL object reaches further (a diverging log truncated by
  ownership epoch, as Kafka does by leader epoch).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import pytest
from test_object_partition_moves import CountingIndexReads, config, produce, read_values, values

from floe.cluster.interface import BrokerInfo, LogCommit, MetadataUnavailableError
from floe.cluster.membership import Membership
from floe.cluster.sqlite import SqliteMetadataStore
from floe.storage.interface import NotOwnerError
from floe.storage.object import layout
from floe.storage.object.bucket import Bucket
from floe.storage.object.partition import ObjectPartitionLog
from floe.storage.object.state import BucketState
from floe.storage.object.store import ObjectStore
from floe.types import PartitionId, TopicName
from helpers.seaweed import SeaweedServer, seaweed_server

BUCKET = "floe-moves"  # the bucket of the config() shared with that module
T = TopicName("commits")
P0 = PartitionId(0)
SESSION_S = 6.0
"""Long enough that no lease lapses while a scenario runs: the stale broker's own
clock says it may still write, and only the commit point tells it otherwise."""


@pytest.fixture(scope="module")
def s3() -> Iterator[SeaweedServer]:
    with seaweed_server(BUCKET) as server:
        yield server


class LinkDrops(SqliteMetadataStore):
    """The real SQLite store behind a link that drops once, at the next commit (as the
    chaos suite's proxy cut it): the commit is ``applied`` or not, ``then`` runs (what
    other brokers do meanwhile), and the answer never comes back."""

    applied: bool | None = None
    """None: the link holds; else whether the next commit reaches the store."""
    then: Callable[[], None] = staticmethod(lambda: None)

    def commit(self, owner: int, commits: Sequence[LogCommit]) -> list[LogCommit]:
        applied, self.applied = self.applied, None
        if applied is None:
            return super().commit(owner, commits)
        if applied:
            assert super().commit(owner, commits) == []
        self.then()
        raise MetadataUnavailableError("the link to the metadata store dropped")


class CommitGate(SqliteMetadataStore):
    """The real SQLite store whose commits wait while ``held`` is set (a slow link):
    ``waiting`` is set once one waits."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.held = threading.Event()
        self.waiting = threading.Event()
        self.opened = threading.Event()

    def commit(self, owner: int, commits: Sequence[LogCommit]) -> list[LogCommit]:
        if self.held.is_set():
            self.waiting.set()
            assert self.opened.wait(30), "the gate was never opened"
        return super().commit(owner, commits)


def member(db: Path, node: int, store: SqliteMetadataStore | None = None) -> Membership:
    return Membership(
        store or SqliteMetadataStore(db),
        BrokerInfo(node, "127.0.0.1", 9000 + node),
        SESSION_S,
        f"sqlite:///{db}",
        share=True,
    )


def broker(
    s3: SeaweedServer,
    tmp_path: Path,
    prefix: str,
    node: int,
    store: SqliteMetadataStore | None = None,
) -> tuple[Membership, ObjectStore]:
    """Broker ``node`` of a cluster on the SQLite metadata store in ``tmp_path`` (reached
    through ``store`` when given): its membership and its object store (node 1 the
    writer, the others members), started."""
    joined = member(tmp_path / "cluster.db", node, store)
    store = ObjectStore(
        tmp_path / f"broker{node}", config(s3, tmp_path, prefix, node), guard=joined,
        member=node != 1,
    )  # fmt: skip
    store.start_background_flush()
    return joined, store


def give_away(db: Path, keys: Sequence[tuple[TopicName, PartitionId]] = ((T, P0),)) -> None:
    """The writer, deciding on its own view (broker 1 paused past its lease, or cut off
    from the metadata store), gives the partitions of ``keys`` (partition 0) to broker 2
    at the next epoch."""
    writer = SqliteMetadataStore(db)
    for key in keys:
        assert writer.claim(*key, 2, writer.owners()[key]) is not None
    writer.close()


async def take_over(db: Path, two: Membership, second: ObjectStore) -> ObjectPartitionLog:
    """Broker 2 leads partition 0 from now on (:func:`take_over_all`)."""
    (taken,) = await take_over_all(db, two, second, [(T, P0)])
    return taken


async def take_over_all(
    db: Path, two: Membership, second: ObjectStore, keys: list[tuple[TopicName, PartitionId]]
) -> list[ObjectPartitionLog]:
    """Broker 2 leads the partitions of ``keys`` from now on: the writer gives them to
    broker 2 (:func:`give_away`), which claims them at the next epoch and restores them
    together."""
    give_away(db, keys)
    await asyncio.to_thread(two.refresh)
    assert await asyncio.to_thread(two.claim, keys) == keys
    return await second.acquire_all(keys)


class Gated(NamedTuple):
    prefix: str
    db: Path
    gate: CommitGate
    one: Membership
    first: ObjectStore
    p0: ObjectPartitionLog
    p1: ObjectPartitionLog
    wal: set[str]
    """The WAL objects in the bucket when the gate closed."""


async def gated_writer(s3: SeaweedServer, tmp_path: Path) -> Gated:
    """Broker 1, the writer, with topic ``T``'s two partitions committed (a-0..a-3 in
    partition 0, c-0 in partition 1), whose commits wait at the gate from now on."""
    prefix, db = f"c-{uuid.uuid4().hex[:8]}", tmp_path / "cluster.db"
    gate = CommitGate(db)
    one, first = broker(s3, tmp_path, prefix, 1, gate)
    first.create_topic(T, 2, {})
    p0, p1 = first.partition(T, P0), first.partition(T, PartitionId(1))
    await produce(p0, first, values("a", 4))
    await produce(p1, first, values("c", 1))
    wal = {item.key for item in first.bucket.list(layout.WAL_PREFIX)}
    gate.held.set()
    return Gated(prefix, db, gate, one, first, p0, p1, wal)


async def two_more_wal_objects(first: ObjectStore, wal: set[str]) -> None:
    """Return once two WAL objects not in ``wal`` are in the bucket (at most 30 s)."""
    deadline = time.monotonic() + 30
    while len({item.key for item in first.bucket.list(layout.WAL_PREFIX)} - wal) < 2:
        assert time.monotonic() < deadline, "the second WAL object was never put"
        await asyncio.sleep(0.05)


def test_a_stale_owners_upload_is_never_acknowledged_nor_read(
    s3: SeaweedServer, tmp_path: Path
) -> None:
    async def scenario() -> None:
        prefix, db = f"c-{uuid.uuid4().hex[:8]}", tmp_path / "cluster.db"
        one, first = broker(s3, tmp_path, prefix, 1)
        first.create_topic(T, 1, {})
        stale = first.partition(T, P0)
        await produce(stale, first, values("a", 4))  # committed at broker 1's epoch
        assert stale.high_watermark == 4

        two, second = broker(s3, tmp_path, prefix, 2)
        # broker 1 is paused; the writer finds its lease lapsed and gives its partition
        # to broker 2 (another client of the metadata store, deciding on its own view)
        taken = await take_over(db, two, second)
        assert taken.log_end_offset == 4
        await produce(taken, second, values("b", 2))  # offsets 4 and 5

        # broker 1 wakes up before its next renewal: its lease is still valid here,
        # its acks=all producer appends 5 records at offsets 4-8 and waits
        with pytest.raises(NotOwnerError):
            await produce(stale, first, values("x", 5))
        assert stale.high_watermark == 4  # no consumer ever saw x
        with pytest.raises(NotOwnerError):
            first.partition(T, P0)  # produce and fetch: NOT_LEADER_OR_FOLLOWER

        # the bucket holds x (its WAL object reaches offset 9), but every restore
        # reads the committed log: a, then b
        expected = [(i, f"a-{i}".encode()) for i in range(4)]
        expected += [(4 + i, f"b-{i}".encode()) for i in range(2)]
        assert read_values(taken) == expected
        state = await asyncio.to_thread(BucketState, second.bucket)
        state.commit_point(await asyncio.to_thread(two.committed))
        meta = second.topic(T)
        assert meta is not None
        key = (meta.topic_id, 0)
        assert state.end(key) == 6
        restored = b"".join(bytes(c) for c in state.read_from(second.bucket, key, 0))
        assert b"x-" not in restored and restored.count(b"b-") == 2

        second.close()
        first.close()  # uploads nothing more of the fenced partition
        two.leave()
        one.leave()

    asyncio.run(scenario())


def test_a_stale_owners_upload_is_not_read_once_the_next_owners_wal_is_merged(
    s3: SeaweedServer, tmp_path: Path
) -> None:
    """A stale owner's WAL entry beyond its epoch's end stays in the bucket, and the
    owner after it moves its own records into partition objects and deletes its WAL
    objects: the stale entry's epoch is then older than no WAL entry left, and a
    restore took it, longer than the new owner's first partition object, as the
    partition's records at those offsets (the bench's handovers read another
    broker's records, and the recovery cut the partition at their seam: 11,619
    acknowledged records gone). Each epoch's entries count up to where the metadata
    store says that epoch ended."""

    async def scenario() -> None:
        prefix, db = f"c-{uuid.uuid4().hex[:8]}", tmp_path / "cluster.db"
        one, first = broker(s3, tmp_path, prefix, 1)
        first.create_topic(T, 1, {})
        stale = first.partition(T, P0)
        await produce(stale, first, values("a", 4))  # committed at broker 1's epoch
        two, second = broker(s3, tmp_path, prefix, 2)
        taken = await take_over(db, two, second)  # broker 1 paused meanwhile
        await produce(taken, second, values("b", 1))  # offset 4
        await second.upload_partitions()  # a partition object of offset 4 alone
        with pytest.raises(NotOwnerError):  # broker 1 wakes: its x reach the bucket
            await produce(stale, first, values("x", 5))  # offsets 4-8, never committed
        await produce(taken, second, values("b", 3)[1:])  # offsets 5 and 6
        await second.upload_partitions()  # b all in partition objects, its WAL deleted
        assert not [item for item in second.bucket.list(layout.wal_folder("2"))], (
            "broker 2's WAL objects are gone"
        )

        # broker 2 hands the partition over: broker 3 reads a, then b
        three, third = broker(s3, tmp_path, prefix, 3)
        await second.release(T, P0)
        assert await asyncio.to_thread(two.hand_over, (T, P0), 3)
        await asyncio.to_thread(three.refresh)
        assert await asyncio.to_thread(three.claim, [(T, P0)]) == [(T, P0)]
        moved = await third.acquire(T, P0)
        assert read_values(moved) == list(enumerate(values("a", 4) + values("b", 3)))
        for b in (third, second, first):
            b.close()
        for m in (three, two, one):
            m.leave()

    asyncio.run(scenario())


def test_a_partition_refused_its_commit_is_not_moved_on_by_the_next_objects_commit(
    s3: SeaweedServer, tmp_path: Path
) -> None:
    """Commits are pipelined: the next WAL object is put while the one before waits
    for its commit. A partition whose records were all in flight is in the next object
    with no entry (a request waiting for it queued it again); its commit before is
    refused (taken over: fenced at its epoch's end), and the next object's commit moved
    its uploaded offset to the end of the refused records all the same: acks=all
    requests were acknowledged and consumers read past the committed end (found by
    the chaos suite: 11 acknowledged records on one offset range with another
    producer's)."""

    async def scenario() -> None:
        _, db, gate, one, first, p0, p1, wal = await gated_writer(s3, tmp_path)
        in_flight = asyncio.ensure_future(produce(p0, first, values("x", 2)))  # offsets 4-5
        await asyncio.to_thread(gate.waiting.wait, 30)  # the object with x waits for its commit
        waiting_too = asyncio.ensure_future(produce(p1, first, values("d", 1)))  # next object
        await asyncio.sleep(0)
        again = asyncio.ensure_future(first.wait_durable([p0]))  # queues p0 again
        await two_more_wal_objects(first, wal)
        give_away(db)  # the writer gives partition 0 to broker 2: x's commit is refused
        gate.held.clear()
        gate.opened.set()
        for waiter in (in_flight, again):
            with pytest.raises(NotOwnerError):
                await waiter
        assert p0.durable_offset == 4 and p0.high_watermark == 4
        with pytest.raises(NotOwnerError):  # broker 1 is fenced: it commits nothing more
            await waiting_too
        first.close()
        one.leave()

    asyncio.run(scenario())


def test_a_partition_restamped_at_its_commit_is_not_moved_on_by_the_next_objects_commit(
    s3: SeaweedServer, tmp_path: Path
) -> None:
    """The same door as above when the partition's epoch changed but it is still this
    broker's: paused past its lease, it rejoined and owned its partitions again at new
    epochs while a WAL object stamped at the old one was in flight. That object's commit
    leaves the partition out, to go again into an object stamped right; the next object,
    put meanwhile with no records of it (a waiting request queued it again), moved its
    uploaded offset past them all the same, so they were acknowledged and never
    committed (the chaos suite on etcd, seed 120412: 3 acknowledged records missing from
    the log, read by a consumer before)."""

    async def scenario() -> None:
        prefix, db, gate, one, first, p0, p1, wal = await gated_writer(s3, tmp_path)
        held = asyncio.ensure_future(produce(p1, first, values("d", 1)))
        await asyncio.to_thread(gate.waiting.wait, 30)  # d's object waits for its commit
        in_flight = asyncio.ensure_future(produce(p0, first, values("x", 2)))  # offsets 4-5
        await two_more_wal_objects(first, wal)
        # broker 1 owns partition 0 again at the next epoch (what a rejoin does)
        other = SqliteMetadataStore(db)
        was = other.owners()[(T, P0)]
        one.owned[(T, P0)] = other.claim(T, P0, 1, was)
        other.close()
        again = asyncio.ensure_future(first.wait_durable([p0]))  # queues p0 again
        more = asyncio.ensure_future(produce(p1, first, values("e", 1)))  # the next object
        await asyncio.sleep(0.1)
        gate.held.clear()
        gate.opened.set()
        await asyncio.gather(held, in_flight, again, more)
        assert p0.high_watermark == 6
        assert gate.committed()[(T, P0)] == 6  # acknowledged only once committed
        two, second = broker(s3, tmp_path, prefix, 2)
        taken = await take_over(db, two, second)
        expected = [(i, f"a-{i}".encode()) for i in range(4)]
        expected += [(4 + i, f"x-{i}".encode()) for i in range(2)]
        assert read_values(taken) == expected
        second.close()
        first.close()
        two.leave()
        one.leave()

    asyncio.run(scenario())


def test_an_upload_committed_after_its_stream_was_fenced_is_restored_not_deleted(
    s3: SeaweedServer, tmp_path: Path
) -> None:
    """The takeover's order used to be: fence the stream (a takeover record naming the
    next sequence), then claim the partitions. A broker still owning a partition in
    between PUTs a WAL object past that sequence and gets it acknowledged: it was
    deleted as a "zombie" by the next reader, losing acknowledged records. Now the
    commit point decides: the object's records were committed, so they are restored."""

    async def scenario() -> None:
        prefix, db = f"c-{uuid.uuid4().hex[:8]}", tmp_path / "cluster.db"
        one, first = broker(s3, tmp_path, prefix, 1)
        first.create_topic(T, 1, {})
        owner = first.partition(T, P0)
        await produce(owner, first, values("a", 3))
        two, second = broker(s3, tmp_path, prefix, 2)
        # broker 2 takes broker 1's stream over (broker 1 looks dead to it) ...
        await second.fence_stream("1", 1_000)
        # ... while broker 1 still owns the partition: its upload is committed
        await produce(owner, first, values("x", 2))
        assert owner.high_watermark == 5
        # then broker 2 claims the partition and restores it
        taken = await take_over(db, two, second)
        expected = [(i, f"a-{i}".encode()) for i in range(3)]
        expected += [(3 + i, f"x-{i}".encode()) for i in range(2)]
        assert read_values(taken) == expected  # every acknowledged record
        second.close()
        first.close()
        two.leave()
        one.leave()

    asyncio.run(scenario())


def test_a_takeover_reads_only_its_own_partitions_up_to_their_committed_ends(
    s3: SeaweedServer, tmp_path: Path
) -> None:
    """The committed ends of partitions a restore does not take (other brokers', being
    written as it lists) do not hold it up: only the restored partitions must reach
    theirs (found by the chaos suite: a takeover of one partition, with another's WAL
    objects already moved into partition objects it did not list, failed with "the
    bucket lacks committed records")."""

    async def scenario() -> None:
        prefix, db = f"c-{uuid.uuid4().hex[:8]}", tmp_path / "cluster.db"
        one, first = broker(s3, tmp_path, prefix, 1)
        first.create_topic(T, 2, {})
        await produce(first.partition(T, P0), first, values("a", 3))
        await produce(first.partition(T, PartitionId(1)), first, values("b", 4))
        await first.upload_partitions()  # WAL objects go: partition objects hold it all
        two, second = broker(s3, tmp_path, prefix, 2)
        # broker 1 goes on writing partition 1: its committed end moves past any
        # listing broker 2 makes (here at once, by a commit of broker 1's)
        writer = SqliteMetadataStore(db)
        p1 = writer.owners()[(T, PartitionId(1))]
        assert writer.commit(1, [LogCommit(T, PartitionId(1), p1.epoch, 4, 1_000)]) == []
        writer.close()
        taken = await take_over(db, two, second)
        assert read_values(taken) == [(i, f"a-{i}".encode()) for i in range(3)]
        second.close()
        first.close()
        two.leave()
        one.leave()

    asyncio.run(scenario())


def test_a_broker_sharing_partitions_follows_the_wal_and_a_takeover_reads_no_index(
    s3: SeaweedServer, tmp_path: Path
) -> None:
    """A broker that may take partitions over follows the WAL objects' indexes as they
    are written (as a standby does): its takeover then reads none (under load the WAL
    held a thousand objects, and a takeover read the indexes of the hundreds written
    since the last one, seconds of the dead broker's partitions' outage), and restores
    every committed record."""

    async def scenario() -> None:
        prefix, db = f"c-{uuid.uuid4().hex[:8]}", tmp_path / "cluster.db"
        one, first = broker(s3, tmp_path, prefix, 1)
        first.create_topic(T, 1, {})
        await produce(first.partition(T, P0), first, values("a", 3))
        two = member(db, 2)
        bucket = CountingIndexReads(Bucket.from_config(config(s3, tmp_path, prefix, 2)))
        second = ObjectStore(
            tmp_path / "broker2", config(s3, tmp_path, prefix, 2), bucket=bucket,
            guard=two, member=True,
        )  # fmt: skip
        second.start_background_flush()
        await produce(first.partition(T, P0), first, values("b", 3))
        written = {item.key for item in bucket.list(layout.WAL_PREFIX)}
        deadline = time.monotonic() + 30
        while not written <= set(bucket.indexed):
            assert time.monotonic() < deadline, "the member never read the new WAL objects"
            await asyncio.sleep(0.1)
        bucket.indexed.clear()
        taken = await take_over(db, two, second)
        assert bucket.indexed == []
        assert read_values(taken) == list(enumerate(values("a", 3) + values("b", 3)))
        second.close()
        first.close()
        two.leave()
        one.leave()

    asyncio.run(scenario())


async def before_the_drop(
    s3: SeaweedServer, tmp_path: Path, prefix: str, applied: bool, taken_over: bool
) -> tuple[Membership, ObjectStore, ObjectPartitionLog]:
    """Broker 1 (its membership, store and partition 0) with 4 records committed, whose
    link to the metadata store drops at its next commit (``applied`` or not), during
    which the writer gives the partition to broker 2 when ``taken_over``."""
    link, one, first, owner = await linked(s3, tmp_path, prefix)
    link.applied = applied
    if taken_over:
        link.then = lambda: give_away(tmp_path / "cluster.db")
    return one, first, owner


async def linked(
    s3: SeaweedServer, tmp_path: Path, prefix: str
) -> tuple[LinkDrops, Membership, ObjectStore, ObjectPartitionLog]:
    """Broker 1 on a :class:`LinkDrops` link (the link, its membership, store and
    partition 0) with 4 records committed."""
    link = LinkDrops(tmp_path / "cluster.db")
    one, first = broker(s3, tmp_path, prefix, 1, link)
    first.create_topic(T, 1, {})
    owner = first.partition(T, P0)
    await produce(owner, first, values("a", 4))
    return link, one, first, owner


@pytest.mark.parametrize("taken_over", [False, True], ids=["same_owner", "taken_over"])
def test_a_commit_whose_answer_was_lost_is_acknowledged_once_it_is_known_applied(
    s3: SeaweedServer, tmp_path: Path, taken_over: bool
) -> None:
    """The link to the metadata store drops after a commit reached it: the records are
    in the log. The acks=all waiter used to get an error at once (NOT_ENOUGH_REPLICAS_
    AFTER_APPEND, and NOT_LEADER_OR_FOLLOWER once another broker had the partition),
    which librdkafka takes as leave to send the records again as new ones after an epoch
    bump: the chaos suite found them written twice (PostgreSQL, seed 418207). Now it
    waits until the broker knows: its retried commit finds the end its lost one set,
    or, the partition taken over meanwhile, the end its epoch ended at; it is
    acknowledged, and the records are in the log once."""

    async def scenario() -> None:
        prefix = f"c-{uuid.uuid4().hex[:8]}"
        one, first, owner = await before_the_drop(s3, tmp_path, prefix, True, taken_over)
        await produce(owner, first, values("x", 2))  # acknowledged: no error raised
        assert owner.high_watermark == 6
        expected = [(i, f"a-{i}".encode()) for i in range(4)]
        expected += [(4 + i, f"x-{i}".encode()) for i in range(2)]
        if taken_over:
            with pytest.raises(NotOwnerError):  # broker 2 owns it: nothing more here
                await produce(owner, first, values("y", 1))
            two, second = broker(s3, tmp_path, prefix, 2)
            await asyncio.to_thread(two.refresh)
            assert await asyncio.to_thread(two.claim, [(T, P0)]) == [(T, P0)]
            taken = await second.acquire(T, P0)
            assert read_values(taken) == expected  # in the log, once
            second.close()
            two.leave()
        else:
            await produce(owner, first, values("y", 1))
            assert read_values(owner) == [*expected, (6, b"y-0")]
        first.close()
        one.leave()

    asyncio.run(scenario())


def test_a_commit_lost_before_it_landed_is_not_acknowledged_after_a_takeover(
    s3: SeaweedServer, tmp_path: Path
) -> None:
    """The other side of the same fault: the link drops before the commit reaches the
    store, and another broker takes the partition over. The records are not in the log
    (the new owner gives their offsets to others), so the waiter is told
    NOT_LEADER_OR_FOLLOWER, never acknowledged."""

    async def scenario() -> None:
        prefix = f"c-{uuid.uuid4().hex[:8]}"
        one, first, owner = await before_the_drop(s3, tmp_path, prefix, False, True)
        with pytest.raises(NotOwnerError):
            await produce(owner, first, values("x", 2))
        assert owner.high_watermark == 4
        first.close()
        one.leave()

    asyncio.run(scenario())


def test_a_failed_commit_voids_the_object_put_behind_it(s3: SeaweedServer, tmp_path: Path) -> None:
    """The next WAL object is put while the last one's commit is in flight (the commit's
    round trip hidden behind the PUT). When that commit fails, the object put behind it
    is never committed on its own (its records follow ones the log lacks): both sets of
    records go again into a new object, are acknowledged once committed, and stand in
    the log once, in order, for this broker and for a broker taking the partition over."""

    async def scenario() -> None:
        prefix = f"c-{uuid.uuid4().hex[:8]}"
        link, one, first, owner = await linked(s3, tmp_path, prefix)
        committing, put_behind = threading.Event(), threading.Event()

        def wal_objects() -> int:
            return sum(1 for _ in first.bucket.list(layout.WAL_PREFIX))

        before = wal_objects()

        def then() -> None:  # on the membership's thread, inside the failing commit
            committing.set()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not put_behind.is_set():
                if wal_objects() >= before + 2:
                    put_behind.set()
                time.sleep(0.05)

        link.applied, link.then = False, then
        xs = asyncio.create_task(produce(owner, first, values("x", 2)))
        assert await asyncio.to_thread(committing.wait, 10)
        await asyncio.gather(xs, produce(owner, first, values("y", 2)))
        assert put_behind.is_set(), "no WAL object was put while the commit was in flight"
        expected = [(i, f"a-{i}".encode()) for i in range(4)]
        expected += [(4 + i, f"x-{i}".encode()) for i in range(2)]
        expected += [(6 + i, f"y-{i}".encode()) for i in range(2)]
        assert owner.high_watermark == 8
        assert read_values(owner) == expected
        give_away(tmp_path / "cluster.db")
        two, second = broker(s3, tmp_path, prefix, 2)
        await asyncio.to_thread(two.refresh)
        assert await asyncio.to_thread(two.claim, [(T, P0)]) == [(T, P0)]
        assert read_values(await second.acquire(T, P0)) == expected
        for store, joined in ((second, two), (first, one)):
            store.close()
            joined.leave()

    asyncio.run(scenario())


def test_manifest_pointers_are_set_only_for_partitions_owned_at_their_epoch(
    tmp_path: Path,
) -> None:
    """A broker points the partitions it owns at their manifests, at the epoch it owns
    each at: one it never owned is False (the store is not asked), one taken over
    behind its back is refused (False, whether the store refuses it or the broker's
    view saw the takeover first; the broker is not fenced: the commit point decides
    that), and the pointers set are read back."""
    db = tmp_path / "cluster.db"
    one = member(db, 1)
    other = SqliteMetadataStore(db)
    p1, p2 = PartitionId(1), PartitionId(2)
    try:
        one.join()
        assert one.claim([(T, P0), (T, p1)]) == [(T, P0), (T, p1)]
        assert other.claim(T, p2, 2, None) is not None
        first = {(T, P0): "m/0/1", (T, p1): "m/1/1", (T, p2): "m/2/1"}
        assert one.set_manifests(first).result(timeout=10) == {
            (T, P0): True, (T, p1): True, (T, p2): False,
        }  # fmt: skip
        assert one.manifests() == {(T, P0): "m/0/1", (T, p1): "m/1/1"}

        give_away(db)  # broker 2 takes partition 0 at the next epoch
        again = {(T, P0): "m/0/2", (T, p1): "m/1/2"}
        assert one.set_manifests(again).result(timeout=10) == {(T, P0): False, (T, p1): True}
        assert other.manifests() == {(T, P0): "m/0/1", (T, p1): "m/1/2"}
        assert one.fenced is None
    finally:
        one.leave()
        other.close()
