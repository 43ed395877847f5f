"""The writer's own partitions (those of internal and table topics, whose coordinators run
on the writer; not ``__consumer_offsets`` or ``__transaction_state``, spread like any
topic) when brokers share partitions: a broker that becomes the writer leads them
before any coordinator reads them, waiting (logged, never exiting) while a live broker
owns them, and a member never claims one, even when the metadata store says it owns it
or assigns it to it: it gives it to the writer.

The ownership a race leaves behind is set up with the metadata store's own client, as
the brokers would have left it: the internal partitions owned by a broker whose
registration outlives its writer lease (a writer killed a moment ago, the CI failure
``partition __consumer_offsets-0 is led by another broker``), or by a member (that
writer restarted as one). Real ``floe up`` processes on SeaweedFS and etcd.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

import helpers.cluster
from floe.cluster.interface import BrokerInfo, MetadataStore, Ownership
from floe.cluster.membership import WRITER_LEASE
from floe.cluster.url import open_metadata_store
from floe.types import PartitionId, TopicName
from helpers.admin import create_topic
from helpers.broker import Broker, free_port
from helpers.cluster import consume_values, namespace, produce_values, wait_for, wait_writer
from helpers.cluster_etcd import EtcdServer
from helpers.seaweed import SeaweedServer

BUCKET = "floe-writer-partitions"
INTERNAL = {"__floe_security", "_schemas"}
"""The internal topics that stay with the writer."""
TTL_S = 120.0
"""The registration of a broker the test plays: outlives the test, which ends it."""

Key = tuple[TopicName, PartitionId]


@pytest.fixture
def clients(etcd: EtcdServer) -> Iterator[Callable[[str], MetadataStore]]:
    """Clients of the metadata store of the brokers writing under a prefix; each leaves
    the cluster (if it registered) and is closed at exit."""
    made: list[MetadataStore] = []

    def make(prefix: str) -> MetadataStore:
        made.append(open_metadata_store(f"etcd://{etcd.endpoint}", namespace(prefix), 5.0))
        return made[-1]

    yield make
    for store in made:
        store.unregister()
        store.close()


def settings(s3: SeaweedServer, etcd: EtcdServer, prefix: str, node: int) -> dict[str, str]:
    return helpers.cluster.cluster_settings(
        s3,
        BUCKET,
        prefix,
        f"etcd://{etcd.endpoint}",
        **{"node.id": str(node), "cluster.share.partitions": "true"},
    )


def internal_partitions(
    broker_factory: Callable[..., Broker],
    s3: SeaweedServer,
    etcd: EtcdServer,
    store: Callable[[str], MetadataStore],
) -> tuple[Broker, MetadataStore, list[Key]]:
    """A broker (node 1) that was the writer of a new prefix and stopped cleanly, a
    client of its metadata store, and the internal partitions it created (owned by it)."""
    prefix = f"w-{uuid.uuid4().hex[:8]}"
    first = wait_writer(broker_factory(settings(s3, etcd, prefix, 1)))
    first.stop()
    observer = store(prefix)
    internal = sorted(k for k in observer.owners() if k[0] in INTERNAL)
    assert {t for t, _ in internal} >= {"_schemas"}
    return first, observer, internal


def own(store: MetadataStore, keys: list[Key], broker: int) -> dict[Key, Ownership]:
    """Make ``broker`` the owner of ``keys`` (and where the writer wants them led), as
    a broker would have recorded it; returns the new ownerships."""
    made = {}
    for topic, p in keys:
        store.assign(topic, p, broker)
        won = store.claim(topic, p, broker, store.owners().get((topic, p)))
        assert won is not None, f"{topic}-{p} changed owner meanwhile"
        made[(topic, p)] = won
    return made


def waits(b: Broker, line: str) -> Callable[[], bool]:
    """``line`` is in ``b``'s log; fails at once if ``b`` exited."""

    def check() -> bool:
        b.assert_alive()
        return line in b.stderr_text()

    return check


def test_a_new_writer_waits_for_a_live_owners_internal_partitions_and_never_exits(
    broker_factory: Callable[..., Broker],
    s3: SeaweedServer,
    etcd: EtcdServer,
    clients: Callable[[str], MetadataStore],
) -> None:
    """The internal partitions are owned by a broker still registered (a writer killed a
    moment ago: its registration outlives its writer lease) when node 1 becomes the
    writer. It waits for them instead of starting its coordinators (which exited with
    ``partition __consumer_offsets-0 is led by another broker``), assigning them to
    itself. Then a member owns them (the killed writer, restarted as a member: the
    metadata store says they are its own and assigns them to it): it does not claim
    them but gives them to the writer, which leads them and serves groups."""
    writer, observer, internal = internal_partitions(broker_factory, s3, etcd, clients)
    prefix = writer.settings["storage.s3.prefix"]
    killed = clients(prefix)
    killed.register(BrokerInfo(3, "127.0.0.1", free_port()), TTL_S)
    own(observer, internal, 3)

    writer.start(wait=False)
    wait_for(
        "the new writer waits for the internal partitions",
        waits(writer, "cluster.waiting_for_internal_partitions broker=1"),
    )
    member = broker_factory(settings(s3, etcd, prefix, 2), wait=False)
    wait_for("the member listens", waits(member, "member.listening"))
    given = own(observer, internal, 2)

    wait_writer(writer)  # its coordinators started, its admin API answers
    owners = observer.owners()
    # given by the member (epoch + 1), then claimed by the writer (+ 2): never claimed by
    # the member, which would have taken an epoch more
    assert {k: owners[k] for k in internal} == {
        k: Ownership(1, o.epoch + 2) for k, o in given.items()
    }
    assert "cluster.writer_partition_given broker=2" in member.stderr_text()
    killed.unregister()

    topic = create_topic(writer.bootstrap, partitions=3)
    values = [f"v{i}".encode() for i in range(30)]
    assert sorted(produce_values(writer.bootstrap, topic, values)) == sorted(values)
    # a consumer group: its coordinator (either broker) reads and writes __consumer_offsets
    assert sorted(consume_values(writer.bootstrap, topic, len(values))) == sorted(values)
    writer.assert_alive()
    member.assert_alive()


def test_a_member_never_claims_the_writers_partitions_even_when_it_owns_them(
    broker_factory: Callable[..., Broker],
    s3: SeaweedServer,
    etcd: EtcdServer,
    clients: Callable[[str], MetadataStore],
) -> None:
    """The metadata store says node 2 owns the internal partitions and assigns them to
    it (a run of it before a restart was the writer) when it starts as a member, while
    node 1 holds the writer lease (registered and holding it through the store's own
    client: a writer still opening its store). The member claims none of them at open;
    once the writer assigns them to itself, the member gives them to it, each by one
    compare-and-set, without ever taking them."""
    _first, observer, internal = internal_partitions(broker_factory, s3, etcd, clients)
    prefix = _first.settings["storage.s3.prefix"]
    writer = clients(prefix)
    writer.register(BrokerInfo(1, "127.0.0.1", free_port()), TTL_S)
    assert writer.acquire(WRITER_LEASE, 1, TTL_S) is not None
    before = own(observer, internal, 2)

    member = broker_factory(settings(s3, etcd, prefix, 2), wait=False)
    wait_for("the member listens", waits(member, "member.listening"))
    owners = observer.owners()
    assert {k: owners[k] for k in internal} == before  # none claimed at open

    for topic, p in internal:
        observer.assign(topic, p, 1)
    wait_for(
        "the member gives the internal partitions to the writer",
        lambda: all(observer.owners()[k].owner == 1 for k in internal),
    )
    owners = observer.owners()
    assert {k: owners[k] for k in internal} == {
        k: Ownership(1, o.epoch + 1) for k, o in before.items()
    }
    assert "cluster.writer_partition_given broker=2" in member.stderr_text()
    member.assert_alive()
