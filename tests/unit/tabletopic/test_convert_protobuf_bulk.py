"""Protobuf values decoded in bulk (column by column) against the per-record path: the
same batch, the same errors.

A differential test generates proto3 files (every scalar type, enums, nested messages,
repeated fields, maps, Timestamps, wrappers, proto3 ``optional`` and ``oneof`` fields)
and payloads: valid messages (extreme integers, NaNs, unknown enum numbers, timestamps
beyond the Iceberg range, uint64 above 2^63-1), truncated or random bytes, another
message of the file, an undefined message-index path, an unknown schema id and bad
framing; and compares the converter with ``min_native_run=1`` (every run in bulk,
bisected down to single records) against ``min_native_run=None`` (per record, the
reference), with and without flatten, by schema id and by latest schema, with the table
made from the message or from a newer version of it with one more field.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from convert_helpers import (
    BULK_SETTINGS,
    bulk_and_reference,
    every_record_accounted,
    value_spec,
)
from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    message_factory,
    timestamp_pb2,
    wrappers_pb2,
)
from hypothesis import given
from hypothesis import strategies as st

from floe.protocol.records import Record
from floe.registry.core.protobuf import ProtobufSchema
from floe.tabletopic.convert import (
    ConversionResult,
    ConvertType,
    PartSpec,
    source_type,
    table_schema,
)
from floe.tabletopic.convert.converter import BulkProtobufDecoder
from floe.tabletopic.convert.wire import frame

F = descriptor_pb2.FieldDescriptorProto
KEY = PartSpec(ConvertType.STRING)
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=5)
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
SCALARS: dict[int, st.SearchStrategy[Any]] = {
    F.TYPE_DOUBLE: st.floats(),
    F.TYPE_FLOAT: st.floats(width=32),
    F.TYPE_INT32: I32,
    F.TYPE_SINT32: I32,
    F.TYPE_SFIXED32: I32,
    F.TYPE_INT64: I64,
    F.TYPE_SINT64: I64,
    F.TYPE_SFIXED64: I64,
    F.TYPE_UINT32: st.integers(0, 2**32 - 1),
    F.TYPE_FIXED32: st.integers(0, 2**32 - 1),
    F.TYPE_UINT64: st.integers(0, 2**64 - 1),
    F.TYPE_FIXED64: st.integers(0, 2**64 - 1),
    F.TYPE_BOOL: st.booleans(),
    F.TYPE_STRING: TEXT,
    F.TYPE_BYTES: st.binary(max_size=5),
}
WRAPPERS = {
    "Int64Value": I64,
    "UInt64Value": st.integers(0, 2**64 - 1),
    "StringValue": TEXT,
    "FloatValue": st.floats(width=32),
    "BoolValue": st.booleans(),
}
# Timestamp seconds around the edge of 64-bit microseconds (2^63 us ~ 9.2e12 s)
SECONDS = st.integers(-(2**40), 2**40) | st.sampled_from([9_223_372_036_854, -9_223_372_036_855])
NANOS = st.integers(0, 999_999_999) | st.sampled_from([-1, 2**31 - 1])
ENUM_NUMBERS = st.sampled_from([0, 1, 2, 7])  # 7: a number the enum does not define

Setter = Callable[[st.DrawFn, Any], None]


@dataclass
class Message:
    """A generated message type: its descriptor and how to fill an instance."""

    proto: descriptor_pb2.DescriptorProto
    full_name: str
    setters: list[Setter] = field(default_factory=list)

    def fill(self, draw: st.DrawFn, msg: Any) -> None:
        for setter in self.setters:
            if draw(st.booleans()):
                setter(draw, msg)


def _scalar_setter(name: str, values: st.SearchStrategy[Any]) -> Setter:
    return lambda draw, msg: setattr(msg, name, draw(values))


class Builder:
    """Generates one proto3 file: messages (nested up to depth 2) with random fields."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw
        self.fdp = descriptor_pb2.FileDescriptorProto(name="g.proto", package="g", syntax="proto3")
        self.fdp.dependency.extend(
            ["google/protobuf/timestamp.proto", "google/protobuf/wrappers.proto"]
        )
        color = self.fdp.enum_type.add(name="Color")
        for number, name in enumerate(["RED", "GREEN", "BLUE"]):
            color.value.add(name=name, number=number)

    def message(self, proto: descriptor_pb2.DescriptorProto, full_name: str, depth: int) -> Message:
        out = Message(proto, full_name)
        for i in range(self.draw(st.integers(1, 5))):
            self.add_field(out, f"f{i}", i + 1, depth)
        for f in proto.field:  # proto3 optional: synthetic oneofs come after the others
            if f.proto3_optional:
                f.oneof_index = len(proto.oneof_decl)
                proto.oneof_decl.add(name=f"_{f.name}")
        return out

    def add_field(self, out: Message, name: str, number: int, depth: int) -> None:
        draw, proto = self.draw, out.proto
        kinds = ["scalar", "enum", "timestamp", "wrapper", "repeated", "optional", "oneof"]
        if depth < 2:
            kinds += ["message", "repeated_message", "map"]
        kind = draw(st.sampled_from(kinds))

        def add(type_: int, type_name: str = "", *, repeated: bool = False) -> Any:
            label = F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL
            f = proto.field.add(name=name, number=number, type=type_, label=label)
            if type_name:
                f.type_name = type_name
            return f

        if kind in ("scalar", "optional", "repeated"):
            type_ = draw(st.sampled_from(sorted(SCALARS)))
            values = SCALARS[type_]
            f = add(type_, repeated=kind == "repeated")
            f.proto3_optional = kind == "optional"
            if kind == "repeated":
                out.setters.append(
                    lambda d, m: getattr(m, name).extend(d(st.lists(values, max_size=3)))
                )
            else:
                out.setters.append(_scalar_setter(name, values))
        elif kind == "enum":
            add(F.TYPE_ENUM, ".g.Color")
            out.setters.append(_scalar_setter(name, ENUM_NUMBERS))
        elif kind == "timestamp":
            add(F.TYPE_MESSAGE, ".google.protobuf.Timestamp")

            def set_time(d: st.DrawFn, m: Any) -> None:
                ts = getattr(m, name)
                ts.seconds, ts.nanos = d(SECONDS), d(NANOS)

            out.setters.append(set_time)
        elif kind == "wrapper":
            wrapper = draw(st.sampled_from(sorted(WRAPPERS)))
            add(F.TYPE_MESSAGE, f".google.protobuf.{wrapper}")
            values = WRAPPERS[wrapper]
            out.setters.append(lambda d, m: setattr(getattr(m, name), "value", d(values)))
        elif kind == "oneof":
            index = len(proto.oneof_decl)
            proto.oneof_decl.add(name=f"{name}_choice")
            members = []
            for j, type_ in enumerate(draw(st.permutations(sorted(SCALARS)))[:2]):
                member = f"{name}_{j}"
                f = proto.field.add(
                    name=member, number=100 + number * 2 + j, type=type_, label=F.LABEL_OPTIONAL
                )
                f.oneof_index = index
                members.append(_scalar_setter(member, SCALARS[type_]))
            out.setters.append(lambda d, m: d(st.sampled_from(members))(d, m))
        elif kind in ("message", "repeated_message"):
            nested = self.message(
                proto.nested_type.add(name=f"M{number}"), f"{out.full_name}.M{number}", depth + 1
            )
            add(F.TYPE_MESSAGE, f".{nested.full_name}", repeated=kind == "repeated_message")
            if kind == "message":

                def set_message(d: st.DrawFn, m: Any) -> None:
                    sub = getattr(m, name)
                    sub.SetInParent()
                    nested.fill(d, sub)

                out.setters.append(set_message)
            else:

                def add_messages(d: st.DrawFn, m: Any) -> None:
                    for _ in range(d(st.integers(0, 3))):
                        nested.fill(d, getattr(m, name).add())

                out.setters.append(add_messages)
        else:  # map<string, scalar> or map<int32, message>
            entry = proto.nested_type.add(name=f"F{number}Entry")
            entry.options.map_entry = True
            if depth < 1 and draw(st.booleans()):
                nested = self.message(
                    proto.nested_type.add(name=f"V{number}"),
                    f"{out.full_name}.V{number}",
                    depth + 1,
                )
                entry.field.add(name="key", number=1, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
                entry.field.add(
                    name="value",
                    number=2,
                    type=F.TYPE_MESSAGE,
                    type_name=f".{nested.full_name}",
                    label=F.LABEL_OPTIONAL,
                )

                def fill_map(d: st.DrawFn, m: Any) -> None:
                    for k in d(st.lists(I32, max_size=3, unique=True)):
                        nested.fill(d, getattr(m, name)[k])

                out.setters.append(fill_map)
            else:
                type_ = draw(st.sampled_from([F.TYPE_INT64, F.TYPE_STRING, F.TYPE_DOUBLE]))
                entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
                entry.field.add(name="value", number=2, type=type_, label=F.LABEL_OPTIONAL)
                values = SCALARS[type_]
                out.setters.append(
                    lambda d, m: getattr(m, name).update(
                        d(st.dictionaries(TEXT, values, max_size=3))
                    )
                )
            add(F.TYPE_MESSAGE, f".{out.full_name}.F{number}Entry", repeated=True)


def _classes(fdp: descriptor_pb2.FileDescriptorProto) -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    for dep in (timestamp_pb2, wrappers_pb2):
        pool.AddSerializedFile(dep.DESCRIPTOR.serialized_pb)
    pool.AddSerializedFile(fdp.SerializeToString())
    return pool


def _schema(fdp: descriptor_pb2.FileDescriptorProto) -> ProtobufSchema:
    return ProtobufSchema(base64.b64encode(fdp.SerializeToString()).decode())


@dataclass
class Case:
    writer: ProtobufSchema
    table: ProtobufSchema
    payloads: list[bytes | None]
    flatten: bool
    latest: bool


@st.composite
def cases(draw: st.DrawFn) -> Case:
    builder = Builder(draw)
    main = builder.message(builder.fdp.message_type.add(name="Main"), "g.Main", 0)
    other = builder.message(builder.fdp.message_type.add(name="Other"), "g.Other", 1)
    pool = _classes(builder.fdp)
    main_cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("g.Main"))
    other_cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("g.Other"))
    newer = descriptor_pb2.FileDescriptorProto()
    newer.CopyFrom(builder.fdp)
    newer.message_type[0].field.add(name="zz", number=999, type=F.TYPE_INT64)
    table = _schema(newer) if draw(st.booleans()) else _schema(builder.fdp)
    flatten, latest = draw(st.booleans()), draw(st.booleans())
    payloads: list[bytes | None] = []
    for _ in range(draw(st.integers(1, 10))):
        how = draw(st.sampled_from(["valid"] * 6 + ["other", "junk", "truncated", "null"]))
        msg = (other_cls if how == "other" else main_cls)()
        (other if how == "other" else main).fill(draw, msg)
        body = msg.SerializeToString()
        if how == "junk":
            body = draw(st.binary(max_size=8))
        elif how == "truncated" and body:
            body = body[: draw(st.integers(0, len(body) - 1))]
        if how == "null":
            payloads.append(None)
            continue
        if latest:
            payloads.append(body)
            continue
        framing = draw(st.sampled_from(["first"] * 8 + ["long", "undefined", "unknown", "bad"]))
        if how == "other":
            payloads.append(frame(1, body, (1,)))
        elif framing == "first":
            payloads.append(frame(1, body, (0,)))
        elif framing == "long":  # [0] written as a count and an index, not the single 0
            payloads.append(frame(1, b"\x02\x00" + body))
        elif framing == "undefined":
            payloads.append(frame(1, body, (5,)))
        elif framing == "unknown":
            payloads.append(frame(9, body, (0,)))
        else:
            payloads.append(frame(1, body)[:4])
    return Case(_schema(builder.fdp), table, payloads, flatten, latest)


def both(case: Case) -> tuple[ConversionResult, int]:
    """The bulk result (checked equal to the per-record one) and its bulk decodes."""
    value = value_spec(case.writer, latest=case.latest)
    table = table_schema(source_type(value, case.table), source_type(KEY), flatten=case.flatten)
    records = [Record(i, 1_000 + i, b"k", p) for i, p in enumerate(case.payloads)]
    return bulk_and_reference(table, value, KEY, records, BulkProtobufDecoder, flatten=case.flatten)


@BULK_SETTINGS
@given(cases())
def test_bulk_protobuf_equals_the_per_record_path(case: Case) -> None:
    got, bulk = both(case)
    every_record_accounted(got, len(case.payloads), bulk)


def test_a_clean_run_is_one_bulk_decode() -> None:
    """Valid messages of one schema id and message: one bulk decode, not one per record."""
    fdp = descriptor_pb2.FileDescriptorProto(name="c.proto", package="c", syntax="proto3")
    fdp.dependency.append("google/protobuf/timestamp.proto")
    click = fdp.message_type.add(name="Click")
    click.field.add(name="user", number=1, type=F.TYPE_STRING)
    click.field.add(name="n", number=2, type=F.TYPE_INT64)
    click.field.add(
        name="at", number=3, type=F.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp"
    )
    click.field.add(name="tags", number=4, type=F.TYPE_STRING, label=F.LABEL_REPEATED)
    cls = message_factory.GetMessageClass(_classes(fdp).FindMessageTypeByName("c.Click"))
    payloads: list[bytes | None] = []
    for i in range(2_000):  # more than one chunk of the columnar reader
        msg = cls(user=f"u{i}", n=i, tags=["x"] * (i % 3))
        msg.at.seconds = 1_700_000_000 + i
        payloads.append(frame(1, msg.SerializeToString(), (0,)))
    schema = _schema(fdp)
    got, bulk = both(Case(schema, schema, payloads, flatten=True, latest=False))
    assert bulk == 1 and got.errors == () and got.batch.num_rows == 2_000
    assert got.batch.column("n").to_pylist() == list(range(2_000))
