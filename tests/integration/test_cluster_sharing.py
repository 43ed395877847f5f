"""Brokers that share partitions (``cluster.share.partitions``): the writer spreads a new
topic's partitions over the live brokers, each broker leads its own on its own object
store and Kafka listener, and when one dies another takes its partitions over from the
bucket, with every acknowledged record. Real ``floe up`` processes on a real S3 server
(SeaweedFS) and etcd, judged by confluent-kafka clients.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import confluent_kafka as ck
import pytest

import helpers.cluster
from floe.errors import ErrorCode
from floe.protocol.client import list_offsets_request, listed_offset
from helpers.admin import create_topic
from helpers.broker import Broker
from helpers.cluster import (
    ask,
    consume_values,
    crash,
    init_idempotent,
    metadata_as_answered_by,
    produce_idempotent,
    takes_connections,
    wait_for,
    wait_writer,
)
from helpers.cluster import leaders_as_answered_by as leaders  # (one broker's view)
from helpers.cluster_etcd import EtcdServer
from helpers.seaweed import SeaweedServer, seaweed_server

BUCKET = "floe-sharing"
PARTITIONS = 6
LATEST = -1
"""ListOffsets timestamp asking for the log end offset."""


@pytest.fixture(scope="module")
def s3() -> Iterator[SeaweedServer]:
    with seaweed_server(BUCKET) as server:
        yield server


def sharing_settings(s3: SeaweedServer, prefix: str, etcd: EtcdServer, node: int) -> dict[str, str]:
    return helpers.cluster.sharing_settings(s3, BUCKET, prefix, etcd.endpoint, node)


def produce_all(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    """``values`` round-robin over every partition by an acks=all idempotent producer;
    returns those acknowledged."""
    return helpers.cluster.produce_round_robin(bootstrap, topic, values, PARTITIONS)


def start_brokers(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer, **extra: str
) -> tuple[Broker, Broker]:
    return helpers.cluster.start_sharing_brokers(broker_factory, s3, BUCKET, etcd.endpoint, **extra)


def start_pair(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer, **extra: str
) -> tuple[Broker, Broker, str]:
    return helpers.cluster.start_sharing_pair(
        broker_factory, s3, BUCKET, etcd.endpoint, PARTITIONS, **extra
    )


def test_brokers_share_a_topic_and_the_writer_takes_a_dead_members_partitions_over(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer
) -> None:
    writer, member, topic = start_pair(broker_factory, s3, etcd)
    both = f"{writer.bootstrap},{member.bootstrap}"
    first = [f"a{i}".encode() for i in range(600)]
    assert sorted(produce_all(both, topic, first)) == sorted(first)
    # each broker served its own partitions: the member's log holds records
    assert "cluster.partition_led broker=2" in member.stderr_text()
    assert sorted(consume_values(both, topic, len(first))) == sorted(first)
    crash(member)
    killed = time.monotonic()
    took = wait_for(
        "the writer leads every partition",
        lambda: set(leaders(writer.bootstrap, topic).values()) == {1},
    )
    print(f"dead member's partitions led by the writer {took:.2f} s after its kill -9")
    wait_for(  # Metadata names the new leader once it claimed, before it opened them all
        "the takeover logged",
        lambda: "cluster.partitions_taken_over broker=1 from=2" in writer.stderr_text(),
    )
    # restored while the member's lease lapsed (its port refused connections at once),
    # and opened from that copy: nothing was committed to them after the kill
    text = writer.stderr_text()
    assert "storage.object.staging partitions=" in text
    staged = [line for line in text.splitlines() if "staged=True" in line]
    assert sum(f"partition={topic}-" in line for line in staged) == PARTITIONS // 2, text
    second = [f"b{i}".encode() for i in range(600)]
    assert sorted(produce_all(writer.bootstrap, topic, second)) == sorted(second)
    every = first + second
    got = consume_values(writer.bootstrap, topic, len(every))
    assert sorted(got) == sorted(every)  # none lost, none twice
    print(f"records acknowledged before and after the kill, all read: {len(got)}")
    assert time.monotonic() - killed < 120


def test_a_restarted_member_is_named_only_once_it_listens(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer
) -> None:
    """A member killed and started again, twice: the writer took its partitions over,
    and names it (a broker clients may connect to, then a leader) only while its Kafka
    port takes connections. It handed back those the balancing had assigned it as soon
    as it registered, seconds before it listened, and listed it from its registration
    on too: every client of those partitions had a second outage, refused, and a client
    that asked it for metadata doubled its reconnect backoff."""
    writer, member, topic = start_pair(broker_factory, s3, etcd)
    for restart in (1, 2):
        crash(member)
        wait_for(
            "the writer leads every partition",
            lambda: set(leaders(writer.bootstrap, topic).values()) == {1},
        )
        member.start(wait=False)
        refused = named = 0
        deadline = time.monotonic() + 60
        # until the member leads its share again, as the writer says
        while True:
            led, brokers = metadata_as_answered_by(writer.bootstrap, topic)
            if Counter(led.values())[2] >= PARTITIONS // 2:
                break
            assert time.monotonic() < deadline, f"the member never led its share again: {led}"
            if 2 in led.values() or 2 in brokers:
                named += 1
                refused += not takes_connections(member)
            time.sleep(0.02)
        print(f"restart {restart}: the member named {named} times before it led its share")
        assert refused == 0, f"restart {restart}: named {refused} times, not listening"


def test_a_dead_members_partitions_are_named_leaderless_before_its_lease_lapses(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer
) -> None:
    """A member killed: its Kafka port refuses connections at once, its lease lapses
    only a session timeout (30 s here) after its last renewal. Meanwhile Metadata named
    it as the leader of its partitions, so a client whose connection attempt had just
    been refused asked for metadata, got the dead broker again, and waited for its next
    reconnect (kafka-python's backoff doubles to 12.8 s, then 25.6 s). Named leaderless
    instead, clients refresh at their fast interval and find the next leader as soon as
    it claims. The member stays listed as a broker, and its partitions stay its own:
    nothing is taken over before the lease lapses."""
    writer, member, topic = start_pair(
        broker_factory, s3, etcd, **{"cluster.session.timeout.ms": "30000"}
    )
    owned = {p for p, b in leaders(writer.bootstrap, topic).items() if b == 2}
    crash(member)
    killed = time.monotonic()
    # polled well within the 30 s lease: only the refusal can change the answer
    wait_for(
        "the writer names the dead member's partitions leaderless",
        lambda: {p for p, b in leaders(writer.bootstrap, topic).items() if b == -1} == owned,
        timeout_s=10,
    )
    led, brokers = metadata_as_answered_by(writer.bootstrap, topic)
    assert 2 in brokers, "the member is still registered: clients keep its address"
    assert {p for p, b in led.items() if b == 1} == set(range(PARTITIONS)) - owned
    assert time.monotonic() - killed < 20, "checked before the lease could lapse"
    assert "cluster.partitions_taken_over" not in writer.stderr_text()


def test_a_member_that_does_not_know_a_new_topic_yet_answers_retriably(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer
) -> None:
    """The writer's Metadata names a member as a new partition's leader as soon as it
    placed it; the member learns the topic from the bucket at its next pass (every third
    of a 20 s session timeout here). A Produce it gets before then is answered with a
    retriable error (the producer retries), never NOT_CONTROLLER from an attempt to
    create the topic, which the producer takes as final and loses the records."""
    writer, member = start_brokers(
        broker_factory,
        s3,
        etcd,
        **{
            "cluster.session.timeout.ms": "20000",
            "auto.create.topics.enable": "true",  # the default, as a user has it
        },
    )
    topic = create_topic(writer.bootstrap, partitions=PARTITIONS)
    values = [f"v{i}".encode() for i in range(60)]
    # bootstrap at the writer only: its Metadata sends half of them to the member at once
    assert sorted(produce_all(writer.bootstrap, topic, values)) == sorted(values)
    assert "cluster.partition_led broker=2" in member.stderr_text()
    assert sorted(consume_values(writer.bootstrap, topic, len(values))) == sorted(values)


def test_a_member_becomes_the_writer_and_keeps_leading_its_partitions(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer
) -> None:
    writer, member, topic = start_pair(broker_factory, s3, etcd)
    both = f"{writer.bootstrap},{member.bootstrap}"
    first = [f"a{i}".encode() for i in range(600)]
    assert sorted(produce_all(both, topic, first)) == sorted(first)

    crash(writer)
    wait_writer(member)
    wait_for(
        "the new writer leads every partition",
        lambda: set(leaders(member.bootstrap, topic).values()) == {2},
    )
    second = [f"b{i}".encode() for i in range(600)]
    assert sorted(produce_all(member.bootstrap, topic, second)) == sorted(second)
    every = first + second
    # a consumer group: the group coordinator moved with the writer lease
    assert sorted(consume_values(member.bootstrap, topic, len(every))) == sorted(every)


def test_a_member_that_stops_hands_its_partitions_to_the_writer_at_once(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer
) -> None:
    """SIGTERM: the member uploads its last records and leaves the cluster (its leases
    released), so the writer needs no session timeout to take its partitions over."""
    writer, member, topic = start_pair(broker_factory, s3, etcd)
    first = [f"a{i}".encode() for i in range(300)]
    both = f"{writer.bootstrap},{member.bootstrap}"
    assert sorted(produce_all(both, topic, first)) == sorted(first)
    member.stop()  # SIGTERM, and it exited 0
    assert "member.stopping" in member.stderr_text()
    assert "cluster.left broker=2" in member.stderr_text()
    wait_for(
        "the writer leads every partition",
        lambda: set(leaders(writer.bootstrap, topic).values()) == {1},
    )
    assert sorted(consume_values(writer.bootstrap, topic, len(first))) == sorted(first)


def test_transactions_span_the_brokers_partitions(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer
) -> None:
    """A transaction writes partitions of both brokers: the coordinator (on the writer)
    writes its markers on its own and sends WriteTxnMarkers to the member for the
    member's. A read_committed consumer sees the committed transactions' records, once,
    and none of the aborted one's."""
    writer, _member, topic = start_pair(broker_factory, s3, etcd)
    producer = ck.Producer(
        {"bootstrap.servers": writer.bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:6]}"}
    )
    producer.init_transactions(30)
    expected: list[bytes] = []
    for txn, commit in enumerate([True, False, True]):
        producer.begin_transaction()
        values = [f"t{txn}-{p}".encode() for p in range(PARTITIONS)]
        for p, value in enumerate(values):
            producer.produce(topic, value, partition=p)
        if commit:
            producer.commit_transaction(30)
            expected += values
        else:
            producer.abort_transaction(30)
    assert "txn.remote_markers" not in writer.stderr_text()  # no failed attempt
    consumer = ck.Consumer(
        {
            "bootstrap.servers": writer.bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < len(expected) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value() or b"")
    extra = consumer.poll(2.0)  # an aborted record would come now
    consumer.close()
    assert extra is None or extra.error() is not None, extra.value()
    assert sorted(got) == sorted(expected)
    assert set(leaders(writer.bootstrap, topic).values()) == {1, 2}  # it spanned both


def test_a_joining_broker_takes_its_share_while_producers_run(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer
) -> None:
    """A third broker joins two that share a topic: the writer assigns it two of the six
    partitions, their owners hand them over (released into partition objects, the
    ownership moved by compare-and-set), and it leads them; an idempotent producer runs
    throughout, and every record it had acknowledged is read back once."""
    writer, member, topic = start_pair(broker_factory, s3, etcd)
    prefix = writer.settings["storage.s3.prefix"]
    acked: list[bytes] = []
    stop = threading.Event()

    def produce() -> None:
        producer = ck.Producer(
            {"bootstrap.servers": f"{writer.bootstrap},{member.bootstrap}", "acks": "all",
             "enable.idempotence": True, "linger.ms": 5}
        )  # fmt: skip

        def done(err: ck.KafkaError | None, msg: ck.Message) -> None:
            assert err is None, err
            acked.append(msg.value() or b"")

        i = 0
        while not stop.is_set():
            producer.produce(topic, f"v{i}".encode(), partition=i % PARTITIONS, on_delivery=done)
            i += 1
            producer.poll(0.002)
        assert producer.flush(60) == 0

    worker = threading.Thread(target=produce, daemon=True)
    worker.start()
    wait_for("records flow", lambda: len(acked) > 200)
    third = broker_factory(sharing_settings(s3, prefix, etcd, 3), wait=False)
    took = wait_for(
        "every broker leads two partitions",
        lambda: (
            sorted(Counter(leaders(writer.bootstrap, topic).values()).values()) == [2, 2, 2]
            and set(leaders(writer.bootstrap, topic).values()) == {1, 2, 3}
        ),
        60,
    )
    print(f"the joining broker led its share {took:.2f} s after it started")
    before = len(acked)
    wait_for("records flow after the moves", lambda: len(acked) > before + 200)
    stop.set()
    worker.join(90)
    assert not worker.is_alive()
    assert "cluster.partition_handed_over" in writer.stderr_text() + member.stderr_text()
    assert "reason=assigned" in third.stderr_text()
    got = consume_values(third.bootstrap, topic, len(acked))
    assert sorted(got) == sorted(acked)  # none lost, none twice
    print(f"records acknowledged across the moves, all read: {len(got)}")


def test_under_load_the_writer_balances_bytes_not_partition_counts(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer
) -> None:
    """Each broker leads three partitions, but the writer's carry a hot one (800 kB/s)
    and a warm one (200 kB/s), the member's one warm one: by bytes the writer is five
    times busier. The writer moves partitions until the broker with the hot one leads
    no warm one (and cold ones keep the counts even), and then nothing moves any more
    while the load goes on: the rates' noise moves no partition back and forth."""
    writer, member, topic = start_pair(broker_factory, s3, etcd)
    both = f"{writer.bootstrap},{member.bootstrap}"
    led = leaders(writer.bootstrap, topic)
    hot, warm = [p for p, b in sorted(led.items()) if b == 1][:2]
    other = next(p for p, b in sorted(led.items()) if b == 2)
    rates = {hot: 80, warm: 20, other: 20}  # 10 kB records per second
    stop = threading.Event()
    failed: list[str] = []

    def load() -> None:
        producer = ck.Producer({"bootstrap.servers": both, "acks": "1", "linger.ms": 20})

        def done(err: ck.KafkaError | None, _msg: ck.Message) -> None:
            if err is not None:
                failed.append(str(err))

        value = b"x" * 10_000
        started, sent = time.monotonic(), dict.fromkeys(rates, 0)
        while not stop.is_set():
            elapsed = time.monotonic() - started
            for p, per_s in rates.items():
                while sent[p] < elapsed * per_s:
                    producer.produce(topic, value, partition=p, on_delivery=done)
                    sent[p] += 1
            producer.poll(0.01)
        producer.flush(60)

    def balanced() -> bool:  # (as either broker answers Metadata: a view lags a moment)
        now = leaders(writer.bootstrap, topic)
        return (
            now[warm] == now[other] != now[hot]
            and Counter(now.values()) == Counter({1: 3, 2: 3})
            and leaders(member.bootstrap, topic) == now
        )

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    try:
        took = wait_for("the hot partition's broker leads no warm one", balanced, 120)
        print(f"balanced by bytes {took:.2f} s after the load started")
        assert "by=bytes" in writer.stderr_text()
        settled = leaders(writer.bootstrap, topic)
        time.sleep(15)  # more than the settle time, three times the rates' window
        assert leaders(writer.bootstrap, topic) == settled
    finally:
        stop.set()
        loader.join(90)
    assert not failed, failed[:3]


@pytest.mark.parametrize("victim", ["member", "writer"])
def test_an_idempotent_retry_after_a_takeover_is_not_written_again(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, etcd: EtcdServer, victim: str
) -> None:
    """A producer whose acknowledgement was lost with its broker (killed after the
    commit, before the answer) retries on the next owner, which must know the batch
    from the producer state it restored: it answers with the batch's first offset and
    writes nothing, as Kafka's new leader does with the state it replicated. The dead
    broker is a member (the writer takes its partitions over) or the writer (the member
    becomes the writer and takes them over)."""
    writer, member, topic = start_pair(broker_factory, s3, etcd)
    (dead, dead_id), (heir, heir_id) = (
        ((member, 2), (writer, 1)) if victim == "member" else ((writer, 1), (member, 2))
    )
    p = next(p for p, leader in leaders(writer.bootstrap, topic).items() if leader == dead_id)
    with socket.create_connection((writer.host, writer.port), timeout=10) as conn:
        pid = init_idempotent(conn)
    with socket.create_connection((dead.host, dead.port), timeout=10) as conn:
        first = [produce_idempotent(conn, topic, p, pid, seq) for seq in range(3)]
    assert [r.error_code for r in first] == [ErrorCode.none] * 3
    crash(dead)
    if victim == "writer":
        wait_writer(heir)
    wait_for(
        "the partition led by the other broker",
        lambda: leaders(heir.bootstrap, topic)[p] == heir_id,
        timeout_s=60,
    )

    with socket.create_connection((heir.host, heir.port), timeout=10) as conn:
        retried: list[Any] = []

        def answered() -> bool:  # Metadata names the new owner before it opened it
            retried[:] = [produce_idempotent(conn, topic, p, pid, 1)]
            return retried[0].error_code != ErrorCode.not_leader_or_follower

        wait_for("the new owner answers the retry", answered, timeout_s=60)
        again = [retried[0], produce_idempotent(conn, topic, p, pid, 2)]
        assert [(r.error_code, r.base_offset) for r in again] == [
            (ErrorCode.none, first[1].base_offset),
            (ErrorCode.none, first[2].base_offset),
        ]
        end = listed_offset(ask(conn, list_offsets_request(topic, p, LATEST), 30), topic, p)
        assert end.offset == first[2].base_offset + 1
        after = produce_idempotent(conn, topic, p, pid, 3)
        assert (after.error_code, after.base_offset) == (ErrorCode.none, end.offset)
