"""Failover under load: three brokers on one bucket prefix, producers of all four real
clients (librdkafka, kafka-python, aiokafka, Apache's Java client) and three consumer
groups (librdkafka, aiokafka, Java) running, and a broker killed with SIGKILL (its whole
process group: the broker and its Spark) again and again; each killed broker comes back.

Two clusters: one writer and two standbys, the writer killed each time (the topic is a
table topic); and brokers sharing partitions (``cluster.share.partitions``), the topic's
partitions spread over all three, a member and the writer killed in turn, then a fourth
broker joining and taking its share, all under the same load.

What a user relies on, checked at the end: no acknowledged record is lost, none of an
idempotent producer is written twice, every consumer group sees every record, and the
table topic (Iceberg on the SeaweedFS REST catalog, shared by all brokers) holds exactly
the topic's records. ``make test`` kills three times, 15 s apart; ``make crash`` runs
the long version (a kill every 20 s for 5 minutes) through FLOE_FAILOVER_* variables.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient

from floe.config import load_config
from floe.tabletopic import catalog as cat
from floe.tabletopic.convert import table_identifier
from helpers.admin import create_topic, watermarks
from helpers.broker import Broker
from helpers.cluster import cluster_settings, crash, the_writer, wait_for, wait_writer
from helpers.cluster_etcd import EtcdServer
from helpers.java import FloeJava, events, floe_clients
from helpers.seaweed import SeaweedServer, seaweed_server
from helpers.table_readers import pyiceberg_rows, wait_for_rows

pytestmark = [pytest.mark.crash, pytest.mark.timeout(1800)]

BUCKET = "floe-failover"
TABLE_BUCKET = "failover-tables"
KILLS = int(os.environ.get("FLOE_FAILOVER_KILLS", "3"))
INTERVAL_S = float(os.environ.get("FLOE_FAILOVER_INTERVAL_S", "15"))
PARTITIONS = 3
SHARED_PARTITIONS = 6
"""Partitions of the shared-partitions run: two per broker, and one for a fourth that
joins."""
CATCH_UP_S = 600.0
DELIVERY_TIMEOUT_S = 120
"""The Python producers' delivery timeout: after it, every send has ended, acknowledged
or failed."""


@pytest.fixture(scope="module")
def s3() -> Iterator[SeaweedServer]:
    with seaweed_server(BUCKET) as server:
        server.s3_client("s3tables").create_table_bucket(name=TABLE_BUCKET)
        yield server


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory) -> FloeJava:
    return floe_clients(tmp_path_factory)


@dataclass
class Tally:
    """What one client had acknowledged (or consumed), thread-safe."""

    name: str
    values: list[bytes] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    errors: int = 0
    stuck: str = ""
    """A producer whose sends did not all end (acknowledged or failed) after it
    stopped: what it was doing then."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, value: bytes) -> None:
        with self.lock:
            self.values.append(value)
            self.times.append(time.monotonic())

    def failed(self) -> None:
        with self.lock:
            self.errors += 1


def confluent_producer(bootstrap: str, topic: str, stop: threading.Event, out: Tally) -> None:
    producer = ck.Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True}
    )

    def done(err: ck.KafkaError | None, msg: ck.Message) -> None:
        if err is None:
            out.add(msg.value() or b"")
        else:
            out.failed()

    i = 0
    while not stop.is_set():
        producer.produce(topic, f"ck-{i}".encode(), on_delivery=done)
        i += 1
        producer.poll(0.02)
    producer.flush(120)


def kafka_python_producer(bootstrap: str, topic: str, stop: threading.Event, out: Tally) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    producer = KafkaProducer(
        bootstrap_servers=bootstrap.split(","),
        acks="all",
        enable_idempotence=True,
        retries=2**31 - 1,
        request_timeout_ms=15_000,
        delivery_timeout_ms=DELIVERY_TIMEOUT_S * 1000,
    )
    i = 0
    try:
        while not stop.is_set():
            value = f"kp-{i}".encode()
            i += 1
            future = producer.send(topic, value)
            future.add_callback(lambda _md, v=value: out.add(v))
            future.add_errback(lambda _exc: out.failed())
            time.sleep(0.02)
        try:
            producer.flush(DELIVERY_TIMEOUT_S)
        except KafkaTimeoutError:
            out.stuck = kafka_python_state(producer)
    finally:
        if out.stuck:  # its close would raise too: end the sends unsent
            producer._sender.force_close()
            producer._sender.join(30)
        producer.close(timeout=30)


def kafka_python_state(producer: Any) -> str:
    """What a kafka-python producer whose flush timed out was doing: its unended
    batches, its producer id state, its connections and where its I/O thread is (the
    client's internals, read for the failure message only)."""
    sender = producer._sender
    batches = [
        f"{b.topic_partition.partition}: {time.monotonic() - b.created:.0f} s old, "
        f"{b.attempts} attempts, final={b.final_state}"
        for b in producer._accumulator._incomplete.all()
    ]
    manager = sender._transaction_manager
    conns = {
        node: f"connected={c.connected} in_flight={len(c.in_flight_requests)}"
        for node, c in sender._client._manager._conns.items()
    }
    stacks = []  # three looks a second apart: a thread that loops shows it
    for _ in range(3):
        frame = sys._current_frames().get(sender.ident or -1)
        stacks.append("".join(traceback.format_stack(frame)[-6:]) if frame else "(ended)\n")
        time.sleep(1)
    return (
        f"unended batches: {batches}\n"
        f"producer id: {manager.producer_id_and_epoch} state={manager._current_state} "
        f"last error={manager.last_error!r} "
        f"in-flight txn request={manager.has_in_flight_transactional_request()}\n"
        f"connections: {conns}\nI/O thread at:\n" + "---\n".join(stacks)
    )


def aiokafka_producer(bootstrap: str, topic: str, stop: threading.Event, out: Tally) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    async def run() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, acks="all", enable_idempotence=True
        )
        await producer.start()
        try:
            i = 0
            while not stop.is_set():
                value = f"ak-{i}".encode()
                i += 1
                try:
                    await producer.send_and_wait(topic, value)
                    out.add(value)
                except KafkaError:
                    out.failed()
                await asyncio.sleep(0.02)
        finally:
            await producer.stop()

    asyncio.run(run())


def confluent_group(bootstrap: str, topic: str, stop: threading.Event, out: Tally) -> None:
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"ck-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 500,
        }
    )
    consumer.subscribe([topic])
    try:
        while not stop.is_set():
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.add(msg.value() or b"")
    finally:
        consumer.close()


def aiokafka_group(bootstrap: str, topic: str, stop: threading.Event, out: Tally) -> None:
    from aiokafka import AIOKafkaConsumer

    async def run() -> None:
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=f"ak-{uuid.uuid4().hex[:8]}",
            auto_offset_reset="earliest",
            enable_auto_commit=True,
        )
        await consumer.start()
        try:
            while not stop.is_set():
                batches = await consumer.getmany(timeout_ms=200)
                for msgs in batches.values():
                    for m in msgs:
                        out.add(m.value or b"")
        finally:
            await consumer.stop()

    asyncio.run(run())


def read_topic(b: Broker, topic: str, partitions: int) -> list[tuple[int, int, str]]:
    """Every record of the topic as ``(partition, offset, value)``, from the writer."""
    ends = {p: high for p, (_, high) in watermarks(b.bootstrap, topic, partitions).items()}
    consumer = ck.Consumer(
        {"bootstrap.servers": b.bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[tuple[int, int, str]] = []
    deadline = time.monotonic() + 120
    try:
        while len(got) < sum(ends.values()):
            assert time.monotonic() < deadline, f"read {len(got)} of {sum(ends.values())}"
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append((msg.partition(), msg.offset(), (msg.value() or b"").decode()))
    finally:
        consumer.close()
    return sorted(got)


def leaders(writer: Broker, topic: str) -> list[int]:
    """Each partition's leader in the writer's Metadata (-1: none)."""
    client = AdminClient({"bootstrap.servers": writer.bootstrap, "broker.address.family": "v4"})
    parts = client.list_topics(topic, timeout=10).topics[topic].partitions
    return [parts[p].leader for p in sorted(parts)]


def node(b: Broker) -> int:
    return int(b.settings["node.id"])


def led_by_live_brokers(writer: Broker, topic: str, dead: Broker) -> bool:
    """Every partition of ``topic`` has a leader other than ``dead`` in the writer's
    Metadata."""
    return all(leader >= 0 and leader != node(dead) for leader in leaders(writer, topic))


@pytest.mark.parametrize("share", [False, True], ids=["standbys", "shared-partitions"])
def test_broker_kills_under_load_lose_nothing(
    broker_factory: Callable[..., Broker],
    s3: SeaweedServer,
    etcd: EtcdServer,
    java: FloeJava,
    request: pytest.FixtureRequest,
    *,
    share: bool,
) -> None:
    prefix = f"f-{uuid.uuid4().hex[:8]}"
    url = f"etcd://{etcd.endpoint}"
    extra = {**s3.catalog_settings(TABLE_BUCKET), "cluster.share.partitions": str(share).lower()}

    def start(node: int) -> Broker:
        settings = cluster_settings(s3, BUCKET, prefix, url, **{"node.id": str(node), **extra})
        return broker_factory(settings, wait=False)

    brokers = [wait_writer(start(1)), start(2), start(3)]
    waiting = "member.listening" if share else "cluster.standby"
    for b in brokers[1:]:
        wait_for(waiting, lambda b=b: waiting in b.stderr_text(), 60)
    wait_for(
        "the writer sees every broker",
        lambda: len(AdminClient({"bootstrap.servers": brokers[0].bootstrap}).list_topics(
            timeout=10
        ).brokers) == 3,
        60,
    )  # fmt: skip
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    table = {
        "table.topic.enable": "true",
        "table.topic.convert.value.type": "string",
        "table.topic.commit.interval.ms": "2000",
    }
    # a table topic's partitions stay with the writer: with shared partitions the topic
    # is a plain one, spread over the three brokers
    partitions = SHARED_PARTITIONS if share else PARTITIONS
    create_topic(brokers[0].bootstrap, topic, partitions, {} if share else table)
    if share:
        wait_for(
            "every broker leads a partition",
            lambda: len(set(leaders(brokers[0], topic))) == 3,
            60,
        )
    bootstrap = ",".join(b.bootstrap for b in brokers)

    stop_producing, stop_consuming = threading.Event(), threading.Event()
    produced = [Tally("confluent"), Tally("kafka-python"), Tally("aiokafka")]
    consumed = [Tally("confluent group"), Tally("aiokafka group")]
    workers = [
        threading.Thread(target=run, args=(bootstrap, topic, stop, tally), daemon=True)
        for run, stop, tally in [
            (confluent_producer, stop_producing, produced[0]),
            (kafka_python_producer, stop_producing, produced[1]),
            (aiokafka_producer, stop_producing, produced[2]),
            (confluent_group, stop_consuming, consumed[0]),
            (aiokafka_group, stop_consuming, consumed[1]),
        ]
    ]
    for w in workers:
        w.start()

    def stop_clients() -> None:  # whatever failed: no client thread outlives the test
        stop_producing.set()
        stop_consuming.set()
        for w in workers:
            w.join(150)

    request.addfinalizer(stop_clients)
    java_producer = java.start("stream-produce", bootstrap, topic, "jv")
    java_group = java.start("stream-consume", bootstrap, topic, f"jv-{uuid.uuid4().hex[:8]}")
    request.addfinalizer(java_producer.kill)  # both, whatever failed first
    request.addfinalizer(java_group.kill)

    failovers: list[float] = []
    moved: list[float] = []  # shared partitions: kill to every partition led again
    for kill in range(KILLS):
        time.sleep(INTERVAL_S)
        writer = the_writer(brokers)
        # standbys serve nothing: the writer dies each time; with shared partitions a
        # member leading some dies in turn with it (a restarted member gets its share
        # back from the writer's balancing, or none yet if it came back a moment ago)
        victim = writer
        if share and kill % 2 == 0:
            leading = set(leaders(writer, topic)) - {node(writer)}
            victim = next((b for b in brokers if node(b) in leading), writer)
        crash(victim)
        killed_at = time.monotonic()
        if victim is writer:
            writer = the_writer([b for b in brokers if b is not victim])  # another took over
        if share:
            wait_for(
                "the dead broker's partitions led again",
                lambda w=writer, v=victim: led_by_live_brokers(w, topic, v),
                120,
            )
            moved.append(time.monotonic() - killed_at)
        victim.start(wait=False)  # back, as a standby or a member now
        wait_for(
            "an acknowledgement after the kill",
            lambda killed_at=killed_at: any(t.times and t.times[-1] > killed_at for t in produced),
            120,
        )
        failovers.append(
            min(min((x for x in t.times if x > killed_at), default=1e9) for t in produced)
            - killed_at
        )
    if share:  # a fourth broker joins under the load and takes its share
        newcomer = start(4)
        now_writer = the_writer(brokers)
        joined = wait_for(
            "the new broker leads a partition",
            lambda: node(newcomer) in leaders(now_writer, topic),
            120,
        )
        print(f"a joining broker led its share {joined:.2f} s after it started")
    time.sleep(INTERVAL_S / 2)
    stop_producing.set()
    for w in workers[:3]:
        w.join(180)
        assert not w.is_alive(), "a producer did not finish"
    produced.append(Tally("java"))
    for acked in events(java_producer.stop(180), "ACK"):
        produced[-1].add(acked.value.encode())
    print("failover (kill to the next acknowledgement), s:", [round(f, 2) for f in failovers])
    if share:
        print("kill to every partition led again, s:", [round(m, 2) for m in moved])
    print("acknowledged:", {t.name: len(t.values) for t in produced})

    writer = the_writer(brokers)
    rows = read_topic(writer, topic, partitions)
    in_topic = [v.encode() for _, _, v in rows]
    for t in produced:
        assert not t.stuck, f"{t.name}: sends unended after its delivery timeout\n{t.stuck}"
        assert t.values, f"{t.name} had nothing acknowledged"
        mine = [v for v in in_topic if v.startswith(t.values[0][:3])]
        missing = set(t.values) - set(mine)
        assert not missing, f"{t.name}: {len(missing)} acknowledged records lost"
        assert len(mine) == len(set(mine)), f"{t.name}: records written twice"

    expected = set(in_topic)
    for t in consumed:
        wait_for(f"{t.name} sees every record", lambda t=t: expected <= set(t.values), 180)
    java_group.wait_for(
        lambda lines: expected <= {e.value.encode() for e in events(lines, "GOT")},
        180,
        "the Java group sees every record",
    )
    stop_consuming.set()
    for w in workers[3:]:
        w.join(60)
    java_group.stop()
    if share:
        return

    settings = cat.CatalogSettings.from_config(load_config(None, extra, environ={}))
    table = table_identifier("default", topic)
    wait_for_rows(writer, settings, table, len(rows), CATCH_UP_S)
    assert pyiceberg_rows(settings, table) == rows
