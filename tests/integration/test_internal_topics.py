"""Internal topics are the broker's: no client and no admin API call may delete, alter,
grow, truncate or (re)create ``__consumer_offsets``, ``__transaction_state`` or
``_schemas``. Each refusal carries the error code Apache Kafka 4.x answers (docs/broker.md,
"Internal topics"), and at the end the broker restarts with its groups' offsets intact.

One private broker for the module: a bug here could destroy its internal topics.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from kafka.admin import KafkaAdminClient
from kafka.errors import TopicAuthorizationFailedError

from floe.coordinator.group import partition_for
from helpers.admin import ADMIN_TIMEOUT_S, admin, create_topic, watermarks
from helpers.broker import Broker
from helpers.clients import confluent_consumer, confluent_produce
from helpers.records import Record

pytestmark = pytest.mark.timeout(180)

T = ADMIN_TIMEOUT_S
INTERNAL = ("__consumer_offsets", "__transaction_state", "_schemas")
PARTITIONS = {"__consumer_offsets": 50, "__transaction_state": 50, "_schemas": 1}
"""Each internal topic's partitions (``offsets.topic.num.partitions`` and
``transaction.state.log.num.partitions``: Kafka's 50)."""
GROUP = "internal-topics-group"
GROUP_PARTITION = partition_for(GROUP, PARTITIONS["__consumer_offsets"])
"""The partition of ``__consumer_offsets`` holding the group's offsets."""


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    b = Broker(tmp_path_factory.mktemp("internal") / "data", {"auto.create.topics.enable": "false"})
    try:
        yield b.start()
        admin.cache_clear()
        b.stop()
    finally:
        b.close()


@pytest.fixture(scope="module")
def committed(broker: Broker) -> str:
    """A topic whose group offset is committed (in ``__consumer_offsets``) before the
    hostile requests; the last test checks it is still there after a restart."""
    topic = create_topic(broker.bootstrap)
    confluent_produce(broker.bootstrap, topic, [Record(b"k", b"v", partition=0)] * 3)
    consumer = confluent_consumer(broker.bootstrap, **{"group.id": GROUP})
    try:
        consumer.commit(offsets=[ck.TopicPartition(topic, 0, 2)], asynchronous=False)
    finally:
        consumer.close()
    return topic


def code_of(future: Any) -> int:
    with pytest.raises(ck.KafkaException) as info:
        future.result(T)
    return int(info.value.args[0].code())


def partitions_of(broker: Broker, topic: str) -> int:
    md = admin(broker.bootstrap).list_topics(topic, timeout=T)
    return len(md.topics[topic].partitions)


def overrides_of(broker: Broker, topic: str) -> dict[str, str]:
    res = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin(broker.bootstrap).describe_configs([res])[res].result(T)
    return {
        name: entry.value
        for name, entry in configs.items()
        if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    }


def http(broker: Broker, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{broker.admin_url}/api/v1{path}",
        data=data,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=T) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def test_internal_topics_exist_and_are_marked(broker: Broker, committed: str) -> None:
    md = admin(broker.bootstrap).list_topics(timeout=T)
    for name in INTERNAL:
        assert name in md.topics, name
    status, listed = http(broker, "GET", "/topics?internal=true")
    assert status == 200
    assert {t["topic"] for t in listed["topics"] if t["internal"]} >= set(INTERNAL)


def test_delete_topics_is_refused(broker: Broker, committed: str) -> None:
    a = admin(broker.bootstrap)
    futures = a.delete_topics(list(INTERNAL), operation_timeout=T, request_timeout=T)
    for name in INTERNAL:
        assert code_of(futures[name]) == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED, name
    # kafka-python sends DeleteTopics by name too (an older request version)
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            client.delete_topics(["__consumer_offsets"], timeout_ms=30000)
    finally:
        client.close()
    md = a.list_topics(timeout=T)
    assert all(name in md.topics for name in INTERNAL)


def test_alter_configs_is_refused(broker: Broker, committed: str) -> None:
    a = admin(broker.bootstrap)
    before = {name: overrides_of(broker, name) for name in INTERNAL}
    for name in INTERNAL:
        res = ConfigResource(
            ResourceType.TOPIC,
            name,
            incremental_configs=[
                ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET),
                ConfigEntry("cleanup.policy", None, incremental_operation=AlterConfigOpType.DELETE),
            ],
        )
        code = code_of(a.incremental_alter_configs([res])[res])
        assert code == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED, name
        legacy = ConfigResource(ResourceType.TOPIC, name, set_config={"retention.ms": "1"})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            future = a.alter_configs([legacy])[legacy]
        assert code_of(future) == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED, name
        # the table-topic switch is a topic config like any other
        table = ConfigResource(
            ResourceType.TOPIC,
            name,
            incremental_configs=[
                ConfigEntry(
                    "table.topic.enable", "true", incremental_operation=AlterConfigOpType.SET
                )
            ],
        )
        assert code_of(a.incremental_alter_configs([table])[table]) == (
            ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
        )
    assert {name: overrides_of(broker, name) for name in INTERNAL} == before
    assert before["__consumer_offsets"]["cleanup.policy"] == "compact"


def test_create_partitions_is_refused(broker: Broker, committed: str) -> None:
    a = admin(broker.bootstrap)
    futures = a.create_partitions([NewPartitions(n, 8) for n in INTERNAL], request_timeout=T)
    for name in INTERNAL:
        assert code_of(futures[name]) == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED, name
        assert partitions_of(broker, name) == PARTITIONS[name]


def test_delete_records_is_refused(broker: Broker, committed: str) -> None:
    a = admin(broker.bootstrap)
    before = watermarks(broker.bootstrap, "__consumer_offsets", PARTITIONS["__consumer_offsets"])
    assert before[GROUP_PARTITION][1] > 0  # the group's commit is in there
    for name in INTERNAL:
        partition = GROUP_PARTITION if name == "__consumer_offsets" else 0
        tp = ck.TopicPartition(name, partition, -1)  # -1: up to the high watermark
        assert code_of(a.delete_records([tp], request_timeout=T)[tp]) == (
            ck.KafkaError.TOPIC_EXCEPTION  # Kafka INVALID_TOPIC_EXCEPTION (17)
        ), name
    assert watermarks(broker.bootstrap, "__consumer_offsets", len(before)) == before


@pytest.mark.parametrize(
    "name",
    [*INTERNAL, "__cluster_metadata", "__share_group_state"],
)
def test_create_topics_of_an_internal_name_is_refused(broker: Broker, name: str) -> None:
    a = admin(broker.bootstrap)
    for validate_only in (True, False):
        futures = a.create_topics(
            [NewTopic(name, 3, 1)], validate_only=validate_only, request_timeout=T
        )
        assert code_of(futures[name]) == ck.KafkaError.INVALID_REQUEST, (name, validate_only)
    md = a.list_topics(timeout=T)
    if name in INTERNAL:
        assert len(md.topics[name].partitions) == PARTITIONS[name]
    else:
        assert name not in md.topics or md.topics[name].error is not None


def test_admin_api_refuses_internal_topics(broker: Broker, committed: str) -> None:
    for name in INTERNAL:
        status, body = http(broker, "DELETE", f"/topics/{name}")
        assert status == 403, body
        assert body["error_code"] == 403 and "internal" in body["message"], body
        status, body = http(
            broker, "PATCH", f"/topics/{name}/configs", {"set": {"retention.ms": "1"}}
        )
        assert status == 403 and "internal" in body["message"], body
        status, body = http(
            broker, "PATCH", f"/topics/{name}/configs", {"delete": ["cleanup.policy"]}
        )
        assert status == 403, body
        status, body = http(broker, "PUT", f"/topics/{name}/table", {"enabled": True})
        assert status == 403 and "internal" in body["message"], body
        status, body = http(broker, "POST", "/topics", {"name": name, "partitions": 2})
        assert status == 400 and "internal" in body["message"], body
    for name in INTERNAL:  # described, unchanged
        status, detail = http(broker, "GET", f"/topics/{name}")
        assert status == 200 and detail["internal"] is True
        assert len(detail["partitions"]) == PARTITIONS[name]
        assert detail["table_topic"] is False
        assert detail["overrides"].get("cleanup.policy") == "compact"


def test_broker_restarts_with_offsets_intact(broker: Broker, committed: str) -> None:
    broker.restart()
    consumer = confluent_consumer(broker.bootstrap, **{"group.id": GROUP})
    try:
        got = consumer.committed([ck.TopicPartition(committed, 0)], timeout=T)
    finally:
        consumer.close()
    assert got[0].offset == 2
    md = admin(broker.bootstrap).list_topics(timeout=T)
    assert {name: len(md.topics[name].partitions) for name in INTERNAL} == PARTITIONS
