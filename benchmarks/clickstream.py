"""The clickstream event the benchmarks use, and its schema in each value format.

One event (:func:`click`, about 150 bytes of Avro): three strings, a nullable string, an
enum, one more string and an event time. The same event as Avro (:data:`CLICKSTREAM`),
JSON Schema (:data:`CLICKSTREAM_JSON_SCHEMA`, time as epoch milliseconds) and Protobuf
(:data:`CLICKSTREAM_PROTO`, time as a ``google.protobuf.Timestamp``, the nullable string
as proto3 ``optional``), and each format's encoder of a body without the wire-format
header.
"""

from __future__ import annotations

import io
import json
import random
from collections.abc import Callable
from typing import Any

AVRO, JSON, PROTOBUF, STRING = "avro", "json", "protobuf", "string"

CLICKSTREAM: dict[str, Any] = {
    "type": "record",
    "name": "Click",
    "namespace": "floe.demo",
    "fields": [
        {"name": "user_id", "type": "string"},
        {"name": "session_id", "type": "string"},
        {"name": "page", "type": "string"},
        {"name": "referrer", "type": ["null", "string"], "default": None},
        {
            "name": "event_type",
            "type": {
                "type": "enum",
                "name": "Ev",
                "symbols": ["view", "click", "scroll", "purchase"],
            },
        },
        {"name": "device", "type": "string"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
"""The clickstream event as an Avro schema."""

CLICKSTREAM_JSON_SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Click",
    "type": "object",
    "properties": {
        "user_id": {"type": "string"},
        "session_id": {"type": "string"},
        "page": {"type": "string"},
        "referrer": {"type": ["string", "null"]},
        "event_type": {"type": "string", "enum": ["view", "click", "scroll", "purchase"]},
        "device": {"type": "string"},
        "ts": {"type": "integer"},
    },
    "required": ["user_id", "session_id", "page", "event_type", "device", "ts"],
    "additionalProperties": False,
}
"""The clickstream event as a JSON Schema (``ts``: epoch milliseconds)."""

CLICKSTREAM_PROTO = """
syntax = "proto3";
package floe.demo;
import "google/protobuf/timestamp.proto";
message Click {
  enum Ev { view = 0; click = 1; scroll = 2; purchase = 3; }
  string user_id = 1;
  string session_id = 2;
  string page = 3;
  optional string referrer = 4;
  Ev event_type = 5;
  string device = 6;
  google.protobuf.Timestamp ts = 7;
}
"""
"""The clickstream event as a Protobuf schema (``floe.demo.Click``)."""

_EVENTS = ["view", "click", "scroll", "purchase"]


def click(rng: random.Random, i: int, base_ms: int) -> dict[str, Any]:
    """Event ``i`` (its time ``base_ms + i`` epoch milliseconds)."""
    return {
        "user_id": f"user-{rng.randrange(100_000):08d}-{rng.randrange(10**6):06d}",
        "session_id": f"{rng.getrandbits(128):032x}",
        "page": f"/products/c-{rng.randrange(50)}/item-{rng.randrange(10_000)}/details",
        "referrer": rng.choice([None, "https://www.example.com/search?q=shoes"]),
        "event_type": rng.choice(_EVENTS),
        "device": rng.choice(
            ["mobile-ios-17-iphone15", "mobile-android-14-pixel8", "desktop-chrome-126"]
        ),
        "ts": base_ms + i,
    }


def json_text(value: dict[str, Any]) -> bytes:
    """An event as compact JSON (what the JSON serializer is told to write, too)."""
    return json.dumps(value, separators=(",", ":")).encode()


def protobuf_class() -> Any:
    """The generated message class of ``floe.demo.Click``, in protobuf's default pool
    (where confluent-kafka's ProtobufSerializer looks up its file)."""
    from google.protobuf import (
        descriptor_pb2,
        descriptor_pool,
        message_factory,
        timestamp_pb2,  # noqa: F401  (its file is in the pool)
    )

    from floe.registry.core.protobuf import ProtobufSchema

    pool = descriptor_pool.Default()
    try:
        desc = pool.FindMessageTypeByName("floe.demo.Click")
    except KeyError:
        fdp = descriptor_pb2.FileDescriptorProto()
        fdp.CopyFrom(ProtobufSchema(CLICKSTREAM_PROTO).descriptor)
        fdp.name = "floe/demo/click.proto"
        pool.Add(fdp)
        desc = pool.FindMessageTypeByName("floe.demo.Click")
    return message_factory.GetMessageClass(desc)


def encoder(fmt: str) -> Callable[[dict[str, Any]], bytes]:
    """The body encoder of ``fmt`` (no wire-format header; string mode: JSON text)."""
    if fmt in (JSON, STRING):
        return json_text
    if fmt == PROTOBUF:
        cls = protobuf_class()

        def protobuf(value: dict[str, Any]) -> bytes:
            fields = {k: v for k, v in value.items() if k not in ("ts", "event_type")}
            msg = cls(**{k: v for k, v in fields.items() if v is not None})
            msg.event_type = _EVENTS.index(value["event_type"])
            msg.ts.FromMilliseconds(value["ts"])
            return bytes(msg.SerializeToString())

        return protobuf
    import fastavro

    parsed = fastavro.parse_schema(CLICKSTREAM)

    def avro(value: dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, value)
        return buf.getvalue()

    return avro
