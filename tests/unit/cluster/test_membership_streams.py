"""WAL stream leases (a real SQLite metadata store, shared by several memberships): the
writer writes its own stream at its stream lease's epoch, and at its start gets, for
every other stream, an epoch above every epoch that stream was written at, waiting for a
former writer's stream lease to lapse first (it still held it a moment ago)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from floe.cluster.interface import BrokerInfo, Lease
from floe.cluster.membership import STREAM_LEASE, WRITER_LEASE, Membership
from floe.cluster.sqlite import SqliteMetadataStore
from floe.types import PartitionId, TopicName

TTL_S = 3.0


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "cluster.db"


@pytest.fixture
def members(db: Path) -> Iterator[list[Membership]]:
    started: list[Membership] = []
    yield started
    for m in started:
        m.leave()


def member(db: Path, node: int, started: list[Membership]) -> Membership:
    me = BrokerInfo(node, "127.0.0.1", 9000 + node)
    m = Membership(SqliteMetadataStore(db), me, TTL_S, "db")
    started.append(m)
    return m


def test_the_writer_fences_every_stream_above_its_epochs(
    db: Path, members: list[Membership]
) -> None:
    former = SqliteMetadataStore(db)  # broker 3 wrote until a moment ago, then froze
    held = former.acquire(STREAM_LEASE.format(3), 3, TTL_S)
    assert held is not None and held.epoch == 1
    old = SqliteMetadataStore(db)  # broker 2 wrote its stream at epoch 1, long ago
    gone = old.acquire(STREAM_LEASE.format(2), 2, TTL_S)
    assert gone is not None and gone.epoch == 1
    old.release(gone)

    writer = member(db, 1, members)
    own_epoch = writer.acquire()
    started = time.monotonic()
    fences = writer.fence_streams(["", "1", "2", "3"])
    # its own at its own epoch, the unnamed stream of older buckets at the writer
    # lease's, the others above what they were written at; 3 only once its lease lapsed
    assert fences == {"": 1, "1": own_epoch, "2": 2, "3": 2}
    assert time.monotonic() - started > 1.0
    # the fence let go of the streams: their brokers come back above it
    again = old.acquire(STREAM_LEASE.format(2), 2, TTL_S)
    assert again is not None and again.epoch == 3
    old.release(again)
    old.close()
    former.close()


def test_a_restarted_writer_writes_its_stream_above_its_last_run(
    db: Path, members: list[Membership]
) -> None:
    first = member(db, 1, members)
    epoch = first.acquire()
    members.remove(first)
    first.leave()
    second = member(db, 1, members)
    assert second.acquire() > epoch


def sharing(db: Path, node: int, started: list[Membership]) -> Membership:
    me = BrokerInfo(node, "127.0.0.1", 9000 + node)
    m = Membership(SqliteMetadataStore(db), me, TTL_S, "db", share=True)
    started.append(m)
    return m


def test_members_write_their_own_streams_and_the_writer_fences_only_dead_ones(
    db: Path, members: list[Membership]
) -> None:
    dead = SqliteMetadataStore(db)  # broker 3 wrote until a moment ago, then froze
    held = dead.acquire(STREAM_LEASE.format(3), 3, TTL_S)
    assert held is not None
    member2 = sharing(db, 2, members)
    stream2 = member2.join()
    writer = sharing(db, 1, members)
    own = writer.acquire()
    assert writer.view.controller == 1
    fences = writer.fence_streams(["1", "2", "3"])
    # broker 2 is alive and writes its stream: left alone; 3 is fenced above its epoch
    assert fences == {"1": own, "3": held.epoch + 1}
    check = SqliteMetadataStore(db)
    lease2 = check.holder(STREAM_LEASE.format(2))
    assert lease2 is not None and lease2.holder == 2 and lease2.epoch == stream2
    check.close()
    dead.close()


def test_the_writer_claims_only_what_no_live_member_owns(
    db: Path, members: list[Membership]
) -> None:
    t = TopicName("orders")
    p0, p1 = (t, PartitionId(0)), (t, PartitionId(1))
    member2 = sharing(db, 2, members)
    member2.join()
    member2.claim([p0])
    assert member2.owned.keys() == {p0}
    writer = sharing(db, 1, members)
    writer.acquire()
    writer.claim([p0, p1])
    assert writer.owned.keys() == {p1}  # p0 is a live member's
    assert writer.view.owners[p0].owner == 2
    # the member dies: its partition is the writer's to take
    members.remove(member2)
    member2.leave()
    deadline = time.monotonic() + 10
    while any(b.broker_id == 2 for b in writer.view.brokers):
        assert time.monotonic() < deadline, "the dead member still looks alive"
        time.sleep(0.2)
    writer.claim([p0])
    assert writer.owned[p0].owner == 1 and writer.owned[p0].epoch == 2


class _Watched(SqliteMetadataStore):
    """The writer's own metadata store, noting which brokers another connection sees
    alive the moment the writer lease is given up (nothing else changed)."""

    def __init__(self, db: Path) -> None:
        super().__init__(db)
        self._observer = SqliteMetadataStore(db)
        self.live_at_release: list[int] | None = None

    def release(self, lease: Lease) -> None:
        super().release(lease)
        if lease.name == WRITER_LEASE:
            self.live_at_release = [b.broker_id for b in self._observer.live_brokers()]

    def close(self) -> None:
        self._observer.close()
        super().close()


def test_a_leaving_writer_is_gone_before_its_writer_lease_is_free(
    db: Path, members: list[Membership]
) -> None:
    """The member that takes the writer lease the moment it is free must see the former
    writer gone, so that it fences its stream and claims its partitions (internal
    topics' too) when its store opens: a former writer still listed as live keeps them,
    and the new writer's group coordinator finds __consumer_offsets led elsewhere."""
    member2 = sharing(db, 2, members)
    member2.join()
    store = _Watched(db)
    writer = Membership(store, BrokerInfo(1, "127.0.0.1", 9001), TTL_S, "db", share=True)
    writer.acquire()
    writer.leave()
    assert store.live_at_release == [2]
    own = member2.acquire()
    fences = member2.fence_streams(["1", "2"])  # the former writer's stream is fenced
    assert set(fences) == {"1", "2"} and fences["2"] == own
