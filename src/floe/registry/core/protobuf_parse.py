"""``.proto`` text -> ``FileDescriptorProto``, with the pure-Python
``proto-schema-parser``.

Type names are left as written (relative or fully qualified): building the file in a
``DescriptorPool`` (:mod:`.protobuf`) resolves them by protobuf's scoping rules and
rejects unknown ones. Groups and extensions are refused: the Confluent serializers
never produce them and they have no place in new schemas.
"""

from __future__ import annotations

from typing import Any

from antlr4.error.ErrorListener import ErrorListener
from google.protobuf import descriptor_pb2 as d
from proto_schema_parser import ast
from proto_schema_parser.parser import Parser

from floe.registry.core.errors import InvalidSchemaError

F = d.FieldDescriptorProto
SCALARS = {
    "double": F.TYPE_DOUBLE,
    "float": F.TYPE_FLOAT,
    "int64": F.TYPE_INT64,
    "uint64": F.TYPE_UINT64,
    "int32": F.TYPE_INT32,
    "fixed64": F.TYPE_FIXED64,
    "fixed32": F.TYPE_FIXED32,
    "bool": F.TYPE_BOOL,
    "string": F.TYPE_STRING,
    "bytes": F.TYPE_BYTES,
    "uint32": F.TYPE_UINT32,
    "sfixed32": F.TYPE_SFIXED32,
    "sfixed64": F.TYPE_SFIXED64,
    "sint32": F.TYPE_SINT32,
    "sint64": F.TYPE_SINT64,
}
_LABELS = {
    ast.FieldCardinality.OPTIONAL: F.LABEL_OPTIONAL,
    ast.FieldCardinality.REQUIRED: F.LABEL_REQUIRED,
    ast.FieldCardinality.REPEATED: F.LABEL_REPEATED,
}
_MAX_FIELD = 536870911


class _RaiseOnError(ErrorListener):  # type: ignore[misc]
    def syntaxError(  # noqa: N802, PLR0917 (antlr's signature)
        self, recognizer: object, symbol: object, line: int, column: int, msg: str, e: object
    ) -> None:
        raise InvalidSchemaError(f"line {line}:{column} {msg}")


def _quiet(target: Any) -> None:
    target.removeErrorListeners()
    target.addErrorListener(_RaiseOnError())


def parse_proto(text: str, name: str) -> d.FileDescriptorProto:
    """Parse ``.proto`` text into an unresolved ``FileDescriptorProto`` named ``name``.

    Raises:
        InvalidSchemaError: a syntax error, or a construct this parser refuses.
    """
    tree = Parser(setup_lexer=_quiet, setup_parser=_quiet).parse(text)
    out = d.FileDescriptorProto(name=name)
    syntax = tree.syntax or "proto2"
    if tree.edition:
        raise InvalidSchemaError("protobuf editions are not supported")
    if syntax not in ("proto2", "proto3"):
        raise InvalidSchemaError(f"unknown syntax {syntax!r}")
    out.syntax = syntax
    for element in tree.file_elements:
        if isinstance(element, ast.Package):
            out.package = element.name
        elif isinstance(element, ast.Import):
            if element.public:
                out.public_dependency.append(len(out.dependency))
            if element.weak:
                out.weak_dependency.append(len(out.dependency))
            out.dependency.append(element.name)
        elif isinstance(element, ast.Option):
            _set_option(out.options, element)
        elif isinstance(element, ast.Message):
            _message(out.message_type.add(), element, syntax)
        elif isinstance(element, ast.Enum):
            _enum(out.enum_type.add(), element)
        elif isinstance(element, ast.Service):
            _service(out.service.add(), element)
        elif isinstance(element, ast.Extension):
            raise InvalidSchemaError("extensions are not supported")
    return out


def _set_option(options: Any, option: ast.Option) -> None:
    """Set a built-in option; custom ``(name)`` options are kept out (their
    definitions would have to be imported and resolved)."""
    if option.name.startswith("("):
        return
    field = options.DESCRIPTOR.fields_by_name.get(option.name)
    if field is None:
        raise InvalidSchemaError(f"unknown option {option.name!r}")
    value: Any = option.value
    if isinstance(value, ast.Identifier):
        value = value.name
    try:
        if field.enum_type is not None and isinstance(value, str):
            value = field.enum_type.values_by_name[value].number
        setattr(options, option.name, value)
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidSchemaError(f"bad value for option {option.name!r}: {exc}") from None


def _field_options(field: d.FieldDescriptorProto, options: list[ast.Option]) -> None:
    for option in options:
        value = option.value
        if option.name == "default":
            if isinstance(value, ast.Identifier):
                value = value.name
            field.default_value = str(value).lower() if isinstance(value, bool) else str(value)
        elif option.name == "json_name":
            field.json_name = str(value)
        else:
            _set_option(field.options, option)


def _field(
    msg: d.DescriptorProto, node: ast.Field, syntax: str, oneof: int | None
) -> d.FieldDescriptorProto:
    if not 1 <= node.number <= _MAX_FIELD:
        raise InvalidSchemaError(f"field {node.name!r}: number {node.number} out of range")
    field = msg.field.add(name=node.name, number=node.number)
    cardinality = node.cardinality
    field.label = _LABELS[cardinality] if cardinality is not None else F.LABEL_OPTIONAL
    if cardinality is None and syntax == "proto2" and oneof is None:
        raise InvalidSchemaError(f"field {node.name!r}: proto2 fields need a label")
    if node.type in SCALARS:
        field.type = SCALARS[node.type]
    else:
        field.type_name = node.type
    if oneof is not None:
        field.oneof_index = oneof
    elif syntax == "proto3" and cardinality is ast.FieldCardinality.OPTIONAL:
        field.proto3_optional = True
    _field_options(field, node.options)
    return field


def _entry_name(field_name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in field_name.split("_")) + "Entry"


def _message(msg: d.DescriptorProto, node: ast.Message, syntax: str) -> None:
    msg.name = node.name
    synthetic: list[d.FieldDescriptorProto] = []
    for element in node.elements:
        if isinstance(element, ast.Field):
            field = _field(msg, element, syntax, None)
            if field.proto3_optional:
                synthetic.append(field)
        elif isinstance(element, ast.MapField):
            entry = msg.nested_type.add(name=_entry_name(element.name))
            entry.options.map_entry = True
            for number, (name, type_) in enumerate(
                (("key", element.key_type), ("value", element.value_type)), start=1
            ):
                _field(
                    entry,
                    ast.Field(name, number, type_, ast.FieldCardinality.OPTIONAL),
                    "proto2",
                    None,
                )
            _field(
                msg,
                ast.Field(
                    element.name,
                    element.number,
                    entry.name,
                    ast.FieldCardinality.REPEATED,
                    element.options,
                ),
                syntax,
                None,
            )
        elif isinstance(element, ast.OneOf):
            index = len(msg.oneof_decl)
            msg.oneof_decl.add(name=element.name)
            for inner in element.elements:
                if isinstance(inner, ast.Field):
                    _field(msg, inner, syntax, index)
                elif isinstance(inner, ast.Option):
                    _set_option(msg.oneof_decl[index].options, inner)
        elif isinstance(element, ast.Message):
            _message(msg.nested_type.add(), element, syntax)
        elif isinstance(element, ast.Enum):
            _enum(msg.enum_type.add(), element)
        elif isinstance(element, ast.Reserved):
            for text in element.ranges:
                start, end = _range(text)
                msg.reserved_range.add(start=start, end=end)
            msg.reserved_name.extend(element.names)
        elif isinstance(element, ast.ExtensionRange):
            for text in element.ranges:
                start, end = _range(text)
                msg.extension_range.add(start=start, end=end)
        elif isinstance(element, ast.Option):
            _set_option(msg.options, element)
        elif isinstance(element, ast.Group | ast.Extension):
            raise InvalidSchemaError(f"message {node.name!r}: groups/extensions not supported")
    for field in synthetic:  # proto3 `optional`: one synthetic oneof each, declared last
        field.oneof_index = len(msg.oneof_decl)
        msg.oneof_decl.add(name=f"_{field.name}")


def _range(text: str) -> tuple[int, int]:
    """``"5"`` / ``"5 to 9"`` / ``"5 to max"`` -> half-open ``(start, end)``."""
    parts = [p.strip() for p in text.split("to")]
    try:
        start = int(parts[0], 0)
        end = _MAX_FIELD if parts[-1] == "max" else int(parts[-1], 0)
    except ValueError:
        raise InvalidSchemaError(f"bad range {text!r}") from None
    return start, end + 1


def _enum(enum: d.EnumDescriptorProto, node: ast.Enum) -> None:
    enum.name = node.name
    for element in node.elements:
        if isinstance(element, ast.EnumValue):
            value = enum.value.add(name=element.name, number=element.number)
            for option in element.options:
                _set_option(value.options, option)
        elif isinstance(element, ast.Option):
            _set_option(enum.options, element)
        elif isinstance(element, ast.EnumReserved):
            for text in element.ranges:
                start, end = _range(text)
                enum.reserved_range.add(start=start, end=end - 1)  # enum ranges are closed
            enum.reserved_name.extend(element.names)


def _service(service: d.ServiceDescriptorProto, node: ast.Service) -> None:
    service.name = node.name
    for element in node.elements:
        if isinstance(element, ast.Method):
            service.method.add(
                name=element.name,
                input_type=element.input_type.type,
                output_type=element.output_type.type,
                client_streaming=element.input_type.stream,
                server_streaming=element.output_type.stream,
            )
        elif isinstance(element, ast.Option):
            _set_option(service.options, element)
