"""confluent-kafka's Schema Registry client and its Avro, JSON Schema and Protobuf
serializers against Floe: records produced to and consumed from Floe's broker, schemas
registered and resolved through Floe's registry (auto-register and use.latest.version).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from helpers.admin import create_topic
from helpers.broker import Broker
from helpers.clients import confluent_consume, confluent_produce
from helpers.records import Record
from helpers.registry import avro_record, call, protobuf_classes


def round_trip(
    broker: Broker,
    serialize: Callable[[object, SerializationContext], bytes | None],
    deserialize: Callable[[bytes | None, SerializationContext], object],
    values: list[object],
) -> tuple[str, list[object]]:
    """Serialize ``values``, produce, consume, deserialize; returns (topic, values)."""
    topic = create_topic(broker.bootstrap)
    ctx = SerializationContext(topic, MessageField.VALUE)
    records = [Record(None, serialize(v, ctx), partition=0) for v in values]
    confluent_produce(broker.bootstrap, topic, records)
    got = confluent_consume(broker.bootstrap, topic, {0: len(values)})
    return topic, [deserialize(r.value, ctx) for r in got]


@pytest.fixture
def client(broker: Broker) -> Iterator[SchemaRegistryClient]:
    with SchemaRegistryClient({"url": broker.registry_url}) as c:
        yield c


def test_avro_auto_register_then_evolve(broker: Broker, client: SchemaRegistryClient) -> None:
    v1 = avro_record("User", {"name": "name", "type": "string"})
    values: list[object] = [{"name": "ada"}, {"name": "bob"}]
    topic, got = round_trip(broker, AvroSerializer(client, v1), AvroDeserializer(client), values)
    assert got == values
    subject = f"{topic}-value"
    latest = client.get_latest_version(subject)
    assert latest.version == 1 and latest.schema.schema_type == "AVRO"
    v2 = avro_record(
        "User", {"name": "name", "type": "string"}, {"name": "age", "type": "int", "default": 0}
    )
    ctx = SerializationContext(topic, MessageField.VALUE)
    data = AvroSerializer(client, v2)({"name": "cy", "age": 3}, ctx)
    assert client.get_version(subject, 2).schema_id == int.from_bytes(data[1:5], "big")
    # A reader on v1 reads v2 data (the registry resolves the writer schema by id).
    assert AvroDeserializer(client, v1)(data, ctx) == {"name": "cy"}
    breaking = avro_record("User", {"name": "name", "type": "int"})
    with pytest.raises(Exception, match="incompatible"):
        AvroSerializer(client, breaking)({"name": 1}, ctx)


def test_avro_use_latest_version(broker: Broker, client: SchemaRegistryClient) -> None:
    topic = create_topic(broker.bootstrap)
    schema = avro_record("Event", {"name": "n", "type": "long"})
    registered = client.register_schema(f"{topic}-value", Schema(schema, "AVRO"))
    serializer = AvroSerializer(
        client, conf={"auto.register.schemas": False, "use.latest.version": True}
    )
    ctx = SerializationContext(topic, MessageField.VALUE)
    data = serializer({"n": 7}, ctx)
    assert data is not None and int.from_bytes(data[1:5], "big") == registered
    assert AvroDeserializer(client)(data, ctx) == {"n": 7}


JSON_SCHEMA = """{
  "$schema": "http://json-schema.org/draft-07/schema#",
  "title": "Reading", "type": "object",
  "properties": {"sensor": {"type": "string"}, "value": {"type": "number"}},
  "required": ["sensor"]
}"""


def test_json_schema_auto_register_and_latest(broker: Broker, client: SchemaRegistryClient) -> None:
    values: list[object] = [{"sensor": "a", "value": 1.5}, {"sensor": "b"}]
    topic, got = round_trip(
        broker,
        JSONSerializer(JSON_SCHEMA, client),
        JSONDeserializer(JSON_SCHEMA, schema_registry_client=client),
        values,
    )
    assert got == values
    latest = client.get_latest_version(f"{topic}-value")
    assert latest.schema.schema_type == "JSON"
    serializer = JSONSerializer(
        JSON_SCHEMA, client, conf={"auto.register.schemas": False, "use.latest.version": True}
    )
    ctx = SerializationContext(topic, MessageField.VALUE)
    data = serializer({"sensor": "c"}, ctx)
    assert data is not None and int.from_bytes(data[1:5], "big") == latest.schema_id
    with pytest.raises(Exception, match="required"):
        serializer({"value": 1}, ctx)  # the serializer validates against the schema


def test_json_schema_reference_across_subjects(client: SchemaRegistryClient) -> None:
    unit = '{"type": "string", "enum": ["C", "F"]}'
    client.register_schema("floe-unit", Schema(unit, "JSON"))
    main = '{"type": "object", "properties": {"unit": {"$ref": "unit.json"}}}'
    ref = {"name": "unit.json", "subject": "floe-unit", "version": 1}
    from confluent_kafka.schema_registry import SchemaReference

    schema_id = client.register_schema("floe-temp", Schema(main, "JSON", [SchemaReference(**ref)]))
    fetched = client.get_schema(schema_id)
    assert [r.name for r in fetched.references] == ["unit.json"]


def test_protobuf_auto_register_with_imports(broker: Broker, client: SchemaRegistryClient) -> None:
    order_cls, money_cls = protobuf_classes()
    order: Any = order_cls(id="o-1", total=money_cls(units=5, currency="EUR"), tags=["x"])
    order.at.seconds = 1_700_000_000
    topic, got = round_trip(
        broker,
        ProtobufSerializer(order_cls, client),
        ProtobufDeserializer(order_cls),
        [order],
    )
    assert got == [order]
    latest = client.get_latest_version(f"{topic}-value")
    assert latest.schema.schema_type == "PROTOBUF"
    assert [r.subject for r in latest.schema.references] == ["common/money.proto"]
    assert 'import "google/protobuf/timestamp.proto";' in latest.schema.schema_str
    status, body = call(
        broker.registry_url, "GET", f"/schemas/ids/{latest.schema_id}?format=serialized"
    )
    assert status == 200 and "{" not in body["schema"]
    # A fresh client: this one cached the latest version in text form, and the client
    # caches "latest" per subject whatever the format asked.
    with SchemaRegistryClient({"url": broker.registry_url}) as fresh:
        serializer = ProtobufSerializer(
            order_cls, fresh, conf={"auto.register.schemas": False, "use.latest.version": True}
        )
        ctx = SerializationContext(topic, MessageField.VALUE)
        data = serializer(order, ctx)
    assert data is not None and int.from_bytes(data[1:5], "big") == latest.schema_id
    assert ProtobufDeserializer(order_cls)(data, ctx) == order
