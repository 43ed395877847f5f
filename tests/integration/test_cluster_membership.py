"""A broker in a cluster (``cluster.metadata.url``): it registers under a lease in a real
metadata store (etcd, PostgreSQL, SQLite), owns its partitions there with a fencing
epoch, lists the live brokers in Metadata, and stops acknowledging writes when its lease
is in doubt. A real ``floe up`` on a real S3 server (SeaweedFS); the facts are read back
with the store's own client, as another broker would see them.
"""

from __future__ import annotations

import signal
import socket
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import ConfigResource, ResourceType
from fuzz.seeds import Topic, kio_seeds
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_for_leader_epoch.v4.request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import BrokerId, GroupId, ProducerId, TopicName, TransactionalId
from kio.static.primitive import i8, i16, i32, i32Timedelta

import helpers.cluster
from floe.broker.apis import APIS
from floe.cluster.etcd import EtcdMetadataStore
from floe.cluster.interface import MetadataStore, Ownership
from floe.cluster.url import open_metadata_store
from floe.errors import ErrorCode
from floe.protocol import batch
from floe.protocol.client import (
    EARLIEST,
    fetch_request,
    fetched,
    list_offsets_request,
    listed_offset,
)
from floe.protocol.records import Record, encode_batch
from floe.storage.local.meta import topics_from_doc
from floe.storage.object import layout
from floe.types import PartitionId
from helpers.admin import ADMIN_TIMEOUT_S, admin, create_topic, watermarks
from helpers.broker import Broker
from helpers.cluster import (
    SESSION_MS,
    ask,
    consume_values,
    metadata_as_answered_by,
    namespace,
    produce_values,
    takes_connections,
    wait_for,
    wait_writer,
    writing,
)
from helpers.cluster_etcd import EtcdServer, etcd_server
from helpers.cluster_postgres import dsn
from helpers.postgres import postgres_server
from helpers.seaweed import SeaweedServer

BUCKET = "floe-cluster"


@pytest.fixture(params=["etcd", "postgresql", "sqlite"])
def metadata_url(request: pytest.FixtureRequest, tmp_path: Path, etcd: EtcdServer) -> Iterator[str]:
    """A URL of each kind of metadata store, with a namespace of the test's own."""
    if request.param == "etcd":
        yield f"etcd://{etcd.endpoint}"
    elif request.param == "postgresql":
        with postgres_server() as server:
            yield dsn(server)
    else:
        yield f"sqlite:///{tmp_path / 'meta' / 'cluster.db'}"


def cluster_settings(s3: SeaweedServer, prefix: str, url: str, **extra: str) -> dict[str, str]:
    return helpers.cluster.cluster_settings(s3, BUCKET, prefix, url, **extra)


@pytest.fixture
def observer() -> Iterator[Callable[[str, str], MetadataStore]]:
    """Clients of a metadata store, as another broker would hold them; closed at exit."""
    made: list[MetadataStore] = []

    def make(url: str, ns: str) -> MetadataStore:
        made.append(open_metadata_store(url, ns, 5.0))
        return made[-1]

    yield make
    for store in made:
        store.close()


def test_a_broker_registers_and_owns_its_partitions(
    broker_factory: Callable[..., Broker],
    s3: SeaweedServer,
    metadata_url: str,
    observer: Callable[[str, str], MetadataStore],
) -> None:
    prefix = f"c-{uuid.uuid4().hex[:8]}"
    b = wait_writer(broker_factory(cluster_settings(s3, prefix, metadata_url, **{"node.id": "7"})))
    store = observer(metadata_url, namespace(prefix))
    [me] = store.live_brokers()
    assert (me.broker_id, me.host, me.port) == (7, b.host, b.port)

    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(b.bootstrap, topic, partitions=3)
    wait_for(
        "the new topic's partitions owned by broker 7",
        lambda: all(
            store.owners().get((topic, p)) == Ownership(7, 1)  # type: ignore[comparison-overlap]
            for p in range(3)
        ),
    )
    internal = [k for k in store.owners() if k[0] == "__consumer_offsets"]
    assert internal and all(store.owners()[k].owner == 7 for k in internal)

    listed = admin(b.bootstrap).list_topics(topic, timeout=ADMIN_TIMEOUT_S)
    assert {n.id: f"{n.host}:{n.port}" for n in listed.brokers.values()} == {7: b.bootstrap}
    assert [p.leader for p in listed.topics[topic].partitions.values()] == [7, 7, 7]

    values = [f"v{i}".encode() for i in range(30)]
    assert sorted(produce_values(b.bootstrap, topic, values)) == sorted(values)
    assert sorted(consume_values(b.bootstrap, topic, 30)) == sorted(values)

    with urllib.request.urlopen(f"{b.admin_url}/metrics", timeout=10) as resp:
        metrics = dict(
            line.rsplit(" ", 1)
            for line in resp.read().decode().splitlines()
            if line.startswith(("floe_cluster_", "floe_s3_wal_"))
        )
    assert metrics["floe_cluster_brokers"] == "1.0"
    assert float(metrics["floe_cluster_partitions_owned"]) == len(store.owners())
    assert float(metrics["floe_cluster_lease_valid_seconds"]) > 0
    assert metrics["floe_cluster_fenced"] == "0.0"
    # the records acknowledged were committed: each WAL object's commit is counted and
    # timed, by the WAL (ask to answer) and in the store (its transaction)
    commits = float(metrics["floe_cluster_commit_seconds_count"])
    assert commits >= 1 and float(metrics["floe_cluster_commit_seconds_sum"]) > 0
    assert float(metrics["floe_s3_wal_commit_seconds_count"]) >= commits
    assert float(metrics["floe_s3_wal_commit_seconds_sum"]) >= float(
        metrics["floe_cluster_commit_seconds_sum"]
    )

    # DescribeConfigs tells the cache budget the broker uses: bounded in a cluster
    resource = ConfigResource(ResourceType.BROKER, "7")
    described = admin(b.bootstrap).describe_configs([resource])[resource].result(ADMIN_TIMEOUT_S)
    assert described["storage.s3.cache.max.bytes"].value == str(8 * 1024**3)

    b.stop()  # a clean stop leaves the cluster at once
    assert store.live_brokers() == []


def test_a_second_broker_waits_as_a_standby_and_takes_over_a_clean_stop(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer
) -> None:
    prefix = f"c-{uuid.uuid4().hex[:8]}"
    url = f"etcd://{etcd.endpoint}"
    first = wait_writer(broker_factory(cluster_settings(s3, prefix, url)))
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(first.bootstrap, topic, partitions=3)
    acked = produce_values(first.bootstrap, topic, [b"before"])

    second = broker_factory(cluster_settings(s3, prefix, url, **{"node.id": "2"}), wait=False)
    wait_for("the second broker waits", lambda: "cluster.standby" in second.stderr_text())
    assert second.running
    # the writer never noticed: it still writes and serves everything; Metadata names
    # the standby (clients then know where to look when the writer is gone) but leads
    # nothing with it
    acked += produce_values(first.bootstrap, topic, [b"while-standby"])
    wait_for(
        "the standby in Metadata",
        lambda: (
            sorted(admin(first.bootstrap).list_topics(timeout=ADMIN_TIMEOUT_S).brokers) == [1, 2]
        ),
    )
    listed = admin(first.bootstrap).list_topics(topic, timeout=ADMIN_TIMEOUT_S)
    assert {p.leader for p in listed.topics[topic].partitions.values()} == {1}

    first.stop()  # gives the writer lease up: the standby takes over at once
    wait_writer(second)
    # the log's cluster id (what its tables record), not one of the second's data dir
    took_over = admin(second.bootstrap).list_topics(topic, timeout=ADMIN_TIMEOUT_S)
    assert took_over.cluster_id == listed.cluster_id
    acked += produce_values(second.bootstrap, topic, [b"after"])
    assert sorted(consume_values(second.bootstrap, topic, 3)) == sorted(acked)
    assert acked == [b"before", b"while-standby", b"after"]


def test_a_standby_takes_over_within_seconds_of_a_kill_9(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer
) -> None:
    """An idempotent acks=all producer that knows both brokers keeps going across the
    writer's kill -9: every acknowledged record is served by the new writer, once."""
    prefix = f"c-{uuid.uuid4().hex[:8]}"
    url = f"etcd://{etcd.endpoint}"
    active = wait_writer(broker_factory(cluster_settings(s3, prefix, url)))
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(active.bootstrap, topic, partitions=3)
    standby = broker_factory(cluster_settings(s3, prefix, url, **{"node.id": "2"}), wait=False)
    wait_for("the standby waits", lambda: "cluster.standby" in standby.stderr_text())

    acked: list[tuple[bytes, float]] = []
    producer = ck.Producer(
        {
            "bootstrap.servers": f"{active.bootstrap},{standby.bootstrap}",
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
        }
    )

    def done(err: ck.KafkaError | None, msg: ck.Message) -> None:
        assert err is None, err
        acked.append((msg.value() or b"", time.monotonic()))

    killed_at = 0.0
    sent = 0
    while sum(1 for _, at in acked if killed_at and at > killed_at) < 300:
        producer.produce(topic, f"v{sent}".encode(), on_delivery=done)
        sent += 1
        producer.poll(0.002)
        if not killed_at and len(acked) >= 300:
            active.kill()
            killed_at = time.monotonic()
            wait_writer(standby)
    assert producer.flush(60) == 0
    failover_s = min(at for _, at in acked if at > killed_at) - killed_at
    print(f"failover: kill -9 to the next acknowledged record: {failover_s:.2f} s")
    assert len(acked) == sent

    values = [v for v, _ in acked]
    got = consume_values(standby.bootstrap, topic, len(values))
    assert sorted(got) == sorted(values)  # none lost, none twice


@pytest.mark.parametrize("share", ["false", "true"])
def test_a_broker_becoming_the_writer_never_refuses_a_connection(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer, share: str
) -> None:
    """A standby, or a member leading partitions of its own, that takes over from a
    killed writer keeps its Kafka port listening through the writer's open: a client
    that connects meanwhile waits in the listen backlog and is answered by the writer.
    (It used to be refused for as long as the open took, and librdkafka and
    kafka-python double their reconnect backoff at each refusal.)"""
    prefix = f"c-{uuid.uuid4().hex[:8]}"
    url = f"etcd://{etcd.endpoint}"
    sets = {"cluster.share.partitions": share}
    active = wait_writer(broker_factory(cluster_settings(s3, prefix, url, **sets)))
    taker = broker_factory(cluster_settings(s3, prefix, url, **sets, **{"node.id": "2"}))
    event = "member.listening" if share == "true" else "standby.listening"
    wait_for("the second broker serves", lambda: event in taker.stderr_text())
    active.kill()
    tries, refused = 0, []
    while not writing(taker):
        try:
            socket.create_connection((taker.host, taker.port), timeout=5).close()
        except ConnectionRefusedError:
            refused.append(time.monotonic())
        tries += 1
        time.sleep(0.005)
    last = socket.create_connection((taker.host, taker.port), timeout=5)
    with last:
        metadata = ask(last, MetadataRequest(topics=(), allow_auto_topic_creation=False,
                       include_topic_authorized_operations=False), 1)  # fmt: skip
    assert [b.node_id for b in metadata.brokers if b.port == taker.port] == [2]
    assert tries > 10 and refused == [], f"refused {len(refused)} of {tries} connections"


def test_a_restarted_standby_is_listed_only_while_it_takes_connections(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer
) -> None:
    """A writer killed and started again waits as a standby. The new writer lists it
    in its Metadata from its registration on, seconds before it answers (it answers
    once every broker lists it); a client that connected to it meanwhile was refused
    and doubled its reconnect backoff. Its port takes connections from its
    registration on now: the client waits in the backlog for its answer."""
    prefix = f"c-{uuid.uuid4().hex[:8]}"
    url = f"etcd://{etcd.endpoint}"
    sets = {"cluster.share.partitions": "false"}
    first = wait_writer(broker_factory(cluster_settings(s3, prefix, url, **sets)))
    topic = create_topic(first.bootstrap, partitions=1)
    second = broker_factory(cluster_settings(s3, prefix, url, **sets, **{"node.id": "2"}))
    wait_for("the standby serves", lambda: "standby.listening" in second.stderr_text())
    first.kill()
    wait_writer(second)
    first.start(wait=False)
    listed = refused = 0
    while first.stderr_text().count("standby.listening") < 2:
        if 1 in metadata_as_answered_by(second.bootstrap, topic)[1]:
            listed += 1
            refused += not takes_connections(first)
        time.sleep(0.02)
    print(f"the restarted broker was listed {listed} times before it answered")
    assert listed > 0 and refused == 0, f"listed {listed} times, refused {refused} times"


def controller_as_answered_by(b: Broker) -> int:
    """The controller id in ``b``'s Metadata answer (the writer it knows; -1: none)."""
    request = MetadataRequest(
        topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    with socket.create_connection((b.host, b.port), timeout=10) as conn:
        return int(ask(conn, request, 1).controller_id)


def test_a_frozen_writer_is_fenced_when_it_wakes(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer
) -> None:
    """A writer that stops (SIGSTOP: a long GC pause, a frozen VM) while a standby takes
    over finds out when it wakes: it writes nothing more, and the new writer's view of
    the bucket (also after its own restart) has every acknowledged record once."""
    prefix = f"c-{uuid.uuid4().hex[:8]}"
    url = f"etcd://{etcd.endpoint}"
    old = wait_writer(broker_factory(cluster_settings(s3, prefix, url)))
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(old.bootstrap, topic, partitions=3)
    acked = produce_values(old.bootstrap, topic, [f"a{i}".encode() for i in range(30)])
    new = broker_factory(cluster_settings(s3, prefix, url, **{"node.id": "2"}), wait=False)
    wait_for("the standby waits", lambda: "cluster.standby" in new.stderr_text())

    old.signal(signal.SIGSTOP)
    try:
        wait_writer(new)
        acked += produce_values(new.bootstrap, topic, [f"b{i}".encode() for i in range(30)])
    finally:
        old.signal(signal.SIGCONT)
    wait_for("the old writer fenced", lambda: "cluster.fenced" in old.stderr_text())
    old.assert_alive()
    # once its view names the new writer (its first look after it woke: a moment under
    # load; meanwhile it answers COORDINATOR_NOT_AVAILABLE, which clients retry)...
    wait_for("the old writer names the new one", lambda: controller_as_answered_by(old) == 2)
    # ...it coordinates nothing more: clients that ask it are sent to the new writer
    with socket.create_connection((old.host, old.port), timeout=10) as conn:
        for key_type, key in ((0, "some-group"), (1, "some-txn")):
            find = FindCoordinatorRequest(key_type=i8(key_type), coordinator_keys=(key,))
            (found,) = ask(conn, find, 1 + key_type).coordinators
            assert (found.error_code, found.node_id, found.port) == (ErrorCode.none, 2, new.port)
        assert ask(conn, _join_request("some-group"), 3).error_code == ErrorCode.not_coordinator
    # a client of the old writer is sent to the new one (Metadata names it the leader)
    acked += produce_values(old.bootstrap, topic, [f"c{i}".encode() for i in range(30)])
    assert sorted(consume_values(new.bootstrap, topic, 90)) == sorted(acked)

    old.stop()
    new.stop()
    wait_writer(new.start())
    assert sorted(consume_values(new.bootstrap, topic, 90)) == sorted(acked)


def test_a_killed_broker_leaves_within_its_session_and_comes_back_at_a_new_epoch(
    broker_factory: Callable[..., Broker],
    s3: SeaweedServer,
    etcd: EtcdServer,
) -> None:
    prefix = f"c-{uuid.uuid4().hex[:8]}"
    url = f"etcd://{etcd.endpoint}"
    b = wait_writer(broker_factory(cluster_settings(s3, prefix, url)))
    store = EtcdMetadataStore(etcd.endpoint, prefix=namespace(prefix) + "/")
    try:
        topic = f"t-{uuid.uuid4().hex[:8]}"
        create_topic(b.bootstrap, topic, partitions=3)
        values = [f"v{i}".encode() for i in range(60)]
        acked = produce_values(b.bootstrap, topic, values[:30])
        wait_for("owned", lambda: all((topic, p) in store.owners() for p in range(3)))
        epochs = {k: o.epoch for k, o in store.owners().items()}

        b.kill()
        gone_s = wait_for("the killed broker's lease expired", lambda: not store.live_brokers())
        # etcd rounds the TTL up to whole seconds, and expires leases on its own schedule
        assert gone_s < SESSION_MS / 1000 + 2.5, gone_s

        wait_writer(b.restart())  # same node.id: its old registration is gone, so it joins at once
        wait_for(
            "every partition claimed again at the next epoch",
            lambda: (
                {k: o.epoch for k, o in store.owners().items()}
                == {k: e + 1 for k, e in epochs.items()}
            ),
        )
        acked += produce_values(b.bootstrap, topic, values[30:])
        assert sorted(consume_values(b.bootstrap, topic, 60)) == sorted(acked) == sorted(values)
    finally:
        store.close()


def test_a_broker_whose_lease_lapses_stops_acknowledging_until_it_rejoins(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, tmp_path: Path
) -> None:
    prefix = f"c-{uuid.uuid4().hex[:8]}"
    (tmp_path / "etcd").mkdir()
    with etcd_server(tmp_path / "etcd") as etcd:
        b = wait_writer(broker_factory(cluster_settings(s3, prefix, f"etcd://{etcd.endpoint}")))
        topic = f"t-{uuid.uuid4().hex[:8]}"
        create_topic(b.bootstrap, topic, partitions=3)
        acked = produce_values(b.bootstrap, topic, [b"before"])
        with etcd.frozen():  # the store answers nothing: the lease cannot be renewed
            time.sleep(SESSION_MS / 1000)  # past this broker's own view of its lease
            refused = produce_values(
                b.bootstrap, topic, [b"during"], **{"message.timeout.ms": 2000}
            )
        assert refused == []
        assert "cluster.store_unavailable" in b.stderr_text()
        # the store answers again: the broker renews (or rejoins) and writes again
        acked += produce_values(
            b.bootstrap, topic, [b"after"]
        )  # retried by the client until it does
        assert acked == [b"before", b"after"]
        assert sorted(consume_values(b.bootstrap, topic, 2)) == sorted(acked)
        b.assert_alive()


def test_a_former_writers_late_wal_object_is_ignored(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer
) -> None:
    """A WAL PUT of a writer that lost its lease may land after the next writer took
    over (the PUT was in flight): its records were never acknowledged, and no later
    open of the bucket may take them in. Each broker writes its own WAL stream; the
    next writer fences every stream it finds by recording the sequence it saw as each
    one's next. Such an object is written here by hand, as the late PUT would have left
    it: in the former writer's stream, at the former's epoch and that next sequence,
    holding the next offset of a partition."""
    prefix = f"c-{uuid.uuid4().hex[:8]}"
    url = f"etcd://{etcd.endpoint}"
    first = wait_writer(broker_factory(cluster_settings(s3, prefix, url)))
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(first.bootstrap, topic, partitions=3)
    acked = produce_values(first.bootstrap, topic, [f"a{i}".encode() for i in range(30)])
    first.stop()
    second = wait_writer(
        broker_factory(
            cluster_settings(
                s3, prefix, url, **{"node.id": "2", "storage.s3.upload.interval.ms": "500"}
            )
        )
    )
    acked += produce_values(second.bootstrap, topic, [f"b{i}".encode() for i in range(30)])

    client = s3.s3_client()
    wait_for(  # the late object then lands on a sequence no object of the bucket has
        "the WAL objects moved into partition objects",
        lambda: "Contents" not in client.list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/wal/"),
    )
    streams = client.list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/takeover/")["Contents"]
    assert {o["Key"].split("/")[-2] for o in streams} == {"1", "2"}  # both fenced by 2
    listed = [o["Key"] for o in streams if o["Key"].split("/")[-2] == "1"]
    newest = max(listed)
    epoch = int(newest.rsplit("/", 1)[1])
    first_sequence = layout.decode_takeover(
        client.get_object(Bucket=BUCKET, Key=newest)["Body"].read()
    )
    doc = client.get_object(Bucket=BUCKET, Key=f"{prefix}/topics.json")["Body"].read()
    topic_id = topics_from_doc(doc)[TopicName(topic)].topic_id
    end = watermarks(second.bootstrap, topic, 3)[0][1]
    batch = encode_batch([Record(end, int(time.time() * 1000), b"k", b"late")], base_offset=end)
    late = layout.encode_wal([layout.Entry(topic_id, 0, end, end + 1, 0, len(batch))], [batch])
    key = f"{prefix}/{layout.wal_key('1', first_sequence, epoch - 1)}"
    client.put_object(Bucket=BUCKET, Key=key, Body=late)

    second.stop()
    wait_writer(second.start())  # reads the bucket again
    assert watermarks(second.bootstrap, topic, 3)[0][1] == end
    assert sorted(consume_values(second.bootstrap, topic, len(acked))) == sorted(acked)
    assert "storage.object.stale_wal_deleted objects=1" in second.stderr_text()
    assert "Contents" not in client.list_objects_v2(Bucket=BUCKET, Prefix=key)


def test_records_a_killed_writer_never_uploaded_do_not_come_back(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer
) -> None:
    """acks=1 records in a writer's cache that no WAL upload took yet are lost when it is
    killed (as Kafka's acks=1 records are on a leader's failover). The next writer gives
    their offsets to other records; when the killed broker writes again, the bucket's
    records win over its old cache, so no acknowledged acks=all record is replaced."""
    prefix = f"c-{uuid.uuid4().hex[:8]}"
    url = f"etcd://{etcd.endpoint}"
    # after an upload, the next waits 5 s: acks=1 records appended meanwhile are in the
    # cache only
    slow_upload = {"storage.s3.wal.min.interval.ms": "5000"}
    a = wait_writer(broker_factory(cluster_settings(s3, prefix, url, **slow_upload)))
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(a.bootstrap, topic, partitions=3)
    acked = produce_values(a.bootstrap, topic, [f"a{i}".encode() for i in range(6)])
    unsafe = {"acks": "1", "enable.idempotence": False}
    assert (
        len(produce_values(a.bootstrap, topic, [f"lost{i}".encode() for i in range(6)], **unsafe))
        == 6
    )
    a.kill()

    b = broker_factory(cluster_settings(s3, prefix, url, **{"node.id": "2"}), wait=False)
    wait_writer(b)
    acked += produce_values(b.bootstrap, topic, [f"b{i}".encode() for i in range(6)])
    a.start(wait=False)  # a standby now, its cache still holding the lost records
    wait_for("a waits", lambda: a.stderr_text().count("cluster.standby") == 1)
    b.stop()
    wait_writer(a)
    assert sorted(consume_values(a.bootstrap, topic, 12)) == sorted(acked)
    highs = {p: high for p, (_, high) in watermarks(a.bootstrap, topic, 3).items()}
    assert highs == {0: 4, 1: 4, 2: 4}
    assert "storage.object.stale_cache_dropped" in a.stderr_text()


def test_a_cache_handed_back_after_another_owner_wrote_is_not_served(
    broker_factory: Callable[..., Broker],
    s3: SeaweedServer,
    etcd: EtcdServer,
    observer: Callable[[str, str], MetadataStore],
) -> None:
    """A broker's cache may hold acks=1 records it never uploaded, at offsets another
    owner then gave to other records. When the partition comes back to it (a handover
    decided while it was starting, as a chaos run saw: 'the bucket's batch at 34951
    overlaps the cache'), the metadata store names it the owner again, at a newer epoch
    than the one its cache was written at: the cache is not the log any more and must
    not be served, whatever the batches' boundaries."""
    prefix = f"c-{uuid.uuid4().hex[:8]}"
    url = f"etcd://{etcd.endpoint}"
    slow_upload = {"storage.s3.wal.min.interval.ms": "5000"}
    a = wait_writer(broker_factory(cluster_settings(s3, prefix, url, **slow_upload)))
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(a.bootstrap, topic, partitions=1)
    acked = produce_values(a.bootstrap, topic, [b"a0"])
    unsafe = {"acks": "1", "enable.idempotence": False}
    for i in range(3):  # one batch each, as the next owner's will be
        assert produce_values(a.bootstrap, topic, [f"lost{i}".encode()], **unsafe)
    a.kill()

    b = wait_writer(broker_factory(cluster_settings(s3, prefix, url, **{"node.id": "2"})))
    for i in range(3):
        acked += produce_values(b.bootstrap, topic, [f"b{i}".encode()])
    b.stop()
    store = observer(url, namespace(prefix))
    key = (TopicName(topic), PartitionId(0))
    assert store.claim(*key, 1, store.owners()[key]) is not None  # handed back to a

    wait_writer(a.start())
    assert sorted(consume_values(a.bootstrap, topic, 4)) == sorted(acked)
    assert watermarks(a.bootstrap, topic, 1)[0][1] == 4
    assert "storage.object.stale_cache_dropped" in a.stderr_text()


def test_consumers_of_a_cluster_see_only_what_the_bucket_holds(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer
) -> None:
    """A record a consumer saw must survive the writer's death, so in a cluster the
    high watermark is what the bucket holds, as Kafka's is what the replicas hold: acks=1
    records become visible with the WAL upload that takes them, not at append."""
    prefix = f"c-{uuid.uuid4().hex[:8]}"
    url = f"etcd://{etcd.endpoint}"
    # after an upload, the next waits 4 s: acks=1 records appended meanwhile wait for it
    b = wait_writer(
        broker_factory(
            cluster_settings(s3, prefix, url, **{"storage.s3.wal.min.interval.ms": "4000"})
        )
    )
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(b.bootstrap, topic, partitions=3)
    acked = produce_values(b.bootstrap, topic, [f"a{i}".encode() for i in range(6)])
    unsafe = {"acks": "1", "enable.idempotence": False}
    acked += produce_values(b.bootstrap, topic, [f"one{i}".encode() for i in range(6)], **unsafe)
    highs = {p: high for p, (_, high) in watermarks(b.bootstrap, topic, 3).items()}
    assert highs == {0: 2, 1: 2, 2: 2}  # the acks=1 records are not in the bucket yet
    wait_for(
        "the acks=1 records uploaded and visible",
        lambda: (
            {p: h for p, (_, h) in watermarks(b.bootstrap, topic, 3).items()} == {0: 4, 1: 4, 2: 4}
        ),
    )
    assert sorted(consume_values(b.bootstrap, topic, 12)) == sorted(acked)


def test_a_standby_answers_with_kafkas_errors_and_points_at_the_writer(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer
) -> None:
    """A client whose metadata is stale (the broker it knew died and came back as a
    standby on the same address) gets the answers Kafka's own followers give, on an open
    connection: NOT_LEADER_OR_FOLLOWER for partition requests (refresh metadata),
    NOT_COORDINATOR for group and transaction requests, NOT_CONTROLLER for topic
    changes, and FindCoordinator names the writer."""
    prefix = f"c-{uuid.uuid4().hex[:8]}"
    url = f"etcd://{etcd.endpoint}"
    writer = wait_writer(broker_factory(cluster_settings(s3, prefix, url)))
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(writer.bootstrap, topic, partitions=3)
    produce_values(writer.bootstrap, topic, [b"a", b"b", b"c"])
    standby = broker_factory(cluster_settings(s3, prefix, url, **{"node.id": "2"}), wait=False)
    wait_for("the standby waits", lambda: "cluster.standby" in standby.stderr_text())
    wait_for(
        "the standby knows the writer and the topic",
        lambda: topic in admin(standby.bootstrap).list_topics(timeout=ADMIN_TIMEOUT_S).topics,
    )

    with socket.create_connection((standby.host, standby.port), timeout=10) as conn:
        batch = encode_batch([Record(0, 0, b"k", b"v")], base_offset=0)
        produce = ProduceRequest(
            transactional_id=None,
            acks=i16(-1),
            timeout=i32Timedelta.parse(timedelta(seconds=5)),
            topic_data=(
                TopicProduceData(
                    name=TopicName(topic),
                    partition_data=(PartitionProduceData(index=i32(0), records=batch),),
                ),
            ),
        )
        produced = ask(conn, produce, 1).responses[0].partition_responses[0]
        assert produced.error_code == ErrorCode.not_leader_or_follower

        fetch = fetched(ask(conn, fetch_request(topic, 1, 0, 1 << 20), 2), topic, 1)
        assert fetch.error == ErrorCode.not_leader_or_follower
        listed = listed_offset(ask(conn, list_offsets_request(topic, 2, EARLIEST), 3), topic, 2)
        assert listed.error == ErrorCode.not_leader_or_follower

        for key_type, key in ((0, "some-group"), (1, "some-txn")):
            find = FindCoordinatorRequest(key_type=i8(key_type), coordinator_keys=(key,))
            (found,) = ask(conn, find, 4).coordinators
            assert found.error_code == ErrorCode.none
            assert (found.node_id, found.host, found.port) == (1, writer.host, writer.port)

        assert ask(conn, _join_request("some-group"), 5).error_code == ErrorCode.not_coordinator
        init = InitProducerIdRequest(
            transactional_id=TransactionalId("some-txn"),
            transaction_timeout=i32Timedelta.parse(timedelta(seconds=10)),
            producer_id=ProducerId(-1),
            producer_epoch=i16(-1),
        )
        assert ask(conn, init, 6).error_code == ErrorCode.not_coordinator

        create = CreateTopicsRequest(
            topics=(
                CreatableTopic(
                    name=TopicName("new-topic"),
                    num_partitions=i32(1),
                    replication_factor=i16(1),
                    assignments=(),
                    configs=(),
                ),
            ),
            timeout=i32Timedelta.parse(timedelta(seconds=5)),
            validate_only=False,
        )
        (created,) = ask(conn, create, 7).topics
        assert created.error_code == ErrorCode.not_controller

    # nothing reached the log through the standby
    assert {p: h for p, (_, h) in watermarks(writer.bootstrap, topic, 3).items()} == {
        0: 1,
        1: 1,
        2: 1,
    }
    assert "new-topic" not in admin(writer.bootstrap).list_topics(timeout=ADMIN_TIMEOUT_S).topics
    assert "Traceback" not in standby.stderr_text()


def _join_request(group: str) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=GroupId(group),
        session_timeout=i32Timedelta.parse(timedelta(seconds=10)),
        rebalance_timeout=i32Timedelta.parse(timedelta(seconds=10)),
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),),
    )


def test_a_standby_answers_every_request_of_every_api(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer
) -> None:
    """One valid request per API and version Floe advertises (the fuzzer's seeds), on a
    topic, an internal topic and a missing one: the standby answers each, none closes
    the connection, none fails in a handler (each would be a traceback in its log)."""
    prefix = f"c-{uuid.uuid4().hex[:8]}"
    url = f"etcd://{etcd.endpoint}"
    writer = wait_writer(broker_factory(cluster_settings(s3, prefix, url)))
    create_topic(writer.bootstrap, "plain", partitions=1)
    standby = broker_factory(cluster_settings(s3, prefix, url, **{"node.id": "2"}), wait=False)
    wait_for("the standby waits", lambda: "cluster.standby" in standby.stderr_text())
    wait_for(
        "the standby knows the topic",
        lambda: "plain" in admin(standby.bootstrap).list_topics(timeout=ADMIN_TIMEOUT_S).topics,
    )
    advertised = {a.key: (a.min_version, a.max_version) for a in APIS.values()}
    targets = [Topic("plain", "plain"), Topic("__consumer_offsets", "internal")]
    seeds = kio_seeds(advertised, [*targets, Topic("missing", "missing")])
    assert {s.api_key for s in seeds} == set(advertised)
    unanswered = []
    for seed in seeds:
        with socket.create_connection((standby.host, standby.port), timeout=10) as conn:
            conn.sendall(seed.framed)
            if len(conn.recv(4)) < 4:
                unanswered.append(f"{APIS[seed.api_key].name} v{seed.version}")
    assert not unanswered, f"{len(unanswered)} of {len(seeds)} closed: {unanswered}"
    log_text = standby.stderr_text()
    assert "Traceback" not in log_text and "request.failed" not in log_text
    assert standby.running


def test_idempotent_producers_and_group_listings_work_through_a_standby(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer
) -> None:
    """Requests Kafka lets any broker answer: an idempotent producer's InitProducerId
    (no transactional id; clients send it to whichever broker they like, and librdkafka
    keeps asking the same one while it answers an error) gets a producer id through a
    standby's bootstrap address, and ListGroups (admin clients ask every broker) lists
    the writer's groups with no error from the standby."""
    prefix = f"c-{uuid.uuid4().hex[:8]}"
    url = f"etcd://{etcd.endpoint}"
    writer = wait_writer(broker_factory(cluster_settings(s3, prefix, url)))
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(writer.bootstrap, topic, partitions=3)
    standby = broker_factory(cluster_settings(s3, prefix, url, **{"node.id": "2"}), wait=False)
    wait_for("the standby waits", lambda: "cluster.standby" in standby.stderr_text())
    wait_for(
        "the standby knows the topic",
        lambda: topic in admin(standby.bootstrap).list_topics(timeout=ADMIN_TIMEOUT_S).topics,
    )
    values = [f"v{i}".encode() for i in range(30)]
    # only the standby's address: every request librdkafka picks a broker for lands there
    acked = produce_values(standby.bootstrap, topic, values, **{"message.timeout.ms": 30000})
    assert sorted(acked) == sorted(values)
    assert sorted(consume_values(writer.bootstrap, topic, len(values))) == sorted(values)

    listed = admin(standby.bootstrap).list_consumer_groups().result(ADMIN_TIMEOUT_S)
    assert not listed.errors
    assert {g.group_id for g in listed.valid}  # consume_values' group, from the writer


def test_a_standby_knows_a_topic_created_a_moment_ago(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer
) -> None:
    """A client asking a standby's Metadata for a topic the writer just created gets the
    topic and its leaders, not an error (the Java consumer drops a topic answered with an
    error from its metadata, and its group rebalances)."""
    prefix = f"c-{uuid.uuid4().hex[:8]}"
    url = f"etcd://{etcd.endpoint}"
    writer = wait_writer(broker_factory(cluster_settings(s3, prefix, url)))
    standby = broker_factory(cluster_settings(s3, prefix, url, **{"node.id": "2"}), wait=False)
    wait_for("the standby waits", lambda: "cluster.standby" in standby.stderr_text())
    for _ in range(3):
        topic = f"t-{uuid.uuid4().hex[:8]}"
        create_topic(writer.bootstrap, topic, partitions=3)
        listed = admin(standby.bootstrap).list_topics(topic, timeout=ADMIN_TIMEOUT_S)
        meta = listed.topics[topic]
        assert meta.error is None, meta.error
        assert {p.leader for p in meta.partitions.values()} == {1}
        assert len(meta.partitions) == 3


def _metadata_epoch(conn: socket.socket, topic: str, correlation_id: int) -> tuple[int, int]:
    """(leader id, leader epoch) of partition 0 of ``topic`` in a Metadata answer."""
    request = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=TopicName(topic)),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    (entry,) = ask(conn, request, correlation_id).topics
    part = next(p for p in entry.partitions if p.partition_index == 0)
    return int(part.leader_id), int(part.leader_epoch)


def _naming_epoch(request: Any, epoch: int) -> Any:
    """A one-partition Fetch or ListOffsets request naming ``epoch`` as the current
    leader epoch."""
    (t,) = request.topics
    (p,) = t.partitions
    part = replace(p, current_leader_epoch=i32(epoch))
    return replace(request, topics=(replace(t, partitions=(part,)),))


def _end_of_epoch(conn: socket.socket, topic: str, current: int, epoch: int, cid: int) -> Any:
    request = OffsetForLeaderEpochRequest(
        replica_id=BrokerId(-1),
        topics=(
            OffsetForLeaderTopic(
                topic=TopicName(topic),
                partitions=(
                    OffsetForLeaderPartition(
                        partition=i32(0), current_leader_epoch=i32(current), leader_epoch=i32(epoch)
                    ),
                ),
            ),
        ),
    )
    return ask(conn, request, cid).topics[0].partitions[0]


def test_leader_epochs_grow_at_each_takeover_and_fence_stale_requests(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer
) -> None:
    """A partition's leader epoch is its ownership epoch: Metadata reports it, batches
    written under it carry it, and a takeover raises it. A request naming an older epoch
    gets FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH (Kafka's answers: the
    client refreshes its metadata), and OffsetForLeaderEpoch of the older epoch ends at
    or after every record written under it (no consumer sees a truncation)."""
    prefix = f"c-{uuid.uuid4().hex[:8]}"
    url = f"etcd://{etcd.endpoint}"
    first = wait_writer(broker_factory(cluster_settings(s3, prefix, url)))
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(first.bootstrap, topic, partitions=3)
    assert len(produce_values(first.bootstrap, topic, [b"a", b"-", b"-", b"b"])) == 4
    with socket.create_connection((first.host, first.port), timeout=10) as conn:
        leader, before = _metadata_epoch(conn, topic, 1)
    assert (leader, before) == (1, 1)

    second = broker_factory(cluster_settings(s3, prefix, url, **{"node.id": "2"}), wait=False)
    wait_for("the standby waits", lambda: "cluster.standby" in second.stderr_text())
    first.kill()
    wait_writer(second)
    assert produce_values(second.bootstrap, topic, [b"c"]) == [b"c"]
    with socket.create_connection((second.host, second.port), timeout=10) as conn:
        wait_for(
            "the new writer leads at the next epoch",
            lambda: _metadata_epoch(conn, topic, 2) == (2, before + 1),
        )
        now = before + 1
        records = fetched(ask(conn, fetch_request(topic, 0, 0, 1 << 20), 3), topic, 0).records
        epochs = [(h.base_offset, h.partition_leader_epoch) for h in batch.scan(records)]
        assert epochs in ([(0, before), (2, now)], [(0, before), (1, before), (2, now)])

        for epoch, error in (
            (before, ErrorCode.fenced_leader_epoch),
            (now + 1, ErrorCode.unknown_leader_epoch),
            (now, ErrorCode.none),
            (-1, ErrorCode.none),
        ):
            fetch = _naming_epoch(fetch_request(topic, 0, 0, 1 << 20), epoch)
            assert fetched(ask(conn, fetch, 4), topic, 0).error == error, epoch
            listing = _naming_epoch(list_offsets_request(topic, 0, EARLIEST), epoch)
            assert listed_offset(ask(conn, listing, 5), topic, 0).error == error, epoch
            ended = _end_of_epoch(conn, topic, epoch, before, 6)
            assert ended.error_code == error, epoch
            if error == ErrorCode.none:
                assert (ended.leader_epoch, ended.end_offset) >= (before, 2)
        ended = _end_of_epoch(conn, topic, now, now, 7)
        assert (ended.error_code, ended.leader_epoch, ended.end_offset) == (ErrorCode.none, now, 3)


def test_a_standby_names_the_writer_from_its_first_answer(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, tmp_path: Path
) -> None:
    """A client that reaches a standby the moment it starts listening (the dev cluster
    restarts a killed writer as a standby while clients look for the new one) learns
    the writer and every live broker from its first answer, and the writer's answer
    lists the same brokers. librdkafka forgets a broker an answer leaves out, and a
    request in flight to it is lost: a consumer whose topic metadata was on its way to
    the standby when the writer's answer (not listing the standby yet) arrived waited
    for it forever. So a standby answers only once every broker lists it, and once it
    read the cluster (it named itself alone and no leader before)."""
    prefix = f"c-{uuid.uuid4().hex[:8]}"
    url = f"sqlite://{tmp_path / 'cluster.db'}"
    writer = wait_writer(broker_factory(cluster_settings(s3, prefix, url)))
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(writer.bootstrap, topic, partitions=2)
    standby = broker_factory(cluster_settings(s3, prefix, url, **{"node.id": "2"}), wait=False)
    deadline = time.monotonic() + 60
    while True:  # the first connection the standby accepts
        standby.assert_alive()
        assert time.monotonic() < deadline, "the standby never listened"
        try:
            conn = socket.create_connection((standby.host, standby.port), timeout=10)
            break
        except OSError:
            time.sleep(0.002)
    with conn:
        request = MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=TopicName(topic)),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        answer = ask(conn, request, 1)
        find = FindCoordinatorRequest(key_type=i8(0), coordinator_keys=("some-group",))
        (found,) = ask(conn, find, 2).coordinators
    with socket.create_connection((writer.host, writer.port), timeout=10) as conn:
        writers = ask(conn, request, 1)
    assert sorted(b.node_id for b in writers.brokers) == [1, 2]
    assert sorted(b.node_id for b in answer.brokers) == [1, 2]
    assert answer.controller_id == 1
    [described] = answer.topics
    assert [p.leader_id for p in described.partitions] == [1, 1]
    assert (found.error_code, found.node_id, found.port) == (ErrorCode.none, 1, writer.port)
