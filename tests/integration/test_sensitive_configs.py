"""DescribeConfigs on the broker resource answers secrets as Kafka answers a password:
``is_sensitive`` true and a null value (confluent-kafka's AdminClient and kafka-python's),
for the declared keys marked sensitive (``catalog.uri``) and for passthrough keys
(``catalog.properties.*``, ``catalog.spark.*``, ``catalog.pyiceberg.*``, ``spark.*``)
whose name or value suggests a secret. No secret appears anywhere in the answer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import ConfigResource, ResourceType
from kafka.admin import ConfigResource as KafkaPythonResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from helpers.admin import ADMIN_TIMEOUT_S, admin
from helpers.broker import Broker

pytestmark = pytest.mark.timeout(120)

T = ADMIN_TIMEOUT_S
SECRETS = {
    "catalog.properties.s3.secret-access-key": "SECRET-1",
    "catalog.properties.jdbc.password": "SECRET-2",
    "catalog.spark.token": "SECRET-3",
    "catalog.pyiceberg.credential": "SECRET-4",
    "spark.hadoop.fs.s3a.access.key": "SECRET-5",
    "catalog.properties.s3.endpoint": "http://minio:SECRET-6@127.0.0.1:9000",
    "catalog.spark.header.Authorization": "Bearer SECRET-7",
}
PLAIN = {"spark.sql.shuffle.partitions": "3", "catalog.properties.s3.path-style-access": "true"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    data = tmp_path_factory.mktemp("sensitive") / "data"
    uri = f"jdbc:sqlite:{Path(data) / 'catalog' / 'iceberg.db'}?journal_mode=WAL&user=SECRET-0"
    b = Broker(data, {"auto.create.topics.enable": "false", "catalog.uri": uri, **SECRETS, **PLAIN})
    try:
        yield b.start()
        admin.cache_clear()
        b.stop()
    finally:
        b.close()


def test_confluent_describe_configs_hides_secrets(broker: Broker) -> None:
    res = ConfigResource(ResourceType.BROKER, "1")
    configs = admin(broker.bootstrap).describe_configs([res])[res].result(T)
    uri = configs["catalog.uri"]
    assert (uri.is_sensitive, uri.value) == (True, None)
    for name in SECRETS:
        entry = configs[name]
        assert (entry.is_sensitive, entry.value, entry.is_read_only) == (True, None, True), name
    for name, value in PLAIN.items():
        entry = configs[name]
        assert (entry.is_sensitive, entry.value) == (False, value), name
    assert configs["data.dir"].is_sensitive is False and configs["data.dir"].value
    assert "SECRET" not in repr([(e.name, e.value) for e in configs.values()])


def test_kafka_python_by_name_and_all(broker: Broker) -> None:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
    try:
        wanted = {"catalog.spark.token": None, "catalog.uri": None, "host": None}
        named = client.describe_configs(
            [KafkaPythonResource(ConfigResourceType.BROKER, "1", configs=wanted)],
            config_filter="all",
        )
        answers = client.describe_configs(
            [KafkaPythonResource(ConfigResourceType.BROKER, "1")], config_filter="all"
        )
    finally:
        client.close()
    by_name = named["broker"]["1"]
    assert set(by_name) == set(wanted), by_name
    assert by_name["catalog.spark.token"]["value"] is None
    assert by_name["catalog.uri"]["value"] is None
    assert by_name["host"]["value"] == "127.0.0.1"
    assert "SECRET" not in repr(answers)
    entries = answers["broker"]["1"]
    assert entries["catalog.properties.jdbc.password"]["value"] is None, entries
    assert entries["catalog.properties.jdbc.password"]["is_sensitive"] is True
    assert entries["spark.sql.shuffle.partitions"]["value"] == "3"
