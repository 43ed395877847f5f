"""Protobuf -> Iceberg/Arrow, with schemas built from descriptors at test time."""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any

import pytest
from convert_helpers import PARTITION, converter, only_value, records
from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    message_factory,
    timestamp_pb2,
    wrappers_pb2,
)

from floe.registry.core.protobuf import ProtobufSchema
from floe.tabletopic.convert import UnsupportedSchemaError
from floe.tabletopic.convert.protobuf import ProtobufCodec
from floe.tabletopic.convert.wire import frame

F = descriptor_pb2.FieldDescriptorProto
SCALARS = [
    ("d", F.TYPE_DOUBLE),
    ("f", F.TYPE_FLOAT),
    ("i32", F.TYPE_INT32),
    ("s32", F.TYPE_SINT32),
    ("sf32", F.TYPE_SFIXED32),
    ("i64", F.TYPE_INT64),
    ("s64", F.TYPE_SINT64),
    ("sf64", F.TYPE_SFIXED64),
    ("u32", F.TYPE_UINT32),
    ("fx32", F.TYPE_FIXED32),
    ("u64", F.TYPE_UINT64),
    ("fx64", F.TYPE_FIXED64),
    ("b", F.TYPE_BOOL),
    ("s", F.TYPE_STRING),
    ("by", F.TYPE_BYTES),
]


def file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """package t: enum Color; message Inner {x}; message Outer {every type}; message
    Other {nested Deep}."""
    fdp = descriptor_pb2.FileDescriptorProto(name="t.proto", package="t", syntax="proto3")
    fdp.dependency.extend(["google/protobuf/timestamp.proto", "google/protobuf/wrappers.proto"])
    color = fdp.enum_type.add(name="Color")
    color.value.add(name="RED", number=0)
    color.value.add(name="BLUE", number=1)
    inner = fdp.message_type.add(name="Inner")
    inner.field.add(name="x", number=1, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    outer = fdp.message_type.add(name="Outer")
    n = 0
    for n, (name, kind) in enumerate(SCALARS, start=1):
        outer.field.add(name=name, number=n, type=kind, label=F.LABEL_OPTIONAL)

    def add(name: str, kind: int, type_name: str = "", *, repeated: bool = False) -> Any:
        nonlocal n
        n += 1
        label = F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL
        field = outer.field.add(name=name, number=n, type=kind, label=label)
        if type_name:
            field.type_name = type_name
        return field

    add("color", F.TYPE_ENUM, ".t.Color")
    add("ts", F.TYPE_MESSAGE, ".google.protobuf.Timestamp")
    add("wrapped", F.TYPE_MESSAGE, ".google.protobuf.Int64Value")
    add("inner", F.TYPE_MESSAGE, ".t.Inner")
    add("inners", F.TYPE_MESSAGE, ".t.Inner", repeated=True)
    add("nums", F.TYPE_INT64, repeated=True)
    entry = outer.nested_type.add(name="MEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    entry.field.add(
        name="value", number=2, type=F.TYPE_MESSAGE, type_name=".t.Inner", label=F.LABEL_OPTIONAL
    )
    add("m", F.TYPE_MESSAGE, ".t.Outer.MEntry", repeated=True)
    presence = add("maybe", F.TYPE_STRING)
    presence.proto3_optional = True
    presence.oneof_index = 0
    outer.oneof_decl.add(name="_maybe")
    other = fdp.message_type.add(name="Other")
    deep = other.nested_type.add(name="Deep")
    deep.field.add(name="y", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    return fdp


def message_class(fdp: descriptor_pb2.FileDescriptorProto, name: str) -> Any:
    pool = descriptor_pool.DescriptorPool()
    for dep in (timestamp_pb2, wrappers_pb2):
        pool.AddSerializedFile(dep.DESCRIPTOR.serialized_pb)
    pool.AddSerializedFile(fdp.SerializeToString())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


@pytest.fixture(scope="module")
def registered() -> ProtobufSchema:
    return ProtobufSchema(base64.b64encode(file_descriptor().SerializeToString()).decode())


def test_every_type_roundtrips(registered: ProtobufSchema) -> None:
    outer_cls = message_class(file_descriptor(), "t.Outer")
    msg = outer_cls(
        d=1.5, f=0.5, i32=-(2**31), s32=-3, sf32=7, i64=-(2**63), s64=-5, sf64=6,
        u32=2**32 - 1, fx32=9, u64=2**63 - 1, fx64=11, b=True, s="é", by=b"\x00",
        color=1, nums=[1, 2], maybe="here",
    )  # fmt: skip
    msg.ts.seconds, msg.ts.nanos = 1_700_000_000, 123_456_789
    msg.wrapped.value = 42
    msg.inner.x = 3
    msg.inners.add(x=4)
    msg.m["k"].x = 5
    conv = converter(registered, message="t.Outer")
    body = frame(1, msg.SerializeToString(), (1,))
    out = only_value(conv.convert(PARTITION, records(body)))
    assert out == {
        "d": 1.5, "f": 0.5, "i32": -(2**31), "s32": -3, "sf32": 7, "i64": -(2**63),
        "s64": -5, "sf64": 6, "u32": 2**32 - 1, "fx32": 9, "u64": 2**63 - 1, "fx64": 11,
        "b": True, "s": "é", "by": b"\x00", "color": "BLUE",
        "ts": dt.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=dt.UTC),
        "wrapped": 42, "inner": {"x": 3}, "inners": [{"x": 4}], "nums": [1, 2],
        "m": [("k", {"x": 5})], "maybe": "here",
    }  # fmt: skip


def test_unset_fields_are_defaults_or_null(registered: ProtobufSchema) -> None:
    empty = message_class(file_descriptor(), "t.Outer")()
    out = only_value(
        converter(registered, message="t.Outer").convert(PARTITION, records(frame(1, b"", (1,))))
    )
    assert out["i32"] == 0 and out["s"] == "" and out["color"] == "RED"
    assert out["ts"] is None and out["wrapped"] is None and out["inner"] is None
    assert out["maybe"] is None and out["nums"] == [] and out["m"] == []
    assert empty.SerializeToString() == b""


def test_message_index_paths_pick_the_message(registered: ProtobufSchema) -> None:
    inner_cls = message_class(file_descriptor(), "t.Inner")
    deep_cls = message_class(file_descriptor(), "t.Other.Deep")
    # The table is Inner's (the first message; index [0] is framed as a single 0 byte).
    first = frame(1, inner_cls(x=9).SerializeToString(), (0,))
    deep = frame(1, deep_cls(y="z").SerializeToString(), (2, 0))
    codec_source = ProtobufCodec(registered, "t.Other.Deep").source
    assert [f.name for f in codec_source.fields] == ["y"]
    inner_conv = converter(registered)
    result = inner_conv.convert(PARTITION, records(first, deep, frame(1, b"", (7,))))
    assert result.batch.column("_kafka_value").to_pylist()[0] == {"x": 9}
    assert [e.offset for e in result.errors] == [2]
    assert "undefined" in result.errors[0].reason


def test_uint64_above_long_range_is_a_record_error(registered: ProtobufSchema) -> None:
    outer_cls = message_class(file_descriptor(), "t.Outer")
    conv = converter(registered, message="t.Outer")
    good = frame(1, outer_cls(u64=1).SerializeToString(), (1,))
    big = frame(1, outer_cls(u64=2**64 - 1).SerializeToString(), (1,))
    result = conv.convert(PARTITION, records(good, big))
    assert result.batch.num_rows == 1
    assert [e.offset for e in result.errors] == [1]


def test_recursive_messages_and_foreign_imports_are_refused() -> None:
    fdp = descriptor_pb2.FileDescriptorProto(name="r.proto", package="r", syntax="proto3")
    node = fdp.message_type.add(name="Node")
    node.field.add(name="next", number=1, type=F.TYPE_MESSAGE, type_name=".r.Node")
    schema = ProtobufSchema(base64.b64encode(fdp.SerializeToString()).decode())
    with pytest.raises(UnsupportedSchemaError, match=r"recursive message r\.Node"):
        ProtobufCodec(schema)
    with pytest.raises(UnsupportedSchemaError, match="no message"):
        ProtobufCodec(schema, "r.Missing")


def test_another_message_whose_fields_clash_with_the_table_never_fails_the_call() -> None:
    """A payload naming another message of the file, whose field ``inner`` is a list where
    the table has a struct, then one of the table's message: both convert. pyarrow picks
    how it reads a struct (a sequence of pairs, or a dict) from the first value, so values
    that fit one by one can fail together (found by the bulk differential test)."""
    fdp = descriptor_pb2.FileDescriptorProto(name="c.proto", package="c", syntax="proto3")
    inner = fdp.message_type.add(name="Inner")
    inner.field.add(name="x", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    main = fdp.message_type.add(name="Main")
    main.field.add(name="inner", number=1, type=F.TYPE_MESSAGE, type_name=".c.Inner")
    other = fdp.message_type.add(name="Other")
    other.field.add(
        name="inner", number=1, type=F.TYPE_MESSAGE, type_name=".c.Inner", label=F.LABEL_REPEATED
    )
    schema = ProtobufSchema(base64.b64encode(fdp.SerializeToString()).decode())
    main_cls = message_class(fdp, "c.Main")
    conv = converter(schema, message="c.Main")
    result = conv.convert(
        PARTITION,
        records(
            frame(1, b"", (2,)),  # an Other without items: inner = []
            frame(1, main_cls(inner={"x": "a"}).SerializeToString(), (1,)),
        ),
    )
    assert result.errors == ()
    assert result.batch.column("_kafka_value").to_pylist()[1] == {"inner": {"x": "a"}}
