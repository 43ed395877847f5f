"""Settings of a ``floe up`` in a cluster: its log in a SeaweedFS bucket and its
membership in a metadata store (``cluster.metadata.url``); finding its writer, and
crashing one as when its machine dies."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import ProducerId, TopicName
from kio.static.primitive import i16, i32, i32Timedelta

from floe.protocol.client import decode_response, encode_request
from floe.protocol.records import Record, encode_batch
from helpers.admin import create_topic
from helpers.broker import Broker
from helpers.seaweed import SeaweedServer

SESSION_MS = 3000
"""cluster.session.timeout.ms of the test brokers: short, so leases lapse quickly."""
WAIT_S = 30.0


def namespace(prefix: str) -> str:
    """The metadata namespace of the brokers writing under storage ``prefix``."""
    return prefix.replace("-", "_")


def cluster_settings(
    s3: SeaweedServer, bucket: str, prefix: str, url: str, **extra: str
) -> dict[str, str]:
    """A broker writing under ``prefix`` of ``bucket``, in the cluster whose metadata is
    at ``url`` (namespace from the prefix): a standby while another broker writes,
    unless ``extra`` sets ``cluster.share.partitions=true`` (the default of a real
    cluster, whose own tests set it)."""
    return {
        **s3.log_settings(bucket, prefix),
        "cluster.metadata.url": url,
        "cluster.metadata.namespace": namespace(prefix),
        "cluster.session.timeout.ms": str(SESSION_MS),
        "cluster.share.partitions": "false",
        **extra,
    }


def writing(b: Broker) -> bool:
    """``b`` runs and is the cluster's writer: its admin API answers, as ``b``, in the
    writer's role (a member or standby answers with its own; some other process may
    hold the admin port of a broker that is not the writer: Spark drivers bind random
    ports)."""
    if not b.running:
        return False
    try:
        with urllib.request.urlopen(f"{b.admin_url}/api/v1/cluster", timeout=2) as answer:
            doc = json.load(answer)
        return bool(doc["kafka"] == b.bootstrap and doc["membership"]["role"] == "writer")
    except (OSError, ValueError, KeyError, TypeError):
        return False


def wait_writer(b: Broker, timeout_s: float = 60.0) -> Broker:
    """Wait until ``b`` took the writer lease and serves.

    Raises:
        AssertionError: it did not within ``timeout_s``, or exited.
    """
    deadline = time.monotonic() + timeout_s
    while not writing(b):
        b.assert_alive()
        assert time.monotonic() < deadline, f"broker not the writer after {timeout_s} s"
        time.sleep(0.05)
    return b


def the_writer(brokers: list[Broker], timeout_s: float = 60.0) -> Broker:
    """The one broker of ``brokers`` that serves as the writer, once there is one.

    Raises:
        AssertionError: none (or several) within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        serving = [b for b in brokers if writing(b)]
        if len(serving) == 1:
            return serving[0]
        assert time.monotonic() < deadline, (
            f"{len(serving)} brokers serving as the writer"
            + "".join(
                f"\n--- {b.data_dir.name} ({'running' if b.running else 'exited'}):\n"
                + b.stderr_tail(15)
                for b in brokers
            )
        )
        time.sleep(0.02)


def session_members(sid: int) -> list[tuple[int, str]]:
    """Live (non-zombie) processes of session ``sid`` as (pid, command line cut to 120
    characters): a broker is started with ``start_new_session``, so its Spark JVM and
    Python workers keep its session id (its pid)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        state, _ppid, _pgrp, session = stat.rsplit(")", 1)[1].split()[:4]
        if int(session) == sid and state != "Z":
            found.append((int(entry), cmd.decode(errors="replace")[:120]))
    return found


def crash(b: Broker) -> None:
    """The machine dies: SIGKILL to the broker's process group (its Spark too), and
    nothing of it may live on (a stray Spark driver could commit behind the new writer).

    Raises:
        AssertionError: a process of the broker's session survived for 5 s.
    """
    assert b.proc is not None
    sid = b.proc.pid
    os.killpg(sid, signal.SIGKILL)
    b.kill()  # reap
    deadline = time.monotonic() + 5
    while members := session_members(sid):
        alive = [f"{pid} {cmd}" for pid, cmd in members]
        assert time.monotonic() < deadline, f"the killed broker lives on: {alive}"
        time.sleep(0.02)


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = WAIT_S) -> float:
    """Seconds until ``check()`` held (polled every 0.1 s).

    Raises:
        AssertionError: it did not within ``timeout_s``.
    """
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout_s, f"not within {timeout_s} s: {what}"
        time.sleep(0.1)
    return time.monotonic() - started


def produce_values(
    bootstrap: str, topic: str, values: list[bytes], **config: object
) -> list[bytes]:
    """``values`` sent round-robin over partitions 0-2 by an acks=all idempotent
    producer (``config`` overrides its settings); returns those acknowledged."""
    acked: list[bytes] = []

    def done(err: ck.KafkaError | None, msg: ck.Message) -> None:
        if err is None:
            acked.append(msg.value() or b"")

    producer = ck.Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, **config}
    )
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % 3, on_delivery=done)
    producer.flush(60)
    return acked


def consume_values(bootstrap: str, topic: str, count: int) -> list[bytes]:
    """Up to ``count`` values of ``topic`` from its start, read by a new consumer group
    within WAIT_S."""
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value() or b"")
    finally:
        consumer.close()
    return got


def leaders_as_answered_by(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's leader (-1: none) as the broker at ``bootstrap`` itself answers
    Metadata. (A client library sends its metadata requests to any broker it learned
    of, so its answer may be another broker's view, which lags a handover by up to one
    lease renewal.) ``{}`` while it does not answer (a member becoming the writer
    reopens its listener)."""
    return metadata_as_answered_by(bootstrap, topic)[0]


def takes_connections(b: Broker) -> bool:
    """Whether the broker's Kafka port takes a TCP connection now (one waiting in its
    listen backlog counts: the client is answered once the broker serves)."""
    try:
        socket.create_connection((b.host, b.port), timeout=1).close()
    except OSError:
        return False
    return True


def metadata_as_answered_by(bootstrap: str, topic: str) -> tuple[dict[int, int], set[int]]:
    """:func:`leaders_as_answered_by`, and the ids of the brokers the answer names (a
    client may connect to any of them); ``({}, set())`` while it does not answer."""
    host, _, port = bootstrap.rpartition(":")
    request = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=TopicName(topic)),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    try:
        with socket.create_connection((host, int(port)), timeout=10) as conn:
            response = ask(conn, request, 1)
    except OSError:  # refused, reset, timed out
        return {}, set()
    (entry,) = response.topics
    leaders = {int(p.partition_index): int(p.leader_id) for p in entry.partitions}
    return leaders, {int(b.node_id) for b in response.brokers}


def ask(conn: socket.socket, request: Any, correlation_id: int) -> Any:
    """Send ``request`` (a kio request entity) on ``conn`` and return the decoded
    response.

    Raises:
        ConnectionError: the broker closed the connection instead of answering.
    """
    conn.sendall(encode_request(request, correlation_id, "floe-tests"))
    size = int.from_bytes(_read_exactly(conn, 4), "big")
    got, response = decode_response(request, _read_exactly(conn, size))
    assert got == correlation_id, f"answer to request {got}, not {correlation_id}"
    return response


def produce_idempotent(
    conn: socket.socket, topic: str, partition: int, pid: int, seq: int, *, timeout_s: float = 30
) -> Any:
    """One acks=all batch of one record (value ``v<seq>``) to ``partition`` by idempotent
    producer ``pid`` (epoch 0) at sequence ``seq``, sent raw on ``conn`` with a request
    timeout of ``timeout_s`` (a client's retry is the same call again): the partition's
    answer."""
    records = encode_batch(
        [Record(0, int(time.time() * 1000), b"k", f"v{seq}".encode())],
        base_offset=0, producer_id=pid, producer_epoch=0, base_sequence=seq,
    )  # fmt: skip
    request = ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=i32Timedelta.parse(timedelta(seconds=timeout_s)),
        topic_data=(
            TopicProduceData(
                name=TopicName(topic),
                partition_data=(PartitionProduceData(index=i32(partition), records=records),),
            ),
        ),
    )
    return ask(conn, request, seq + 10).responses[0].partition_responses[0]


def init_idempotent(conn: socket.socket) -> int:
    """A new idempotent producer id, asked for raw on ``conn``."""
    init = InitProducerIdRequest(
        transactional_id=None,
        transaction_timeout=i32Timedelta.parse(timedelta(seconds=10)),
        producer_id=ProducerId(-1),
        producer_epoch=i16(-1),
    )
    return int(ask(conn, init, 1).producer_id)


def _read_exactly(conn: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError(
                f"the broker closed the connection instead of answering ({len(data)} bytes)"
            )
        data += chunk
    return bytes(data)


def sharing_settings(
    s3: SeaweedServer, bucket: str, prefix: str, etcd_endpoint: str, node: int
) -> dict[str, str]:
    """Broker ``node`` of a cluster sharing partitions (the default of a real cluster)
    on ``prefix`` of ``bucket``, with etcd at ``etcd_endpoint``."""
    return cluster_settings(
        s3,
        bucket,
        prefix,
        f"etcd://{etcd_endpoint}",
        **{"node.id": str(node), "cluster.share.partitions": "true"},
    )


def produce_round_robin(
    bootstrap: str, topic: str, values: list[bytes], partitions: int
) -> list[bytes]:
    """``values`` round-robin over ``partitions`` partitions by an acks=all idempotent
    producer; returns those acknowledged, failing unless every one is within 60 s."""
    acked: list[bytes] = []

    def done(err: ck.KafkaError | None, msg: ck.Message) -> None:
        assert err is None, err
        acked.append(msg.value() or b"")

    producer = ck.Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True}
    )
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % partitions, on_delivery=done)
        producer.poll(0)
    assert producer.flush(60) == 0, "not every partition took its records within 60 s"
    return acked


def start_sharing_brokers(
    broker_factory: Callable[..., Broker],
    s3: SeaweedServer,
    bucket: str,
    etcd_endpoint: str,
    **extra: str,
) -> tuple[Broker, Broker]:
    """A writer (node 1) and a member (node 2) sharing partitions on a new prefix of
    ``bucket``, ``extra`` settings added, once the writer sees the member."""
    prefix = f"s-{uuid.uuid4().hex[:8]}"
    writer = wait_writer(
        broker_factory({**sharing_settings(s3, bucket, prefix, etcd_endpoint, 1), **extra})
    )
    member = broker_factory(
        {**sharing_settings(s3, bucket, prefix, etcd_endpoint, 2), **extra}, wait=False
    )
    wait_for("the member listens", lambda: "member.listening" in member.stderr_text())
    wait_for(
        "the writer sees the member",
        lambda: len(AdminClient({"bootstrap.servers": writer.bootstrap}).list_topics(
            timeout=10
        ).brokers) == 2,
    )  # fmt: skip
    return writer, member


def start_sharing_pair(
    broker_factory: Callable[..., Broker],
    s3: SeaweedServer,
    bucket: str,
    etcd_endpoint: str,
    partitions: int,
    **extra: str,
) -> tuple[Broker, Broker, str]:
    """:func:`start_sharing_brokers`, then a new topic of ``partitions`` (even) partitions
    of which each broker leads half, as either one says; returns them and the topic."""
    writer, member = start_sharing_brokers(broker_factory, s3, bucket, etcd_endpoint, **extra)
    topic = create_topic(writer.bootstrap, partitions=partitions)
    half = Counter({1: partitions // 2, 2: partitions // 2})
    wait_for(
        "each broker leads half of the topic's partitions, as either one says",
        lambda: (
            member.stderr_text().count(f"cluster.partition_led broker=2 partition={topic}-")
            >= partitions // 2
            and Counter(leaders_as_answered_by(writer.bootstrap, topic).values()) == half
            and leaders_as_answered_by(member.bootstrap, topic)
            == leaders_as_answered_by(writer.bootstrap, topic)
        ),
    )
    return writer, member, topic
