"""Admin shortcuts through confluent-kafka's AdminClient (topics named uniquely per test)."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping

from confluent_kafka import TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from helpers.clients import confluent_consumer

ADMIN_TIMEOUT_S = 30.0


def unique_topic(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@functools.cache
def admin(bootstrap: str) -> AdminClient:
    """One AdminClient per broker address, kept alive: librdkafka fails the pending
    futures of a client that is garbage-collected (``_DESTROY``)."""
    return AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})


def create_topic(
    bootstrap: str,
    name: str | None = None,
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
) -> str:
    """Create a topic and wait for the broker's answer; returns its name."""
    name = name or unique_topic()
    futures = admin(bootstrap).create_topics(
        [NewTopic(name, partitions, 1, config=dict(config or {}))],
        operation_timeout=ADMIN_TIMEOUT_S,
        request_timeout=ADMIN_TIMEOUT_S,
    )
    futures[name].result(ADMIN_TIMEOUT_S)
    return name


TABLE_TOPIC_STRING = {
    "table.topic.enable": "true",
    "table.topic.commit.interval.ms": "1000",
    "table.topic.convert.value.type": "string",
}
"""A table topic committing every second, its values strings."""
TABLE_TOPIC_FLATTEN = {
    **TABLE_TOPIC_STRING,
    "table.topic.convert.value.type": "by_schema_id",
    "table.topic.transform.value.type": "flatten",
}
"""A table topic committing every second, its registry-encoded values as columns."""


def create_table_topic(
    bootstrap: str,
    name: str,
    partitions: int,
    configs: Mapping[str, str] | None = None,
    *,
    flatten: bool = False,
) -> str:
    """Create a table topic (:data:`TABLE_TOPIC_STRING`, or with ``flatten``
    :data:`TABLE_TOPIC_FLATTEN`) with ``configs`` on top; returns its name."""
    base = TABLE_TOPIC_FLATTEN if flatten else TABLE_TOPIC_STRING
    return create_topic(bootstrap, name, partitions, {**base, **(configs or {})})


def set_topic_config(bootstrap: str, topic: str, name: str, value: str) -> None:
    """IncrementalAlterConfigs SET of one topic config, waiting for the answer.

    Raises:
        KafkaException: the broker refused it (its message says why).
    """
    entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    admin(bootstrap).incremental_alter_configs([res])[res].result(ADMIN_TIMEOUT_S)


def watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """(log start offset, high watermark) per partition, asked of the broker."""
    consumer = confluent_consumer(bootstrap)
    try:
        return {
            p: consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=ADMIN_TIMEOUT_S, cached=False
            )
            for p in range(partitions)
        }
    finally:
        consumer.close()
