"""Talking to Floe's Schema Registry from tests: a raw JSON client (status + body,
never raising on 4xx) and a dynamically built protobuf message class, so no generated
``_pb2`` module has to be vendored."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


def call(
    base: str,
    method: str,
    path: str,
    body: object = None,
    *,
    raw: bytes | None = None,
    content_type: str = CONTENT_TYPE,
) -> tuple[int, Any]:
    """One request; returns (HTTP status, decoded JSON body or text)."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        base + path, data=data, method=method, headers={"Content-Type": content_type}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            status, payload = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, payload = exc.code, exc.read()
    try:
        return status, json.loads(payload)
    except ValueError:
        return status, payload.decode()


def avro_record(name: str, *fields: dict[str, object]) -> str:
    return json.dumps({"type": "record", "name": name, "fields": list(fields)})


def protobuf_classes() -> tuple[type[Any], type[Any]]:
    """``shop.Order`` (importing ``common/money.proto`` and the well-known Timestamp)
    and ``common.Money``, built from descriptors at run time."""
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    money = descriptor_pb2.FileDescriptorProto(
        name="common/money.proto", package="common", syntax="proto3"
    )
    m = money.message_type.add(name="Money")
    m.field.add(name="units", number=1, type=3, label=1)  # int64
    m.field.add(name="currency", number=2, type=9, label=1)  # string
    pool.Add(money)
    order = descriptor_pb2.FileDescriptorProto(
        name="shop/order.proto",
        package="shop",
        syntax="proto3",
        dependency=["common/money.proto", "google/protobuf/timestamp.proto"],
    )
    o = order.message_type.add(name="Order")
    o.field.add(name="id", number=1, type=9, label=1)
    o.field.add(name="total", number=2, type=11, label=1, type_name=".common.Money")
    o.field.add(name="at", number=3, type=11, label=1, type_name=".google.protobuf.Timestamp")
    o.field.add(name="tags", number=4, type=9, label=3)
    pool.Add(order)
    return (
        message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order")),
        message_factory.GetMessageClass(pool.FindMessageTypeByName("common.Money")),
    )
