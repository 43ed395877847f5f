"""Protobuf schemas (proto2 and proto3): ``.proto`` text or a base64
``FileDescriptorProto`` (what Confluent's serializers send), validated by building the
file in a fresh ``DescriptorPool`` with its references and protobuf's well-known types.

The canonical form is the text printed from the resolved descriptor, so the text and
the base64 form of one schema are identical to the registry; ``format=serialized``
renders the resolved descriptor as base64, as Confluent's deserializers request it.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from functools import cache

from google.protobuf import (
    any_pb2,
    api_pb2,
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    empty_pb2,
    field_mask_pb2,
    source_context_pb2,
    struct_pb2,
    timestamp_pb2,
    type_pb2,
    wrappers_pb2,
)
from google.protobuf.message import DecodeError

from floe.registry.core.errors import InvalidSchemaError
from floe.registry.core.model import SchemaType
from floe.registry.core.protobuf_parse import parse_proto
from floe.registry.core.protobuf_print import print_proto
from floe.registry.core.schemas import Dependency, ParsedSchema, invalid

MAIN_FILE = "schema.proto"
# In dependency order: each file's imports come before it.
_WELL_KNOWN = (
    descriptor_pb2,
    any_pb2,
    source_context_pb2,
    type_pb2,
    api_pb2,
    duration_pb2,
    empty_pb2,
    field_mask_pb2,
    struct_pb2,
    timestamp_pb2,
    wrappers_pb2,
)


@cache
def well_known_files() -> dict[str, bytes]:
    """Protobuf's well-known files (name -> serialized FileDescriptorProto), each after
    its imports: what a schema may import without a reference."""
    return {m.DESCRIPTOR.name: m.DESCRIPTOR.serialized_pb for m in _WELL_KNOWN}


def _is_base64(text: str) -> bool:
    stripped = text.strip()
    return bool(stripped) and not any(c.isspace() or c in "{};" for c in stripped)


def _decode(text: str, name: str) -> descriptor_pb2.FileDescriptorProto:
    """Text, or else base64 of a serialized descriptor (Confluent accepts both).

    Raises:
        InvalidSchemaError: neither form parses.
    """
    try:
        return parse_proto(text, name)
    except InvalidSchemaError as text_error:
        if not _is_base64(text):
            raise
        try:
            fdp = descriptor_pb2.FileDescriptorProto.FromString(
                base64.b64decode(text.strip(), validate=True)
            )
        except (binascii.Error, DecodeError, ValueError):
            raise text_error from None
        fdp.name = name
        return fdp


def _add(pool: descriptor_pool.DescriptorPool, dep: Dependency, added: set[str]) -> None:
    if dep.name in added:
        return
    for inner in dep.deps:
        _add(pool, inner, added)
    pool.AddSerializedFile(_decode(dep.text, dep.name).SerializeToString())
    added.add(dep.name)


class ProtobufSchema(ParsedSchema):
    schema_type = SchemaType.PROTOBUF

    def __init__(self, text: str, deps: Sequence[Dependency] = ()) -> None:
        """Raises:
        InvalidSchemaError: a syntax error, an unresolvable type or import, or a
            descriptor protobuf refuses (duplicate numbers, bad names ...).
        """
        try:
            pool = descriptor_pool.DescriptorPool()
            added: set[str] = set()
            for name, serialized in well_known_files().items():
                pool.AddSerializedFile(serialized)
                added.add(name)
            for dep in deps:
                _add(pool, dep, added)
            name = MAIN_FILE if MAIN_FILE not in added else f"_{MAIN_FILE}"
            unresolved = _decode(text, name)
            missing = [i for i in unresolved.dependency if i not in added]
            if missing:
                raise InvalidSchemaError(f"imports without a reference: {', '.join(missing)}")
            pool.AddSerializedFile(unresolved.SerializeToString())
            self.descriptor = descriptor_pb2.FileDescriptorProto()
            pool.FindFileByName(name).CopyToProto(self.descriptor)
        except InvalidSchemaError as exc:
            raise invalid(self.schema_type, exc) from None
        except (TypeError, ValueError, KeyError) as exc:  # the pool's build errors
            raise invalid(self.schema_type, exc) from None
        self._text = print_proto(self.descriptor)

    def canonical(self) -> str:
        return self._text

    def normalized(self) -> str:
        return self._text

    def stored(self, text: str, *, normalize: bool) -> str:
        """A base64 descriptor is stored as its ``.proto`` text, as Confluent does."""
        return self.normalized() if normalize or _is_base64(text) else text

    def formatted(self, fmt: str | None, text: str) -> str:
        if fmt == "serialized":
            return base64.b64encode(self.descriptor.SerializeToString()).decode()
        return text

    def incompatibilities(self, writer: ParsedSchema) -> list[str]:
        if not isinstance(writer, ProtobufSchema):
            return ["Incompatible schema type: the other schema is not PROTOBUF"]
        from floe.registry.core.protobuf_compat import incompatibilities

        return incompatibilities(self.descriptor, writer.descriptor)
