"""``kill -9`` the broker under a live consumer group: the group survives, not just its
offsets.

A consumer that keeps running across the crash (the same client object, the same JVM)
goes on with the generation and member id it had: its next synchronous commit succeeds,
it sees no rebalance (no revoke, lost or assign callback after the crash), and it reads
no record twice. This is what Apache Kafka's coordinator gives, because its group
metadata record holds the members and their assignments and a loaded group is Stable
with them (their sessions restarted from the load). Checked with librdkafka
(confluent-kafka) and with Apache's Java client, on two crashes: one broker killed and
restarted on its port and data dir, and the writer of a two-broker cluster killed so
that the standby takes over.
"""

from __future__ import annotations

import functools
import socket
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName

from floe.errors import ErrorCode
from floe.protocol.client import decode_response, encode_request
from helpers.admin import ADMIN_TIMEOUT_S, admin, create_topic, unique_topic
from helpers.broker import Broker
from helpers.clients import confluent_config, confluent_produce
from helpers.cluster import cluster_settings, crash, the_writer, wait_writer
from helpers.java import events, floe_clients
from helpers.records import Record

pytestmark = [pytest.mark.crash, pytest.mark.timeout(240)]

PARTITIONS = 2
BATCH = 40
GROUP_SETTINGS = {"group.initial.rebalance.delay.ms": "0"}
"""One member per group: its first rebalance need not wait for others."""
READ_TIMEOUT_S = 90.0
SETTLE_S = 8.0
"""After the crash and the last read, how long the consumer keeps polling: longer than
two heartbeat intervals (3 s in both clients), so a member the broker forgot would have
been told so (and rebalanced, and re-read) within it."""
S3_BUCKET = "floe-tests"
"""The bucket of the session's S3 server (tests/conftest.py)."""


class Target:
    """Where the group lives and how it crashes: one broker killed and restarted, or
    the writer of a two-broker cluster killed (the standby takes over)."""

    def __init__(self, brokers: list[Broker]) -> None:
        self.brokers = brokers
        self.bootstrap = ",".join(b.bootstrap for b in brokers)

    def known_everywhere(self, topic: str) -> None:
        """Wait until every broker itself answers Metadata with ``topic`` and its
        partitions. A standby reads the bucket's topics every few seconds; until then it
        answers a just-created topic with a topic-level error, and Apache's Java client
        drops the topic from its metadata, which makes a group leader rejoin (a
        rebalance that has nothing to do with the group coordinator's failover)."""
        for b in self.brokers:
            listed = functools.partial(lists_topic, b, topic)
            wait_until(listed, 30, f"{topic} in the Metadata of {b.bootstrap}")

    def crash(self) -> None:
        if len(self.brokers) == 1:
            self.brokers[0].kill()
            self.brokers[0].start()
        else:
            old = the_writer(self.brokers)
            crash(old)
            the_writer([b for b in self.brokers if b is not old])
        admin.cache_clear()  # a fresh AdminClient instead of one in reconnect backoff


@pytest.fixture(params=["restart", "failover"])
def target(
    request: pytest.FixtureRequest, broker_factory: Callable[..., Broker], tmp_path: Path
) -> Target:
    if request.param == "restart":
        return Target([broker_factory(GROUP_SETTINGS)])
    s3 = request.getfixturevalue("s3_server")
    (tmp_path / "meta").mkdir()
    url = f"sqlite:///{tmp_path / 'meta' / 'cluster.db'}"
    prefix = f"g-{uuid.uuid4().hex[:8]}"
    settings = {**cluster_settings(s3, S3_BUCKET, prefix, url), **GROUP_SETTINGS}
    writer = wait_writer(broker_factory(settings))
    standby = broker_factory({**settings, "node.id": "2"}, wait=False)
    deadline = time.monotonic() + 30
    while "cluster.standby" not in standby.stderr_text():
        assert time.monotonic() < deadline, "the second broker did not wait as a standby"
        time.sleep(0.1)
    return Target([writer, standby])


def lists_topic(b: Broker, topic: str) -> bool:
    """Whether broker ``b`` itself lists ``topic`` with all its partitions."""
    request = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=TopicName(topic)),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    with socket.create_connection((b.host, b.port), timeout=10) as conn:
        conn.sendall(encode_request(request, 1, "group-membership-test"))
        frame = b""
        while len(frame) < 4 or len(frame) < 4 + int.from_bytes(frame[:4], "big"):
            chunk = conn.recv(65536)
            assert chunk, f"{b.bootstrap} closed the connection"
            frame += chunk
    _, response = decode_response(request, frame[4:])
    (entry,) = response.topics
    return entry.error_code == ErrorCode.none and len(entry.partitions) == PARTITIONS


def produce(t: Target, topic: str, values: range) -> None:
    records = [Record(None, b"v-%d" % i, partition=i % PARTITIONS) for i in values]
    confluent_produce(t.bootstrap, topic, records)


def committed(t: Target, group: str) -> dict[int, int]:
    """The group's committed offsets, as another client (an AdminClient) reads them."""
    result: Any = (
        admin(t.bootstrap)
        .list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
        .result(ADMIN_TIMEOUT_S)
    )
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"no {what} after {timeout_s} s"
        time.sleep(0.2)


def commit(consumer: ck.Consumer) -> str:
    """A synchronous commit of the consumer's position: "" or why it failed."""
    try:
        consumer.commit(asynchronous=False)
    except ck.KafkaException as exc:
        return str(exc)
    return ""


def test_confluent_consumer_keeps_its_membership(target: Target) -> None:
    topic = create_topic(target.bootstrap, partitions=PARTITIONS)
    group = unique_topic("g-kill9")
    rebalances: list[tuple[str, list[int]]] = []

    def on(kind: str) -> Callable[[ck.Consumer, list[ck.TopicPartition]], None]:
        return lambda _c, parts: rebalances.append((kind, sorted(p.partition for p in parts)))

    consumer = ck.Consumer(
        confluent_config(
            target.bootstrap,
            **{
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "reconnect.backoff.max.ms": 500,
            },
        )
    )
    got: list[bytes] = []

    def read_until(count: int, at_least_s: float = 0.0) -> None:
        start = time.monotonic()
        deadline = start + READ_TIMEOUT_S
        while len(set(got)) < count or time.monotonic() < start + at_least_s:
            assert time.monotonic() < deadline, f"read {len(set(got))} of {count}"
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value() or b"")

    try:
        consumer.subscribe(
            [topic], on_assign=on("assign"), on_revoke=on("revoke"), on_lost=on("lost")
        )
        produce(target, topic, range(BATCH))
        read_until(BATCH)
        consumer.commit(asynchronous=False)
        assert rebalances == [("assign", list(range(PARTITIONS)))]
        assert sum(committed(target, group).values()) == BATCH
        target.known_everywhere(topic)

        target.crash()
        produce(target, topic, range(BATCH, 2 * BATCH))
        read_until(2 * BATCH)
        # The member's generation and id are still the group's: this commit succeeds.
        failed = commit(consumer)
        read_until(2 * BATCH, at_least_s=SETTLE_S)
        after_crash = rebalances[1:]  # not the revoke that closing the consumer makes
    finally:
        consumer.close()
    doubled = sorted(v for v, n in Counter(got).items() if n > 1)
    problems = {"failed commit": failed, "rebalances": after_crash, "read twice": doubled}
    assert not any(problems.values()), f"after the crash: {problems}"
    assert sorted(set(got)) == sorted(b"v-%d" % i for i in range(2 * BATCH))
    assert sum(committed(target, group).values()) == 2 * BATCH


def test_java_consumer_keeps_its_membership(
    target: Target, tmp_path_factory: pytest.TempPathFactory
) -> None:
    java = floe_clients(tmp_path_factory)
    topic = create_topic(target.bootstrap, partitions=PARTITIONS)
    group = unique_topic("g-java-kill9")

    def values(lines: list[str]) -> set[str]:
        return {e.value for e in events(lines, "GOT")}

    with java.start("stream-consume", target.bootstrap, topic, group) as consumer:
        produce(target, topic, range(BATCH))
        first = {f"v-{i}" for i in range(BATCH)}
        consumer.wait_for(lambda lines: first <= values(lines), READ_TIMEOUT_S, "the first GOTs")
        # stream-consume commits synchronously after each non-empty poll
        wait_until(lambda: sum(committed(target, group).values()) == BATCH, 30, "a commit")
        mark = len(consumer.lines)
        target.known_everywhere(topic)

        target.crash()
        produce(target, topic, range(BATCH, 2 * BATCH))
        every = {f"v-{i}" for i in range(2 * BATCH)}
        consumer.wait_for(lambda lines: every <= values(lines), READ_TIMEOUT_S, "every GOT")
        wait_until(
            lambda: sum(committed(target, group).values()) == 2 * BATCH,
            30,
            "a commit after the crash",
        )
        time.sleep(SETTLE_S)
        after = consumer.lines[mark:]  # not the REVOKED that closing the consumer prints
        lines = consumer.stop()
    read = [e.value for e in events(lines, "GOT")]
    doubled = sorted(v for v, n in Counter(read).items() if n > 1)
    problems = {
        "failed commits": [line[:120] for line in after if line.startswith("ERR")],
        "rebalances": [line for line in after if line.startswith(("REVOKED", "ASSIGNED"))],
        "read twice": doubled,
    }
    assert not any(problems.values()), f"after the crash: {problems}"
    assert set(read) == every
