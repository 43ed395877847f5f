"""The cluster metadata store contract, one suite run against every backend (SQLite,
etcd, PostgreSQL), each a real server on 127.0.0.1 started for the module. Each client
made by the factory stands for one broker.

What the brokers rely on: a broker that stops renewing its lease is gone within its
TTL and its id is free; ownership changes are compare-and-set, so two brokers racing
for a partition never both win; a named lease has one live holder, and every new
holder gets a larger fencing epoch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from floe.cluster.interface import (
    BrokerIdTakenError,
    BrokerInfo,
    LeaseLostError,
    LogCommit,
    MetadataStore,
    Ownership,
)
from floe.types import PartitionId, TopicName

TTL_S = 2.0
"""Lease TTL of the tests (etcd's smallest is about 1.5 s with default timings)."""
DEADLINE_S = 15.0
T = TopicName("orders")
P0, P1 = PartitionId(0), PartitionId(1)

Stores = Callable[[], MetadataStore]


@pytest.fixture(params=["sqlite", "etcd", "postgres"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    if request.param == "sqlite":
        from helpers.cluster_sqlite import sqlite_stores as backend
    elif request.param == "etcd":
        from helpers.cluster_etcd import etcd_stores as backend
    else:
        from helpers.cluster_postgres import postgres_stores as backend
    with backend(tmp_path) as make:
        yield make


def eventually(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def broker(i: int) -> BrokerInfo:
    return BrokerInfo(i, "127.0.0.1", 9000 + i, rack=None if i % 2 else "r1")


def test_brokers_live_while_they_renew_their_lease(stores: Stores) -> None:
    a, b, c = stores(), stores(), stores()
    a.register(broker(1), TTL_S)
    b.register(broker(2), TTL_S)
    assert c.live_brokers() == [broker(1), broker(2)]
    with pytest.raises(BrokerIdTakenError):
        c.register(broker(1), TTL_S)
    # a keeps renewing past its TTL; b stops and is gone, its id free again
    started = time.monotonic()
    while time.monotonic() - started < TTL_S * 2:
        a.keepalive()
        time.sleep(TTL_S / 4)
    eventually(lambda: c.live_brokers() == [broker(1)], "broker 2's lease to expire")
    with pytest.raises(LeaseLostError):
        b.keepalive()
    c.register(BrokerInfo(2, "127.0.0.1", 9999), TTL_S)
    assert c.live_brokers() == [broker(1), BrokerInfo(2, "127.0.0.1", 9999)]
    a.unregister()  # leaving is seen at once
    assert c.live_brokers() == [BrokerInfo(2, "127.0.0.1", 9999)]


def test_ownership_is_compare_and_set(stores: Stores) -> None:
    a, b = stores(), stores()
    assert a.owners() == {}
    first = a.claim(T, P0, 1, None)
    assert first == Ownership(1, 1)
    assert b.claim(T, P0, 2, None) is None  # b decided on a stale view
    moved = b.claim(T, P0, 2, first)
    assert moved == Ownership(2, 2)
    assert a.claim(T, P0, 1, first) is None  # a's view is stale now
    assert a.claim(T, P1, 1, None) == Ownership(1, 1)
    assert b.owners() == {(T, P0): Ownership(2, 2), (T, P1): Ownership(1, 1)}
    a.forget(T)
    assert b.owners() == {}


def test_assignments_are_where_partitions_should_be_led(stores: Stores) -> None:
    a, b = stores(), stores()
    assert a.assignments() == {}
    a.assign(T, P0, 2)
    a.assign(T, P1, 1)
    a.assign(TopicName("orders2"), P0, 3)  # a name that starts like another
    assert b.assignments() == {(T, P0): 2, (T, P1): 1, (TopicName("orders2"), P0): 3}
    b.assign(T, P0, 3)  # the writer changes its mind: the last one counts
    assert a.assignments()[(T, P0)] == 3
    b.claim(T, P0, 3, None)
    a.forget(T)  # a deleted topic: its ownership and assignments go
    assert b.assignments() == {(TopicName("orders2"), P0): 3}
    assert b.owners() == {}


def test_load_reports_are_each_brokers_last(stores: Stores) -> None:
    """The writer balances by the bytes per second each broker last reported for the
    partitions it leads; a broker registering anew has no report until it makes one."""
    a, b = stores(), stores()
    a.register(broker(1), TTL_S)
    b.register(broker(2), TTL_S)
    assert a.loads() == {}
    a.report_load(1, {(T, P0): 1500.5, (TopicName("orders.eu"), P1): 0.0})
    b.report_load(2, {(T, P1): 42.0})
    assert b.loads() == {
        1: {(T, P0): 1500.5, (TopicName("orders.eu"), P1): 0.0},
        2: {(T, P1): 42.0},
    }
    a.report_load(1, {(T, P1): 7.25})  # replaces the whole report
    assert b.loads()[1] == {(T, P1): 7.25}
    a.report_load(1, {})
    assert b.loads()[1] == {}
    # broker 1 stops and starts again: no report until the new run's first (the writer
    # moves partitions only to brokers that report, i.e. serve)
    a.unregister()
    again = stores()
    again.register(broker(1), TTL_S)
    assert 1 not in b.loads()
    again.report_load(1, {(T, P0): 3.0})
    assert b.loads()[1] == {(T, P0): 3.0}


def test_racing_claims_have_one_winner(stores: Stores) -> None:
    clients = [stores() for _ in range(6)]
    for round_ in range(5):
        expected = clients[0].owners().get((T, P0))

        def race(i: int, expected: Ownership | None = expected) -> Ownership | None:
            return clients[i].claim(T, P0, i, expected)

        with ThreadPoolExecutor(len(clients)) as pool:
            won = [w for w in pool.map(race, range(len(clients))) if w is not None]
        assert len(won) == 1, f"round {round_}: {won}"
        assert clients[0].owners()[(T, P0)] == won[0]
        assert won[0].epoch == round_ + 1


def test_a_log_commit_needs_the_owners_epoch_and_the_committed_end(stores: Stores) -> None:
    """The commit point: records become part of a partition's log only by a commit made
    at the ownership epoch the partition has now, from the committed end the committer
    last saw; a former owner (a paused broker waking up) or a second commit from a stale
    end is refused and writes nothing, and every commit whose condition holds applies."""
    a, b = stores(), stores()
    assert a.committed() == {}
    first = a.claim(T, P0, 1, None)
    assert first is not None and a.claim(T, P1, 1, None) is not None
    assert a.commit(1, [LogCommit(T, P0, first.epoch, None, 10)]) == []
    assert b.committed() == {(T, P0): 10}
    stale = LogCommit(T, P0, first.epoch, None, 20)  # from a stale committed end
    ok = LogCommit(T, P1, 1, None, 5)
    assert a.commit(1, [stale, ok]) == [stale]
    assert b.committed() == {(T, P0): 10, (T, P1): 5}
    taken = b.claim(T, P0, 2, first)  # broker 2 takes partition 0 over
    assert taken is not None
    late = LogCommit(T, P0, first.epoch, 10, 30)  # broker 1's upload landing late
    assert a.commit(1, [late]) == [late]
    assert b.commit(1, [LogCommit(T, P0, taken.epoch, 10, 30)]) != []  # not its owner
    assert b.commit(2, [LogCommit(T, P0, taken.epoch, 10, 12)]) == []
    assert a.committed() == {(T, P0): 12, (T, P1): 5}
    # many partitions at once (etcd splits them over several transactions)
    many = [PartitionId(p) for p in range(2, 150)]
    owned = {p: a.claim(T, p, 1, None) for p in many}
    assert a.commit(1, [LogCommit(T, p, 1, None, p) for p in many]) == []
    assert b.committed()[(T, PartitionId(149))] == 149
    assert all(o is not None for o in owned.values())
    a.forget(T)  # a deleted topic: its log is gone too
    assert b.committed() == {}


def test_a_named_lease_has_one_holder_and_growing_epochs(stores: Stores) -> None:
    a, b = stores(), stores()
    assert a.holder("table:orders") is None
    held = a.acquire("table:orders", 1, TTL_S)
    assert held is not None and held.epoch >= 1
    assert b.holder("table:orders") == held  # everyone sees who holds it
    assert b.acquire("table:orders", 2, TTL_S) is None
    assert a.acquire("table:orders", 1, TTL_S) == held  # its holder renews it
    assert a.renew(held, TTL_S)
    # a stops renewing: b takes it with a larger epoch, and a's lease is dead
    taken = None

    def b_takes() -> bool:
        nonlocal taken
        taken = b.acquire("table:orders", 2, TTL_S)
        return taken is not None

    eventually(b_takes, "the lease to expire")
    assert taken is not None and taken.holder == 2 and taken.epoch > held.epoch
    assert a.holder("table:orders") == taken
    assert not a.renew(held, TTL_S)
    a.release(held)  # a stale release changes nothing
    assert a.acquire("table:orders", 1, TTL_S) is None
    b.release(taken)
    assert a.holder("table:orders") is None  # released: nobody holds it
    again = a.acquire("table:orders", 1, TTL_S)
    assert again is not None and again.epoch > taken.epoch
    # another name is another lease
    other = b.acquire("table:payments", 2, TTL_S)
    assert other is not None and other.holder == 2
