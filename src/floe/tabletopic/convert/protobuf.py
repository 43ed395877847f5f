"""Protobuf schemas -> the source type tree, and protobuf payloads -> Arrow-ready values.

Mapping (docs/table-topics-row-layout.md has the full table): ``double``/``float`` to
double/float; ``int32``/``sint32``/``sfixed32`` to int; ``int64``/``sint64``/
``sfixed64``/``uint32``/``fixed32`` to long; ``uint64``/``fixed64`` to long (a value
above 2^63-1 becomes a per-record conversion error); ``bool``, ``string``, ``bytes``
to their twins; enums to string (the value name; an unknown number as its decimal
text); messages to structs; ``repeated`` to lists; ``map<K, V>`` to map<K, V>;
``google.protobuf.Timestamp`` to timestamptz; the ``google.protobuf.*Value`` wrappers to
their optional scalar. Fields of a ``oneof`` are separate optional columns.

Nulls: an unset message field, and an unset field with presence (proto2 ``optional``,
proto3 ``optional``, oneof members) is null; a proto3 scalar without presence reads as
its default value, as protobuf itself reads it.

Refused (:class:`UnsupportedSchemaError`): recursive messages (including
``google.protobuf.Struct``/``Value``), imports other than protobuf's well-known types
(references are not resolved here yet), and a message name or index path the schema
does not define.

Invariants: message classes come from a private ``DescriptorPool`` per codec; a compiled
converter per message type reads each field once with ``getattr``. The columnar reader
(:meth:`ProtobufCodec.columns`) reads a list of messages field by field into Arrow
arrays of a target type, with the same values as the per-record reader followed by
``pa.array``; a target whose shape differs from the message's is refused when compiled
(the caller decodes per record). A ``Timestamp``
whose microseconds do not fit 64 bits raises :class:`~.temporal.TimestampRangeError` (a
per-record error naming the field), never wraps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import accumulate
from operator import attrgetter, methodcaller
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf import (
    descriptor,
    descriptor_pool,
    message_factory,
)
from google.protobuf.message import DecodeError
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    PrimitiveType,
    StringType,
    TimestamptzType,
)

from floe.registry.core.protobuf import ProtobufSchema, well_known_files
from floe.tabletopic.convert.source import (
    SourceField,
    SourceList,
    SourceMap,
    SourceStruct,
    SourceType,
    UnsupportedSchemaError,
    child_path,
)
from floe.tabletopic.convert.temporal import checked

Reader = Callable[[Any], Any]
FD = descriptor.FieldDescriptor

_SCALARS: dict[int, PrimitiveType] = {
    FD.TYPE_DOUBLE: DoubleType(),
    FD.TYPE_FLOAT: FloatType(),
    FD.TYPE_INT32: IntegerType(),
    FD.TYPE_SINT32: IntegerType(),
    FD.TYPE_SFIXED32: IntegerType(),
    FD.TYPE_INT64: LongType(),
    FD.TYPE_SINT64: LongType(),
    FD.TYPE_SFIXED64: LongType(),
    FD.TYPE_UINT32: LongType(),
    FD.TYPE_FIXED32: LongType(),
    FD.TYPE_UINT64: LongType(),
    FD.TYPE_FIXED64: LongType(),
    FD.TYPE_BOOL: BooleanType(),
    FD.TYPE_STRING: StringType(),
    FD.TYPE_BYTES: BinaryType(),
}
_WRAPPERS: dict[str, PrimitiveType] = {
    "google.protobuf.DoubleValue": DoubleType(),
    "google.protobuf.FloatValue": FloatType(),
    "google.protobuf.Int64Value": LongType(),
    "google.protobuf.UInt64Value": LongType(),
    "google.protobuf.Int32Value": IntegerType(),
    "google.protobuf.UInt32Value": LongType(),
    "google.protobuf.BoolValue": BooleanType(),
    "google.protobuf.StringValue": StringType(),
    "google.protobuf.BytesValue": BinaryType(),
}
_TIMESTAMP = "google.protobuf.Timestamp"


def _timestamp(path: str) -> Reader:
    """The reader of a ``Timestamp`` field: microseconds since the epoch."""

    def read(value: Any) -> int:
        seconds, nanos = int(value.seconds), int(value.nanos)
        us = seconds * 1_000_000 + nanos // 1000
        return checked(us, path, _TIMESTAMP, f"seconds={seconds} nanos={nanos}")

    return read


def _wrapper(value: Any) -> Any:
    return value.value


def _enum(enum_type: descriptor.EnumDescriptor) -> Reader:
    names = {v.number: v.name for v in enum_type.values}
    return lambda n: names.get(n, str(n))


class _Mapper:
    """One walk over a message descriptor yielding the source type and a value reader."""

    def __init__(self) -> None:
        self.open: set[str] = set()

    def message(
        self, desc: descriptor.Descriptor, path: str
    ) -> tuple[SourceStruct, Callable[[Any], dict[str, Any]]]:
        """Raises:
        UnsupportedSchemaError: see the module docstring.
        """
        if desc.full_name in self.open:
            raise UnsupportedSchemaError(path, f"recursive message {desc.full_name}")
        self.open.add(desc.full_name)
        fields: list[SourceField] = []
        plan: list[tuple[str, bool, Reader | None]] = []
        for f in desc.fields:
            fpath = child_path(path, f.name)
            source, read = self.field(f, fpath)
            fields.append(SourceField(f.name, source))
            plan.append((f.name, bool(f.has_presence), read))
        self.open.discard(desc.full_name)
        steps = tuple(plan)

        def read_message(msg: Any) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for name, presence, read in steps:
                if presence and not msg.HasField(name):
                    out[name] = None
                    continue
                value = getattr(msg, name)
                out[name] = value if read is None else read(value)
            return out

        return SourceStruct(tuple(fields)), read_message

    def field(self, f: descriptor.FieldDescriptor, path: str) -> tuple[SourceType, Reader | None]:
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            entry = f.message_type.fields_by_name
            key_desc, value_desc = entry["key"], entry["value"]
            key = _SCALARS[key_desc.type]
            value, read_value = self.single(value_desc, path)
            if read_value is None:
                return SourceMap(key, value), dict
            rv = read_value
            return SourceMap(key, value), lambda m: {k: rv(v) for k, v in m.items()}
        element, read = self.single(f, path)
        if f.is_repeated:
            if read is None:
                return SourceList(element), list
            each = read
            return SourceList(element), lambda values: [each(v) for v in values]
        return element, read

    def single(self, f: descriptor.FieldDescriptor, path: str) -> tuple[SourceType, Reader | None]:
        """The type and reader of one (non-repeated) value of field ``f``."""
        if f.type == FD.TYPE_ENUM:
            return StringType(), _enum(f.enum_type)
        if f.type in (FD.TYPE_MESSAGE, FD.TYPE_GROUP):
            name = f.message_type.full_name
            if name == _TIMESTAMP:
                return TimestamptzType(), _timestamp(path)
            if name in _WRAPPERS:
                return _WRAPPERS[name], _wrapper
            return self.message(f.message_type, path)
        return _SCALARS[f.type], None


COLUMNS_CHUNK = 1024
"""Messages the columnar reader holds at a time. upb messages are objects the garbage
collector tracks: a 50,000-message run held at once read at ~150k messages/s, in chunks
of 1,024 at ~450k (9-field clickstream message, 2-core dev machine)."""

Column = Callable[[list[Any], list[bool] | None], pa.Array]
"""Builds one Arrow array from a list of field values (as ``getattr`` returns them) and
which of them are present (None: all; an absent value is null)."""


def _offsets(containers: list[Any]) -> pa.Array:
    return pa.array([0, *accumulate(map(len, containers))], pa.int32())


def _nulls(present: list[bool] | None) -> pa.Array | None:
    """The null mask of ``present`` (None when nothing is null)."""
    if present is None or all(present):
        return None
    return pc.invert(pa.array(present, pa.bool_()))


def _timestamps(target: pa.DataType) -> Column:
    """The builder of ``Timestamp`` values: microseconds as Python ints (which do not
    wrap), so one beyond 64 bits fails ``pa.array`` (the caller then decodes per record,
    which names the field)."""
    seconds, nanos = attrgetter("seconds"), attrgetter("nanos")

    def build(values: list[Any], present: list[bool] | None) -> pa.Array:
        us = [
            s * 1_000_000 + n // 1000
            for s, n in zip(map(seconds, values), map(nanos, values), strict=True)
        ]
        return pa.array(us, target, mask=_nulls(present))

    return build


def _has(f: descriptor.FieldDescriptor) -> Callable[[Any], bool] | None:
    """``HasField`` of a field with presence, else None (always present)."""
    return methodcaller("HasField", f.name) if f.has_presence else None


def _holds_timestamp(f: descriptor.FieldDescriptor) -> bool:
    """Whether a field's values contain a ``Timestamp`` (whose reading can fail)."""
    t = f.message_type
    if t is None:
        return False
    return t.full_name == _TIMESTAMP or any(_holds_timestamp(g) for g in t.fields)


def _refuse(path: str, target: pa.DataType, what: str) -> UnsupportedSchemaError:
    return UnsupportedSchemaError(path, f"column type {target} does not hold {what}")


def _is_nested(target: pa.DataType) -> bool:
    return bool(pa.types.is_struct(target) or pa.types.is_list(target) or pa.types.is_map(target))


class _Columns:
    """One walk over a message descriptor and a target Arrow type yielding a
    :data:`Column` builder per field (the columnar twin of :class:`_Mapper`)."""

    def message(self, desc: descriptor.Descriptor, target: pa.DataType, path: str) -> Column:
        """A builder of a struct array of ``target`` from messages of ``desc``: the
        target's fields the message lacks are null, the message's fields the target
        lacks are dropped.

        Raises:
            UnsupportedSchemaError: ``target`` is not a struct, or a field's column type
                has another shape than the field (list, map, struct or scalar).
        """
        if not pa.types.is_struct(target):
            raise _refuse(path, target, f"message {desc.full_name}")
        fields = list(target)
        steps: list[tuple[Callable[[Any], Any], Callable[[Any], bool] | None, Column] | pa.Field]
        steps = []
        for tf in fields:
            f = desc.fields_by_name.get(tf.name)
            if f is None:
                steps.append(tf)
                continue
            column = self.field(f, tf.type, child_path(path, f.name))
            steps.append((attrgetter(f.name), _has(f), column))
        # fields the target lacks are still read where reading can fail, as per record
        checks: list[tuple[Callable[[Any], Any], Callable[[Any], bool] | None, Reader]] = []
        for f in desc.fields:
            if f.name not in target.names and _holds_timestamp(f):
                read = _Mapper().field(f, child_path(path, f.name))[1]
                if read is not None:
                    checks.append((attrgetter(f.name), _has(f), read))

        def build(messages: list[Any], present: list[bool] | None) -> pa.Array:
            for field_of, has_field, check in checks:
                for m in messages if has_field is None else filter(has_field, messages):
                    check(field_of(m))
            children = []
            for step in steps:
                if isinstance(step, pa.Field):
                    children.append(pa.nulls(len(messages), step.type))
                    continue
                get, has, column = step
                values = list(map(get, messages))
                children.append(column(values, None if has is None else list(map(has, messages))))
            return pa.StructArray.from_arrays(children, fields=fields, mask=_nulls(present))

        return build

    def field(self, f: descriptor.FieldDescriptor, target: pa.DataType, path: str) -> Column:
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            if not pa.types.is_map(target):
                raise _refuse(path, target, "a map")
            value = self.single(f.message_type.fields_by_name["value"], target.item_type, path)
            key_type = target.key_type

            def build_map(maps: list[Any], present: list[bool] | None) -> pa.Array:
                pairs = [kv for m in maps for kv in m.items()]
                keys = pa.array([k for k, _ in pairs], key_type)
                items = value([v for _, v in pairs], None)
                return pa.MapArray.from_arrays(_offsets(maps), keys, items, type=target)

            return build_map
        if f.is_repeated:
            if not pa.types.is_list(target):
                raise _refuse(path, target, "a list")
            element = self.single(f, target.value_type, path)

            def build_list(lists: list[Any], present: list[bool] | None) -> pa.Array:
                values = element([v for each in lists for v in each], None)
                return pa.ListArray.from_arrays(_offsets(lists), values, type=target)

            return build_list
        return self.single(f, target, path)

    def single(self, f: descriptor.FieldDescriptor, target: pa.DataType, path: str) -> Column:
        """The builder of (non-repeated) values of field ``f``."""
        if f.type in (FD.TYPE_MESSAGE, FD.TYPE_GROUP):
            name = f.message_type.full_name
            if name != _TIMESTAMP and name not in _WRAPPERS:
                return self.message(f.message_type, target, path)
            if _is_nested(target):
                raise _refuse(path, target, name)
            if name == _TIMESTAMP:
                return _timestamps(target)
            return lambda values, present: pa.array(
                list(map(_wrapper, values)), target, mask=_nulls(present)
            )
        if _is_nested(target):
            raise _refuse(path, target, "a scalar")
        if f.type == FD.TYPE_ENUM:
            names = {v.number: v.name for v in f.enum_type.values}

            def enum(values: list[Any], present: list[bool] | None) -> pa.Array:
                text = [names.get(n, str(n)) for n in values]
                return pa.array(text, target, mask=_nulls(present))

            return enum
        return lambda values, present: pa.array(values, target, mask=_nulls(present))


class ProtobufDecodeError(ValueError):
    """A payload that does not parse as its message type."""


def _undecodable(exc: DecodeError) -> ProtobufDecodeError:
    return ProtobufDecodeError(f"protobuf payload does not parse: {exc}")


def _pool(schema: ProtobufSchema) -> descriptor_pool.DescriptorPool:
    """A pool with the well-known types and the schema's file.

    Raises:
        UnsupportedSchemaError: the file imports something else.
    """
    known = well_known_files()
    others = [d for d in schema.descriptor.dependency if d not in known]
    if others:
        raise UnsupportedSchemaError(
            "", f"imports of referenced schemas are not supported yet: {', '.join(others)}"
        )
    pool = descriptor_pool.DescriptorPool()
    for serialized in known.values():
        pool.AddSerializedFile(serialized)
    pool.AddSerializedFile(schema.descriptor.SerializeToString())
    return pool


def message_name(schema: ProtobufSchema, indexes: Sequence[int]) -> str:
    """The full name of the message at a Confluent message-index path (``[]`` and
    ``[0]`` both mean the first message of the file).

    Raises:
        UnsupportedSchemaError: the path leads nowhere.
    """
    fdp = schema.descriptor
    path = list(indexes) or [0]
    messages = fdp.message_type
    names: list[str] = []
    for i in path:
        if not 0 <= i < len(messages):
            raise UnsupportedSchemaError("", f"message index path {list(indexes)} is undefined")
        names.append(messages[i].name)
        messages = messages[i].nested_type
    return ".".join([fdp.package, *names] if fdp.package else names)


class ProtobufCodec:
    """Decodes payloads of one message type of a protobuf schema.

    Immutable after construction; safe to share between threads.
    """

    def __init__(self, schema: ProtobufSchema, full_name: str | None = None) -> None:
        """``full_name`` defaults to the file's first message.

        Raises:
            UnsupportedSchemaError: see the module docstring.
        """
        pool = _pool(schema)
        name = full_name or message_name(schema, [0])
        try:
            desc = pool.FindMessageTypeByName(name)
        except KeyError:
            raise UnsupportedSchemaError("", f"no message {name} in the schema") from None
        self.source, self._read = _Mapper().message(desc, "")
        self._desc = desc
        self._cls: Any = message_factory.GetMessageClass(desc)

    def decode(self, payload: bytes | memoryview) -> dict[str, Any]:
        """The value of one payload.

        Raises:
            ProtobufDecodeError: the payload does not parse as the message.
        """
        try:
            msg = self._cls.FromString(bytes(payload))
        except DecodeError as exc:
            raise _undecodable(exc) from None
        return self._read(msg)

    def columns(self, target: pa.DataType) -> Callable[[Sequence[bytes]], pa.Array]:
        """A reader of many payloads into one struct array of ``target`` (a row per
        payload, in order): what :meth:`decode` of each payload and one ``pa.array`` of
        the values give, read column by column.

        The reader raises ProtobufDecodeError for a payload that does not parse, and
        whatever ``pa.array`` raises for a value that does not fit its column (e.g. a
        ``uint64`` above 2^63-1), or TimestampRangeError.

        Raises:
            UnsupportedSchemaError: ``target`` has another shape than the message.
        """
        build = _Columns().message(self._desc, target, "")
        parse = self._cls.FromString

        def read_chunk(payloads: Sequence[bytes]) -> pa.Array:
            try:
                messages = [parse(p) for p in payloads]
            except DecodeError as exc:
                raise _undecodable(exc) from None
            return build(messages, None)

        def read(payloads: Sequence[bytes]) -> pa.Array:
            if len(payloads) <= COLUMNS_CHUNK:
                return read_chunk(payloads)
            return pa.concat_arrays(
                [
                    read_chunk(payloads[i : i + COLUMNS_CHUNK])
                    for i in range(0, len(payloads), COLUMNS_CHUNK)
                ]
            )

        return read
