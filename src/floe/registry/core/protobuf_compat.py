"""Protobuf compatibility, at the wire level, as Confluent's registry judges it.

The check compares the writer's file (the original) with the reader's (the update).
Incompatible: a changed package; a message of the writer missing from the reader; for
a field number present in both, a change between scalar/message/enum kinds, between
scalar types of different wire encodings (compatible groups: int32/uint32/int64/
uint64/bool and enums; sint32/sint64; fixed32/sfixed32; fixed64/sfixed64;
string/bytes), to another message type, to ``required``, or between singular and
repeated for a numeric type; a required field added or removed; a field removed from
a oneof; a field moved into an existing oneof, or several moved into a new one.
Compatible: fields added or removed, renames, new messages and enums, enum values.
"""

from __future__ import annotations

from collections.abc import Iterator

from google.protobuf import descriptor_pb2 as d

F = d.FieldDescriptorProto
_GROUPS = (
    {F.TYPE_INT32, F.TYPE_UINT32, F.TYPE_INT64, F.TYPE_UINT64, F.TYPE_BOOL, F.TYPE_ENUM},
    {F.TYPE_SINT32, F.TYPE_SINT64},
    {F.TYPE_FIXED32, F.TYPE_SFIXED32},
    {F.TYPE_FIXED64, F.TYPE_SFIXED64},
    {F.TYPE_STRING, F.TYPE_BYTES},
)
_LENGTH_DELIMITED = {F.TYPE_STRING, F.TYPE_BYTES, F.TYPE_MESSAGE}


def _messages(
    prefix: str, msgs: Iterator[d.DescriptorProto]
) -> Iterator[tuple[str, d.DescriptorProto]]:
    for msg in msgs:
        name = f"{prefix}.{msg.name}"
        if not msg.options.map_entry:
            yield name, msg
        yield from _messages(name, iter(msg.nested_type))


def _index(fdp: d.FileDescriptorProto) -> dict[str, d.DescriptorProto]:
    prefix = f".{fdp.package}" if fdp.package else ""
    return dict(_messages(prefix, iter(fdp.message_type)))


def _oneof(msg: d.DescriptorProto, field: d.FieldDescriptorProto) -> str | None:
    if not field.HasField("oneof_index") or field.proto3_optional:
        return None
    return str(msg.oneof_decl[field.oneof_index].name)


def _compatible_types(old: d.FieldDescriptorProto, new: d.FieldDescriptorProto) -> str | None:
    old_type: int = old.type
    if old_type == new.type:
        if old.type == F.TYPE_MESSAGE and old.type_name != new.type_name:
            return f"type changed from {old.type_name} to {new.type_name}"
        return None
    if any(old.type in g and new.type in g for g in _GROUPS):
        return None
    kind = "kind" if F.TYPE_MESSAGE in (old.type, new.type) else "scalar type"
    return f"{kind} changed from {F.Type.Name(old.type)} to {F.Type.Name(new.type)}"


def incompatibilities(reader: d.FileDescriptorProto, writer: d.FileDescriptorProto) -> list[str]:
    """Why ``reader`` cannot read what ``writer`` wrote (empty when it can)."""
    out: list[str] = []
    if reader.package != writer.package:
        out.append(f"package changed from '{writer.package}' to '{reader.package}'")
    readers = _index(reader)
    for name, w_msg in _index(writer).items():
        r_msg = readers.get(name)
        if r_msg is None:
            out.append(f"message {name} removed")
            continue
        out += [f"{name}: {m}" for m in _message(r_msg, w_msg)]
    return out


def _message(r_msg: d.DescriptorProto, w_msg: d.DescriptorProto) -> list[str]:
    out: list[str] = []
    r_fields = {f.number: f for f in r_msg.field}
    w_fields = {f.number: f for f in w_msg.field}
    moved_to_new_oneof: dict[str, int] = {}
    w_oneofs = {o.name for o in w_msg.oneof_decl}
    for number, w_field in w_fields.items():
        r_field = r_fields.get(number)
        if r_field is None:
            if w_field.label == F.LABEL_REQUIRED:
                out.append(f"required field {number} removed")
            if _oneof(w_msg, w_field) is not None:
                out.append(f"field {number} removed from oneof {_oneof(w_msg, w_field)}")
            continue
        problem = _compatible_types(w_field, r_field)
        if problem:
            out.append(f"field {number}: {problem}")
        if r_field.label == F.LABEL_REQUIRED and w_field.label != F.LABEL_REQUIRED:
            out.append(f"field {number} became required")
        if (r_field.label == F.LABEL_REPEATED) != (w_field.label == F.LABEL_REPEATED) and not (
            r_field.type in _LENGTH_DELIMITED and w_field.type in _LENGTH_DELIMITED
        ):
            out.append(f"field {number}: changed between singular and repeated")
        r_oneof, w_oneof = _oneof(r_msg, r_field), _oneof(w_msg, w_field)
        if r_oneof is not None and w_oneof is None:
            if r_oneof in w_oneofs:
                out.append(f"field {number} moved into existing oneof {r_oneof}")
            else:
                moved_to_new_oneof[r_oneof] = moved_to_new_oneof.get(r_oneof, 0) + 1
    for number, r_field in r_fields.items():
        if number not in w_fields and r_field.label == F.LABEL_REQUIRED:
            out.append(f"required field {number} added")
    out += [
        f"multiple fields moved into new oneof {n}" for n, c in moved_to_new_oneof.items() if c > 1
    ]
    return out
