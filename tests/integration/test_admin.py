"""Topic administration through confluent-kafka's AdminClient (and kafka-python's for
DescribeLogDirs, which confluent-kafka 2.16 does not expose)."""

from __future__ import annotations

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from helpers.admin import ADMIN_TIMEOUT_S, admin, create_topic, unique_topic, watermarks
from helpers.broker import Broker
from helpers.clients import confluent_consume, confluent_produce
from helpers.records import Record, recent_ts, sample_records

T = ADMIN_TIMEOUT_S


def error_code(exc_info: pytest.ExceptionInfo[ck.KafkaException]) -> int:
    return int(exc_info.value.args[0].code())


def topic_configs(bootstrap: str, topic: str) -> dict[str, ConfigEntry]:
    res = ConfigResource(ResourceType.TOPIC, topic)
    result: dict[str, ConfigEntry] = admin(bootstrap).describe_configs([res])[res].result(T)
    return result


def describe(bootstrap: str, topic: str) -> object:
    return (
        admin(bootstrap)
        .describe_topics(ck.TopicCollection([topic]), request_timeout=T)[topic]
        .result(T)
    )


# ------------------------------------------------------------------------------ CreateTopics


def test_create_topic_with_configs(broker: Broker) -> None:
    topic = create_topic(
        broker.bootstrap,
        partitions=3,
        config={
            "retention.ms": "123456",
            "cleanup.policy": "compact",
            "table.topic.enable": "true",
        },
    )
    desc = describe(broker.bootstrap, topic)
    assert [p.id for p in desc.partitions] == [0, 1, 2]
    assert all(p.leader.id == 1 and [r.id for r in p.replicas] == [1] for p in desc.partitions)
    configs = topic_configs(broker.bootstrap, topic)
    assert configs["retention.ms"].value == "123456"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "compact"
    assert configs["table.topic.enable"].value == "true"
    assert configs["table.topic.enable"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    # the table-topic keys it does not set are described with their defaults
    assert configs["table.topic.commit.interval.ms"].value == "60000"
    assert configs["table.topic.commit.interval.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["table.topic.namespace"].value == "default"  # the broker's default
    assert configs["table.topic.errors.tolerance"].value == "invalid_data"
    assert "automq.table.topic.enable" not in configs  # one spelling per key
    assert configs["segment.bytes"].value == "1073741824"
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["segment.bytes"].is_default


def test_create_validate_only_creates_nothing(broker: Broker) -> None:
    topic = unique_topic()
    futures = admin(broker.bootstrap).create_topics(
        [NewTopic(topic, 2, 1, config={"retention.ms": "1000"})],
        validate_only=True,
        operation_timeout=T,
        request_timeout=T,
    )
    futures[topic].result(T)
    md = admin(broker.bootstrap).list_topics(timeout=T)
    assert topic not in md.topics or md.topics[topic].error is not None
    # ... and validation still rejects what a real create would reject.
    futures = admin(broker.bootstrap).create_topics(
        [NewTopic(topic, 2, 1, config={"no.such.config": "1"})],
        validate_only=True,
        request_timeout=T,
    )
    with pytest.raises(ck.KafkaException) as info:
        futures[topic].result(T)
    assert error_code(info) == ck.KafkaError.INVALID_CONFIG


@pytest.mark.parametrize(
    "config", [{"no.such.config": "1"}, {"retention.ms": "soon"}, {"cleanup.policy": "shred"}]
)
def test_create_with_invalid_config(broker: Broker, config: dict[str, str]) -> None:
    topic = unique_topic()
    futures = admin(broker.bootstrap).create_topics(
        [NewTopic(topic, 1, 1, config=config)], request_timeout=T
    )
    with pytest.raises(ck.KafkaException) as info:
        futures[topic].result(T)
    assert error_code(info) == ck.KafkaError.INVALID_CONFIG


def test_create_existing_topic(broker: Broker) -> None:
    topic = create_topic(broker.bootstrap)
    with pytest.raises(ck.KafkaException) as info:
        create_topic(broker.bootstrap, topic, partitions=2)
    assert error_code(info) == ck.KafkaError.TOPIC_ALREADY_EXISTS
    assert len(describe(broker.bootstrap, topic).partitions) == 1


@pytest.mark.parametrize("name", ["bad name", "..", "x" * 250, "slash/y", "star*"])
def test_create_with_invalid_name(broker: Broker, name: str) -> None:
    with pytest.raises(ck.KafkaException) as info:
        create_topic(broker.bootstrap, name)
    assert error_code(info) == ck.KafkaError.TOPIC_EXCEPTION  # Kafka INVALID_TOPIC_EXCEPTION (17)


# ------------------------------------------------------------------------------ Describe


def test_describe_cluster(broker: Broker) -> None:
    cluster = admin(broker.bootstrap).describe_cluster(request_timeout=T).result(T)
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(1, "127.0.0.1", broker.port)]
    assert cluster.controller.id == 1
    assert cluster.cluster_id


def test_describe_topics_unknown(broker: Broker) -> None:
    name = unique_topic("absent")
    with pytest.raises(ck.KafkaException) as info:
        describe(broker.bootstrap, name)
    assert error_code(info) == ck.KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_broker_configs(broker: Broker) -> None:
    res = ConfigResource(ResourceType.BROKER, "1")
    configs = admin(broker.bootstrap).describe_configs([res])[res].result(T)
    assert configs["auto.create.topics.enable"].value == "false"
    assert configs["log.segment.bytes"].value == "1073741824"


# ------------------------------------------------------------------------------ Alter configs


# AlterConfigs (the non-incremental API) is what this test is about; confluent-kafka
# deprecates its wrapper in favour of IncrementalAlterConfigs, which is tested below.
@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_alter_configs_replaces_all_overrides(broker: Broker) -> None:
    topic = create_topic(
        broker.bootstrap, config={"retention.ms": "123456", "cleanup.policy": "compact"}
    )
    res = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "999"})
    admin(broker.bootstrap).alter_configs([res])[res].result(T)
    configs = topic_configs(broker.bootstrap, topic)
    assert configs["retention.ms"].value == "999"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    # AlterConfigs is not incremental: the override it did not name is gone.
    assert configs["cleanup.policy"].value == "delete"
    assert configs["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value

    bad = ConfigResource(ResourceType.TOPIC, topic, set_config={"no.such.config": "1"})
    with pytest.raises(ck.KafkaException) as info:
        admin(broker.bootstrap).alter_configs([bad])[bad].result(T)
    assert error_code(info) == ck.KafkaError.INVALID_CONFIG
    assert topic_configs(broker.bootstrap, topic)["retention.ms"].value == "999"


def test_incremental_alter_configs(broker: Broker) -> None:
    topic = create_topic(
        broker.bootstrap, config={"retention.ms": "123456", "max.message.bytes": "5000"}
    )
    res = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "777", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry(
                "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND
            ),
        ],
    )
    admin(broker.bootstrap).incremental_alter_configs([res])[res].result(T)
    configs = topic_configs(broker.bootstrap, topic)
    assert configs["retention.ms"].value == "777"
    assert configs["max.message.bytes"].value == "1048588"
    assert configs["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert set(configs["cleanup.policy"].value.split(",")) == {"delete", "compact"}

    bad = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "-7", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(ck.KafkaException) as info:
        admin(broker.bootstrap).incremental_alter_configs([bad])[bad].result(T)
    assert error_code(info) == ck.KafkaError.INVALID_CONFIG
    assert topic_configs(broker.bootstrap, topic)["retention.ms"].value == "777"


def test_altered_max_message_bytes_takes_effect(broker: Broker) -> None:
    topic = create_topic(broker.bootstrap)
    res = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin(broker.bootstrap).incremental_alter_configs([res])[res].result(T)
    with pytest.raises(ck.KafkaException) as info:
        confluent_produce(broker.bootstrap, topic, [Record(b"k", b"x" * 5000, partition=0)])
    assert error_code(info) == ck.KafkaError.MSG_SIZE_TOO_LARGE


# ------------------------------------------------------------------------------ Partitions


def test_create_partitions(broker: Broker) -> None:
    topic = create_topic(broker.bootstrap, partitions=2)
    a = admin(broker.bootstrap)
    a.create_partitions([NewPartitions(topic, 5)], request_timeout=T)[topic].result(T)
    assert [p.id for p in describe(broker.bootstrap, topic).partitions] == [0, 1, 2, 3, 4]
    acked = confluent_produce(broker.bootstrap, topic, [Record(b"k", b"v", partition=4)])
    assert (acked[0].partition, acked[0].offset) == (4, 0)

    for count in (5, 3):
        with pytest.raises(ck.KafkaException) as info:
            a.create_partitions([NewPartitions(topic, count)], request_timeout=T)[topic].result(T)
        assert error_code(info) == ck.KafkaError.INVALID_PARTITIONS
    assert len(describe(broker.bootstrap, topic).partitions) == 5


# ------------------------------------------------------------------------------ Delete


def test_delete_topics(broker: Broker) -> None:
    topic = create_topic(broker.bootstrap)
    confluent_produce(broker.bootstrap, topic, sample_records(5))
    a = admin(broker.bootstrap)
    a.delete_topics([topic], operation_timeout=T, request_timeout=T)[topic].result(T)
    with pytest.raises(ck.KafkaException) as info:
        describe(broker.bootstrap, topic)
    assert error_code(info) == ck.KafkaError.UNKNOWN_TOPIC_OR_PART
    with pytest.raises(ck.KafkaException) as info:
        a.delete_topics([topic], request_timeout=T)[topic].result(T)
    assert error_code(info) == ck.KafkaError.UNKNOWN_TOPIC_OR_PART
    # The name is free again, and the new topic starts empty.
    create_topic(broker.bootstrap, topic)
    assert watermarks(broker.bootstrap, topic, 1) == {0: (0, 0)}


def test_delete_records_moves_log_start(broker: Broker) -> None:
    topic = create_topic(broker.bootstrap, partitions=2)
    records = sample_records(50)
    confluent_produce(broker.bootstrap, topic, records)
    a = admin(broker.bootstrap)
    tp = ck.TopicPartition(topic, 0, 30)
    deleted = a.delete_records([tp], request_timeout=T)[tp].result(T)
    assert deleted.low_watermark == 30
    assert watermarks(broker.bootstrap, topic, 2) == {0: (30, 50), 1: (0, 0)}
    earliest = a.list_offsets(
        {ck.TopicPartition(topic, 0): OffsetSpec.earliest()}, request_timeout=T
    )
    assert next(iter(earliest.values())).result(T).offset == 30
    # A consumer starting below the log start is reset to it.
    got = confluent_consume(broker.bootstrap, topic, {0: 50}, {0: 0})
    assert [r.offset for r in got] == list(range(30, 50))
    assert [r.value for r in got] == [r.value for r in records[30:]]

    beyond = ck.TopicPartition(topic, 0, 51)
    with pytest.raises(ck.KafkaException) as info:
        a.delete_records([beyond], request_timeout=T)[beyond].result(T)
    assert error_code(info) == ck.KafkaError.OFFSET_OUT_OF_RANGE


def test_list_offsets(broker: Broker) -> None:
    topic = create_topic(broker.bootstrap)
    base = recent_ts()
    stamps = [5_000, 9_000, 3_000, 7_000]
    confluent_produce(
        broker.bootstrap,
        topic,
        [Record(b"k", b"v%d" % i, timestamp=base + ts, partition=0) for i, ts in enumerate(stamps)],
    )
    a = admin(broker.bootstrap)

    def offset_of(spec: OffsetSpec) -> tuple[int, int]:
        tp = ck.TopicPartition(topic, 0)
        info = a.list_offsets({tp: spec}, request_timeout=T)[tp].result(T)
        return int(info.offset), int(info.timestamp)

    assert offset_of(OffsetSpec.earliest())[0] == 0
    assert offset_of(OffsetSpec.latest())[0] == 4
    assert offset_of(OffsetSpec.max_timestamp()) == (1, base + 9_000)
    assert offset_of(OffsetSpec.for_timestamp(base + 6_000)) == (1, base + 9_000)
    assert offset_of(OffsetSpec.for_timestamp(base))[0] == 0
    assert offset_of(OffsetSpec.for_timestamp(base + 10_000))[0] == -1


def test_describe_log_dirs(broker: Broker) -> None:
    from kafka.admin import KafkaAdminClient

    topic = create_topic(broker.bootstrap, partitions=2)
    confluent_produce(broker.bootstrap, topic, sample_records(30))
    ka = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        result = ka.describe_log_dirs()
    finally:
        ka.close()
    assert [r["broker"] for r in result] == [1], result
    sizes = {}
    for log_dir in result[0]["log_dirs"]:
        assert log_dir["error_code"] == 0, log_dir
        for t in log_dir["topics"]:
            if t["name"] == topic:
                sizes.update({p["partition_index"]: p["partition_size"] for p in t["partitions"]})
    assert set(sizes) == {0, 1}, result
    assert sizes[0] > 0
    assert sizes[1] == 0


KAFKA_TOPIC_DEFAULTS = {
    "cleanup.policy": "delete",
    "retention.ms": "604800000",
    "retention.bytes": "-1",
    "segment.bytes": "1073741824",
    "segment.ms": "604800000",
    "max.message.bytes": "1048588",
    "message.timestamp.type": "CreateTime",
    "index.interval.bytes": "4096",
    "delete.retention.ms": "86400000",
    "min.compaction.lag.ms": "0",
    "min.insync.replicas": "1",
}


def test_topic_defaults_match_kafka(broker: Broker) -> None:
    """Clients and tools read these defaults: they match Apache Kafka's."""
    topic = create_topic(broker.bootstrap)
    configs = topic_configs(broker.bootstrap, topic)
    seen = {k: configs[k].value for k in KAFKA_TOPIC_DEFAULTS if k in configs}
    assert seen == KAFKA_TOPIC_DEFAULTS
    assert all(configs[k].source == ConfigSource.DEFAULT_CONFIG.value for k in KAFKA_TOPIC_DEFAULTS)
