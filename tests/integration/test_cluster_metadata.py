"""The cluster metadata store contract, one suite run against every backend (SQLite,
etcd, PostgreSQL), each a real server on 127.0.0.1 started for the module. Each client
made by the factory stands for one broker.

What the brokers rely on: a broker that stops renewing its lease is gone within its
TTL and its id is free; ownership changes are compare-and-set, so two brokers racing
for a partition never both win; a named lease has one live holder, and every new
holder gets a larger fencing epoch; the named leases a registered broker's store takes
for it share its registration's session (one clock: they live and lapse together).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest

from floe.cluster.interface import (
    EPOCH_ENDS_KEPT,
    BrokerIdTakenError,
    BrokerInfo,
    Lease,
    LeaseLostError,
    LogCommit,
    ManifestCommit,
    MetadataStore,
    MetadataUnavailableError,
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


def test_a_manifest_pointer_needs_the_owners_epoch(stores: Stores) -> None:
    """A partition points at its manifest (a bucket key) only by a broker that owns it at
    the epoch it names: a former owner can never point it elsewhere, and every pointer
    whose condition holds is set, whatever the others of its call."""
    a, b = stores(), stores()
    assert a.manifests() == {}
    first = a.claim(T, P0, 1, None)
    assert first is not None
    assert a.set_manifests(1, [ManifestCommit(T, P0, first.epoch, "m/orders-0/1")]) == []
    assert b.manifests() == {(T, P0): "m/orders-0/1"}
    taken = b.claim(T, P0, 2, first)  # broker 2 takes partition 0 over
    assert taken is not None
    late = ManifestCommit(T, P0, first.epoch, "m/orders-0/late")  # broker 1, paused
    assert a.set_manifests(1, [late]) == [late]
    wrong = ManifestCommit(T, P0, taken.epoch, "m/orders-0/wrong")  # not its owner
    assert a.set_manifests(1, [wrong]) == [wrong]
    assert b.manifests() == {(T, P0): "m/orders-0/1"}
    assert b.set_manifests(2, [ManifestCommit(T, P0, taken.epoch, "m/orders-0/2")]) == []
    assert a.manifests() == {(T, P0): "m/orders-0/2"}
    # one call, one partition accepted and one refused: only the accepted one is set
    other = a.claim(T, P1, 1, None)
    assert other is not None
    mixed = [late, ManifestCommit(T, P1, other.epoch, "m/orders-1/1")]
    assert a.set_manifests(1, mixed) == [late]
    assert b.manifests() == {(T, P0): "m/orders-0/2", (T, P1): "m/orders-1/1"}
    # many partitions at once (etcd splits them over several transactions), one of
    # them refused in the middle
    many = [PartitionId(p) for p in range(2, 150)]
    assert all(a.claim(T, p, 1, None) is not None for p in many)
    stale = ManifestCommit(T, P0, first.epoch, "m/orders-0/stale")
    pointers = [ManifestCommit(T, p, 1, f"m/orders-{p}/1") for p in many]
    assert a.set_manifests(1, [*pointers[:100], stale, *pointers[100:]]) == [stale]
    found = b.manifests()
    assert found[(T, P0)] == "m/orders-0/2"
    assert all(found[(T, p)] == f"m/orders-{p}/1" for p in many)
    assert len(found) == len(many) + 2


def test_forgetting_a_topic_drops_its_manifest_pointers(stores: Stores) -> None:
    a, b = stores(), stores()
    kept = TopicName("orders2")  # a name that starts like the deleted one
    for topic in (T, kept):
        owned = a.claim(topic, P0, 1, None)
        assert owned is not None
        assert a.set_manifests(1, [ManifestCommit(topic, P0, owned.epoch, f"m/{topic}")]) == []
    a.forget(T)  # a deleted topic: its pointers go, and none can be set at its old epoch
    assert b.manifests() == {(kept, P0): "m/orders2"}
    gone = ManifestCommit(T, P0, 1, "m/orders")
    assert a.set_manifests(1, [gone]) == [gone]
    assert b.manifests() == {(kept, P0): "m/orders2"}


def test_a_claim_records_where_the_ended_epoch_ended(stores: Stores) -> None:
    """Where each ownership epoch ended (its committed end when the next was claimed) is
    recorded by the claim itself: a broker whose commit's answer was lost learns from it,
    after a takeover, whether its records are in the log (Kafka's leader epoch cache)."""
    a, b = stores(), stores()
    first = a.claim(T, P0, 1, None)
    assert first is not None and a.epoch_end(T, P0, first.epoch) is None  # still current
    assert a.commit(1, [LogCommit(T, P0, first.epoch, None, 10)]) == []
    second = b.claim(T, P0, 2, first)
    assert second is not None
    assert a.epoch_end(T, P0, first.epoch) == 10
    assert b.epoch_end(T, P0, second.epoch) is None
    third = a.claim(T, P0, 1, second)  # epoch 2 committed nothing: it ended where it began
    assert third is not None and b.epoch_end(T, P0, second.epoch) == 10
    unclaimed = a.claim(T, P1, 1, None)
    assert unclaimed is not None
    fourth = b.claim(T, P1, 2, unclaimed)  # nothing ever committed: ended at 0
    assert fourth is not None and a.epoch_end(T, P1, unclaimed.epoch) == 0
    held = third
    for i in range(EPOCH_ENDS_KEPT):  # the oldest ends are dropped as new epochs end
        moved = a.claim(T, P0, 1 + i % 2, held)
        assert moved is not None
        held = moved
    assert a.epoch_end(T, P0, first.epoch) is None
    assert a.epoch_end(T, P0, held.epoch - 1) == 10
    a.forget(T)  # a deleted topic: its epochs are gone too
    assert b.epoch_end(T, P0, held.epoch - 1) is None


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


# -- sessions: a registered broker's named leases ------------------------------------

WRITER, STREAM = "storage-writer", "wal-stream-1"


def ids(store: MetadataStore) -> list[int]:
    return [b.broker_id for b in store.live_brokers()]


def renewing(renew: Callable[[], None], seconds: float) -> None:
    """Call ``renew`` every quarter of the TTL for ``seconds``."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        renew()
        time.sleep(TTL_S / 4)


def test_a_brokers_named_leases_live_and_lapse_with_its_registration(stores: Stores) -> None:
    """One session per broker (issue 29): the registration and the named leases its store
    takes for it run on one clock. Renewing the registration renews the leases, renewing
    a lease renews the registration, and they lapse together: the writer lease never
    outlives the registration, nor lapses a renewal before it."""
    a, b = stores(), stores()
    a.register(broker(1), TTL_S)
    writer, stream = a.acquire(WRITER, 1, TTL_S), a.acquire(STREAM, 1, TTL_S)
    assert writer is not None and stream is not None
    renewing(a.keepalive, TTL_S * 2)  # the registration alone keeps the leases
    assert b.holder(WRITER) == writer and b.holder(STREAM) == stream
    assert b.acquire(WRITER, 2, TTL_S) is None

    def renew_writer() -> None:
        assert a.renew(writer, TTL_S)

    renewing(renew_writer, TTL_S * 2)  # one lease keeps the registration and the other
    assert ids(b) == [1] and b.holder(STREAM) == stream
    assert a.renew(stream, TTL_S)
    # broker 1 stops renewing: all of it lapses at once
    eventually(
        lambda: 1 not in ids(b) or b.holder(WRITER) is None or b.holder(STREAM) is None,
        "broker 1's session to lapse",
    )
    assert ids(b) == [] and b.holder(WRITER) is None and b.holder(STREAM) is None
    assert not a.renew(writer, TTL_S) and not a.renew(stream, TTL_S)
    with pytest.raises(LeaseLostError):
        a.keepalive()
    taken = b.acquire(WRITER, 2, TTL_S)
    assert taken is not None and taken.epoch > writer.epoch
    # broker 1 registers again (a new session): its stream comes back at a new epoch
    a.register(broker(1), TTL_S)
    again = a.acquire(STREAM, 1, TTL_S)
    assert again is not None and again.epoch > stream.epoch
    assert a.acquire(WRITER, 1, TTL_S) is None


def test_unregister_ends_the_brokers_named_leases_at_once(stores: Stores) -> None:
    """A broker that leaves (or is fenced) takes its named leases with its registration:
    another broker takes them at once, at a larger epoch, and the releases the leaving
    broker makes after unregistering (what Membership.leave does) change nothing."""
    a, b = stores(), stores()
    a.register(broker(1), TTL_S)
    b.register(broker(2), TTL_S)
    writer, stream = a.acquire(WRITER, 1, TTL_S), a.acquire(STREAM, 1, TTL_S)
    assert writer is not None and stream is not None
    a.unregister()
    assert ids(b) == [2] and b.holder(WRITER) is None and b.holder(STREAM) is None
    taken = b.acquire(WRITER, 2, TTL_S)
    assert taken is not None and taken.epoch > writer.epoch
    assert not a.renew(writer, TTL_S)
    a.release(writer)  # taken by another broker meanwhile
    a.release(stream)  # nobody took it
    assert b.holder(WRITER) == taken and b.holder(STREAM) is None
    fenced = b.acquire(STREAM, 2, TTL_S)  # the new writer fences broker 1's stream
    assert fenced is not None and fenced.epoch > stream.epoch
    b.release(fenced)
    # broker 1 again, a new run: its stream above every epoch it was written at
    c = stores()
    c.register(broker(1), TTL_S)
    back = c.acquire(STREAM, 1, TTL_S)
    assert back is not None and back.epoch > fenced.epoch


def test_releasing_one_named_lease_leaves_the_rest_of_the_session(stores: Stores) -> None:
    """A broker giving up one lease (the writer's, to hand it over) keeps its
    registration and its other leases, still on one clock; taking the lease again puts
    it back into the session at a new epoch."""
    a, b = stores(), stores()
    a.register(broker(1), TTL_S)
    writer, stream = a.acquire(WRITER, 1, TTL_S), a.acquire(STREAM, 1, TTL_S)
    assert writer is not None and stream is not None
    a.release(writer)
    assert b.holder(WRITER) is None and b.holder(STREAM) == stream and ids(b) == [1]
    taken = b.acquire(WRITER, 2, TTL_S)  # b is not registered: a lease of its own
    assert taken is not None and taken.epoch > writer.epoch
    renewing(a.keepalive, TTL_S * 2)  # b does not renew its lease: it lapses
    assert ids(b) == [1] and b.holder(STREAM) == stream and a.renew(stream, TTL_S)
    assert b.holder(WRITER) is None
    again = a.acquire(WRITER, 1, TTL_S)
    assert again is not None and again.epoch > taken.epoch
    renewing(a.keepalive, TTL_S * 2)
    assert b.holder(WRITER) == again and b.holder(STREAM) == stream


def test_a_holder_not_registered_through_the_store_has_a_lease_of_its_own(
    stores: Stores,
) -> None:
    """Tools and tests take named leases without registering, and a broker's store may
    take one for another holder: each is a lease of its own TTL, untouched by any
    registration's session."""
    a, tool = stores(), stores()
    a.register(broker(1), TTL_S)
    mine = a.acquire(WRITER, 1, TTL_S)
    other = a.acquire("table:orders", 7, TTL_S)  # for another holder
    borrowed = tool.acquire("group:g", 1, TTL_S)  # broker 1's id, not registered by tool
    assert mine is not None and other is not None and borrowed is not None
    a.unregister()
    assert tool.holder(WRITER) is None  # the session's lease went with it
    assert tool.holder("table:orders") == other and tool.holder("group:g") == borrowed
    assert a.renew(other, TTL_S) and tool.renew(borrowed, TTL_S)
    # and they lapse by themselves, however alive the registration is
    a.register(broker(1), TTL_S)
    renewing(a.keepalive, TTL_S * 2)
    assert tool.holder("table:orders") is None and tool.holder("group:g") is None
    later = tool.acquire("group:g", 1, TTL_S)
    assert later is not None and later.epoch > borrowed.epoch


def test_a_lease_taken_for_a_broker_elsewhere_joins_its_session(stores: Stores) -> None:
    """A lease taken for a broker by a store that did not register it (a tool, or the
    broker's store before it registered) joins the broker's session, at its epoch, when
    the broker's own store acquires it."""
    a, tool = stores(), stores()
    before = tool.acquire(WRITER, 1, TTL_S)
    a.register(broker(1), TTL_S)
    joined = a.acquire(WRITER, 1, TTL_S)
    assert joined is not None and joined == before
    renewing(a.keepalive, TTL_S * 2)
    assert tool.holder(WRITER) == joined
    a.unregister()
    assert tool.holder(WRITER) is None


def test_registering_again_while_registered_keeps_the_session(stores: Stores) -> None:
    """A broker registers again with the port its listener got (picked at bind) after it
    took its leases: its session goes on, named leases included."""
    a, b = stores(), stores()
    a.register(broker(1), TTL_S)
    writer = a.acquire(WRITER, 1, TTL_S)
    assert writer is not None
    a.register(BrokerInfo(1, "127.0.0.1", 9999), TTL_S)
    assert b.holder(WRITER) == writer
    renewing(a.keepalive, TTL_S * 2)
    assert b.holder(WRITER) == writer and a.renew(writer, TTL_S)
    assert b.live_brokers() == [BrokerInfo(1, "127.0.0.1", 9999)]
    a.unregister()
    assert b.holder(WRITER) is None


def test_a_lapsed_registration_takes_no_lease_until_it_registers_again(stores: Stores) -> None:
    """A registered broker's store whose registration lapsed takes nothing for it until
    it registers again: acquire raises a LeaseLostError that is also a
    MetadataUnavailableError (callers that retry when the store does not answer retry,
    and their next keepalive says to register again)."""
    a, b = stores(), stores()
    a.register(broker(1), TTL_S)
    eventually(lambda: ids(b) == [], "broker 1's registration to lapse")
    with pytest.raises(MetadataUnavailableError) as caught:
        a.acquire(WRITER, 1, TTL_S)
    assert isinstance(caught.value, LeaseLostError)
    assert b.holder(WRITER) is None
    with pytest.raises(LeaseLostError):
        a.keepalive()
    with pytest.raises(LeaseLostError):  # the same once a keepalive said so
        a.acquire(STREAM, 1, TTL_S)
    assert b.holder(STREAM) is None
    a.register(broker(1), TTL_S)
    held = a.acquire(WRITER, 1, TTL_S)
    assert held is not None and held.epoch == 1


_BEFORE_SESSIONS = [
    "CREATE TABLE brokers (broker_id integer PRIMARY KEY, host text NOT NULL, "
    "port integer NOT NULL, rack text, token text NOT NULL, {ttl} NOT NULL, "
    "expires_at {time} NOT NULL)",
    "CREATE TABLE leases (name text PRIMARY KEY, holder integer NOT NULL, "
    "epoch bigint NOT NULL, expires_at {time} NOT NULL)",
    "INSERT INTO leases VALUES ('table:orders', 9, 4, {in_an_hour})",
    "INSERT INTO leases VALUES ('storage-writer', 1, 2, {long_ago})",
]
"""The brokers and leases tables as stores made them before sessions (issue 29), with a
live lease of another holder and an expired writer lease."""


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_tables_made_before_sessions_are_upgraded(backend: str, tmp_path: Path) -> None:
    """A cluster's existing SQLite file or PostgreSQL schema gains what sessions need
    when a store opens it; its leases keep their holders and epochs."""
    with ExitStack() as stack:
        if backend == "sqlite":
            import sqlite3

            from floe.cluster.sqlite import SqliteMetadataStore

            db = sqlite3.connect(tmp_path / "cluster.db", isolation_level=None)
            stack.callback(db.close)
            words = {"ttl": "ttl_s REAL", "time": "REAL"}
            times = {"in_an_hour": str(time.time() + 3600), "long_ago": "0"}
            for statement in _BEFORE_SESSIONS:
                db.execute(statement.format(**words, **times))

            def make() -> MetadataStore:
                made = SqliteMetadataStore(tmp_path / "cluster.db")
                stack.callback(made.close)
                return made
        else:
            import psycopg

            from floe.cluster.postgres import PostgresMetadataStore
            from helpers.cluster_postgres import dsn
            from helpers.postgres import postgres_server

            server = stack.enter_context(postgres_server())
            with psycopg.connect(dsn(server), autocommit=True) as conn:
                conn.execute("CREATE SCHEMA floe")
                conn.execute("SET search_path = floe")
                words = {"ttl": "ttl interval", "time": "timestamptz"}
                times = {"in_an_hour": "now() + interval '1 hour'", "long_ago": "'-infinity'"}
                for statement in _BEFORE_SESSIONS:
                    conn.execute(statement.format(**words, **times))  # type: ignore[arg-type]

            def make() -> MetadataStore:
                made = PostgresMetadataStore(dsn(server), timeout_s=5.0)
                stack.callback(made.close)
                return made

        a, b = make(), make()
        assert b.holder("table:orders") == Lease("table:orders", 9, 4)
        a.register(broker(1), TTL_S)
        writer = a.acquire(WRITER, 1, TTL_S)
        assert writer == Lease(WRITER, 1, 3)
        renewing(a.keepalive, TTL_S * 2)
        assert b.holder(WRITER) == writer
        a.unregister()
        assert b.holder(WRITER) is None
        assert b.holder("table:orders") == Lease("table:orders", 9, 4)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_tables_made_before_manifest_pointers_are_upgraded(backend: str, tmp_path: Path) -> None:
    """A cluster's SQLite file or PostgreSQL schema that has every other table (made by
    the version before manifest pointers) gains the ``manifests`` table when a store
    opens it."""
    with ExitStack() as stack:
        if backend == "sqlite":
            import sqlite3

            from floe.cluster.sqlite import SqliteMetadataStore

            def make() -> MetadataStore:
                made = SqliteMetadataStore(tmp_path / "cluster.db")
                stack.callback(made.close)
                return made

            make()
            db = sqlite3.connect(tmp_path / "cluster.db", isolation_level=None)
            db.execute("DROP TABLE manifests")
            db.close()
        else:
            import psycopg

            from floe.cluster.postgres import PostgresMetadataStore
            from helpers.cluster_postgres import dsn
            from helpers.postgres import postgres_server

            server = stack.enter_context(postgres_server())

            def make() -> MetadataStore:
                made = PostgresMetadataStore(dsn(server), timeout_s=5.0)
                stack.callback(made.close)
                return made

            make()
            with psycopg.connect(dsn(server), autocommit=True) as conn:
                conn.execute("DROP TABLE floe.manifests")

        store = make()
        owned = store.claim(T, P0, 1, None)
        assert owned is not None
        assert store.manifests() == {}
        assert store.set_manifests(1, [ManifestCommit(T, P0, owned.epoch, "m/orders-0")]) == []
        assert make().manifests() == {(T, P0): "m/orders-0"}
