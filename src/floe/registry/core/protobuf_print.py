"""``FileDescriptorProto`` -> ``.proto`` text: the canonical (and normalized) form of a
protobuf schema, and the text stored for schemas registered as base64 descriptors.

Input is a *resolved* descriptor (as ``FileDescriptor.CopyToProto`` gives), so every
type name is fully qualified; the output parses back to the same descriptor.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import descriptor_pb2 as d
from google.protobuf.descriptor import FieldDescriptor

from floe.registry.core.protobuf_parse import SCALARS

F = d.FieldDescriptorProto
_SCALAR_NAMES = {number: name for name, number in SCALARS.items()}


def print_proto(fdp: d.FileDescriptorProto) -> str:
    """The canonical ``.proto`` text of a resolved file descriptor."""
    syntax = fdp.syntax or "proto2"
    out = [f'syntax = "{syntax}";']
    if fdp.package:
        out.append(f"package {fdp.package};")
    for i, dep in enumerate(fdp.dependency):
        kind = (
            "public " if i in fdp.public_dependency else "weak " if i in fdp.weak_dependency else ""
        )
        out.append(f'import {kind}"{dep}";')
    out += [f"option {o};" for o in _options(fdp.options)]
    for msg in fdp.message_type:
        out += _message(msg, syntax, "")
    for enum in fdp.enum_type:
        out += _enum(enum, "")
    for service in fdp.service:
        out.append(f"service {service.name} {{")
        out += [f"  option {o};" for o in _options(service.options)]
        for m in service.method:
            cin = "stream " if m.client_streaming else ""
            sout = "stream " if m.server_streaming else ""
            opts = _options(m.options)
            body = " {\n" + "".join(f"    option {o};\n" for o in opts) + "  }" if opts else ";"
            out.append(f"  rpc {m.name}({cin}{m.input_type}) returns ({sout}{m.output_type}){body}")
        out.append("}")
    return "\n".join(out) + "\n"


def _literal(field: FieldDescriptor, value: Any) -> str:
    if field.enum_type is not None:
        name: str = field.enum_type.values_by_number[value].name
        return name
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return str(value)


def _options(options: Any) -> list[str]:
    return [
        f"{field.name} = {_literal(field, value)}"
        for field, value in options.ListFields()
        if field.name not in ("map_entry", "uninterpreted_option")
    ]


def _json_name(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _type(field: d.FieldDescriptorProto) -> str:
    if field.type in _SCALAR_NAMES:
        return _SCALAR_NAMES[field.type]
    return str(field.type_name)


def _field(
    field: d.FieldDescriptorProto, syntax: str, maps: dict[str, d.DescriptorProto], pad: str
) -> str:
    entry = maps.get(field.type_name.rsplit(".", 1)[-1]) if field.type_name else None
    if entry is not None and field.label == F.LABEL_REPEATED:
        key, value = entry.field[0], entry.field[1]
        head = f"map<{_type(key)}, {_type(value)}>"
    else:
        label = ""
        if field.label == F.LABEL_REPEATED:
            label = "repeated "
        elif field.label == F.LABEL_REQUIRED:
            label = "required "
        elif field.proto3_optional or (syntax == "proto2" and not field.HasField("oneof_index")):
            label = "optional "
        head = label + _type(field)
    opts = _options(field.options)
    if field.HasField("default_value"):
        value = field.default_value
        if field.type in (F.TYPE_STRING, F.TYPE_BYTES):
            value = json.dumps(value)
        opts.insert(0, f"default = {value}")
    if field.json_name and field.json_name != _json_name(field.name):
        opts.append(f"json_name = {json.dumps(field.json_name)}")
    suffix = f" [{', '.join(opts)}]" if opts else ""
    return f"{pad}{head} {field.name} = {field.number}{suffix};"


def _message(msg: d.DescriptorProto, syntax: str, pad: str) -> list[str]:
    inner = pad + "  "
    maps = {n.name: n for n in msg.nested_type if n.options.map_entry}
    out = [f"{pad}message {msg.name} {{"]
    out += [f"{inner}option {o};" for o in _options(msg.options)]
    if msg.reserved_range:
        ranges = [
            str(r.start) if r.end == r.start + 1 else f"{r.start} to {r.end - 1}"
            for r in msg.reserved_range
        ]
        out.append(f"{inner}reserved {', '.join(ranges)};")
    if msg.reserved_name:
        out.append(f"{inner}reserved {', '.join(json.dumps(n) for n in msg.reserved_name)};")
    for r in msg.extension_range:
        out.append(f"{inner}extensions {r.start} to {r.end - 1};")
    real_oneofs = {
        f.oneof_index for f in msg.field if f.HasField("oneof_index") and not f.proto3_optional
    }
    printed: set[int] = set()
    for field in msg.field:
        index = field.oneof_index if field.HasField("oneof_index") else None
        if index is None or index not in real_oneofs:
            out.append(_field(field, syntax, maps, inner))
        elif index not in printed:
            printed.add(index)
            out.append(f"{inner}oneof {msg.oneof_decl[index].name} {{")
            out += [
                _field(f, syntax, maps, inner + "  ")
                for f in msg.field
                if f.HasField("oneof_index") and f.oneof_index == index
            ]
            out.append(f"{inner}}}")
    for nested in msg.nested_type:
        if not nested.options.map_entry:
            out += _message(nested, syntax, inner)
    for enum in msg.enum_type:
        out += _enum(enum, inner)
    out.append(f"{pad}}}")
    return out


def _enum(enum: d.EnumDescriptorProto, pad: str) -> list[str]:
    inner = pad + "  "
    out = [f"{pad}enum {enum.name} {{"]
    out += [f"{inner}option {o};" for o in _options(enum.options)]
    if enum.reserved_range:
        ranges = [
            str(r.start) if r.end == r.start else f"{r.start} to {r.end}"
            for r in enum.reserved_range
        ]
        out.append(f"{inner}reserved {', '.join(ranges)};")
    if enum.reserved_name:
        out.append(f"{inner}reserved {', '.join(json.dumps(n) for n in enum.reserved_name)};")
    for value in enum.value:
        opts = _options(value.options)
        suffix = f" [{', '.join(opts)}]" if opts else ""
        out.append(f"{inner}{value.name} = {value.number}{suffix};")
    out.append(f"{pad}}}")
    return out
