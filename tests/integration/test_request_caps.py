"""What one request may create is bounded (each partition holds open files):

* ``create.topic.max.partitions``: a topic with more partitions (CreateTopics,
  CreatePartitions, the admin API) gets INVALID_PARTITIONS;
* ``create.request.max.partitions``: a CreateTopics or CreatePartitions request creating
  more in all creates nothing, every topic in it gets POLICY_VIOLATION (Kafka's answer
  to an excessively large controller batch);
* ``auto.create.topics.max``: auto-creation stops once the broker holds that many topics
  (internal ones included); the others get POLICY_VIOLATION, however many one Metadata
  request names.

One private broker with small caps, auto-creation on.
"""

from __future__ import annotations

import json
import socket
import struct
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import confluent_kafka as ck
import pytest
from aiokafka.protocol.metadata import MetadataRequest_v4, MetadataResponse_v4
from confluent_kafka.admin import NewPartitions, NewTopic

from helpers.admin import ADMIN_TIMEOUT_S, admin, create_topic, unique_topic
from helpers.broker import Broker

pytestmark = pytest.mark.timeout(180)

T = ADMIN_TIMEOUT_S
PER_TOPIC = 8
PER_REQUEST = 12
INTERNAL = 3  # __consumer_offsets, __transaction_state, _schemas
AUTO_MAX = 40
POLICY_VIOLATION = 44
INVALID_TOPIC_EXCEPTION = 17


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    b = Broker(
        tmp_path_factory.mktemp("caps") / "data",
        {
            "auto.create.topics.enable": "true",
            "create.topic.max.partitions": str(PER_TOPIC),
            "create.request.max.partitions": str(PER_REQUEST),
            "auto.create.topics.max": str(AUTO_MAX),
        },
    )
    try:
        yield b.start()
        admin.cache_clear()
        b.stop()
    finally:
        b.close()


def code_of(future: Any) -> int:
    with pytest.raises(ck.KafkaException) as info:
        future.result(T)
    return int(info.value.args[0].code())


def topic_names(broker: Broker) -> set[str]:
    return set(admin(broker.bootstrap).list_topics(timeout=T).topics)


def partitions_of(broker: Broker, topic: str) -> int:
    md = admin(broker.bootstrap).list_topics(topic, timeout=T)
    return len(md.topics[topic].partitions)


def metadata(broker: Broker, names: list[str]) -> list[tuple[int, str]]:
    """(error code, name) per topic of one Metadata v4 request that allows auto-creation
    (a raw request: clients do not send thousands of names at once)."""
    req = MetadataRequest_v4(topics=names, allow_auto_topic_creation=True)
    hdr = req.build_request_header(7, "caps")
    payload = hdr.encode() + req.encode()
    with socket.create_connection((broker.host, broker.port), timeout=T) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", _exactly(s, 4))[0]
        frame = _exactly(s, size)
    assert struct.unpack(">i", frame[:4])[0] == 7
    resp = MetadataResponse_v4.decode(frame[4:])
    return [(t[0], t[1]) for t in resp.topics]


def _exactly(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        assert chunk, "the broker closed the connection"
        buf += chunk
    return buf


def test_create_topics_per_topic_cap(broker: Broker) -> None:
    a = admin(broker.bootstrap)
    name = unique_topic("wide")
    futures = a.create_topics([NewTopic(name, PER_TOPIC + 1, 1)], request_timeout=T)
    assert code_of(futures[name]) == ck.KafkaError.INVALID_PARTITIONS
    assert name not in topic_names(broker)
    create_topic(broker.bootstrap, name, partitions=PER_TOPIC)
    assert partitions_of(broker, name) == PER_TOPIC


def test_create_topics_per_request_cap(broker: Broker) -> None:
    a = admin(broker.bootstrap)
    names = [unique_topic("req") for _ in range(2)]
    for validate_only in (True, False):
        futures = a.create_topics(
            [NewTopic(n, PER_TOPIC - 1, 1) for n in names],  # 14 > 12 in all
            validate_only=validate_only,
            request_timeout=T,
        )
        for n in names:
            assert code_of(futures[n]) == ck.KafkaError.POLICY_VIOLATION, (n, validate_only)
    assert not set(names) & topic_names(broker)  # nothing was created
    futures = a.create_topics([NewTopic(n, PER_REQUEST // 2, 1) for n in names], request_timeout=T)
    for n in names:
        futures[n].result(T)
        assert partitions_of(broker, n) == PER_REQUEST // 2


def test_a_topic_refused_alone_does_not_count(broker: Broker) -> None:
    """A topic with its own error (too wide, exists) is not part of the request total."""
    a = admin(broker.bootstrap)
    wide, ok = unique_topic("wide"), unique_topic("ok")
    futures = a.create_topics(
        [NewTopic(wide, 1000, 1), NewTopic(ok, PER_TOPIC, 1)], request_timeout=T
    )
    assert code_of(futures[wide]) == ck.KafkaError.INVALID_PARTITIONS
    futures[ok].result(T)


def test_create_partitions_caps(broker: Broker) -> None:
    a = admin(broker.bootstrap)
    one = create_topic(broker.bootstrap, partitions=1)
    two = create_topic(broker.bootstrap, partitions=1)
    futures = a.create_partitions([NewPartitions(one, PER_TOPIC + 1)], request_timeout=T)
    assert code_of(futures[one]) == ck.KafkaError.INVALID_PARTITIONS
    # 7 + 7 added partitions > 12 per request: neither grows
    futures = a.create_partitions(
        [NewPartitions(one, PER_TOPIC), NewPartitions(two, PER_TOPIC)], request_timeout=T
    )
    for name in (one, two):
        assert code_of(futures[name]) == ck.KafkaError.POLICY_VIOLATION
        assert partitions_of(broker, name) == 1
    a.create_partitions([NewPartitions(one, PER_TOPIC)], request_timeout=T)[one].result(T)
    assert partitions_of(broker, one) == PER_TOPIC


def test_admin_api_per_topic_cap(broker: Broker) -> None:
    request = urllib.request.Request(
        f"{broker.admin_url}/api/v1/topics",
        data=json.dumps({"name": unique_topic(), "partitions": PER_TOPIC + 1}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=T)
    with info.value as answer:
        body = json.loads(answer.read())
    assert answer.code == 400 and body["error_code"] == 400
    assert "create.topic.max.partitions" in body["message"]


def test_auto_creation_is_bounded(broker: Broker) -> None:
    """Runs last in the module: it fills the broker up to ``auto.create.topics.max``."""
    existing = topic_names(broker)
    room = AUTO_MAX - len(existing)
    assert 0 < room < 100, existing
    names = [f"auto-{i:05d}" for i in range(20_000)]
    started = time.monotonic()
    answered = metadata(broker, [*names, "__reserved"])
    assert time.monotonic() - started < 20.0
    codes = [code for code, _ in answered]
    assert codes[:room] == [0] * room
    assert set(codes[room:-1]) == {POLICY_VIOLATION}
    assert answered[-1] == (INVALID_TOPIC_EXCEPTION, "__reserved")
    now = topic_names(broker)
    assert len(now) == AUTO_MAX and now - existing == set(names[:room])
    # a second request creates nothing either; explicit creation is not bounded by it
    assert metadata(broker, ["auto-late"]) == [(POLICY_VIOLATION, "auto-late")]
    create_topic(broker.bootstrap, "explicit-after-cap")
    stderr = broker.stderr_text()
    assert stderr.count("topic.auto_create_failed") == 2, stderr[-2000:]
