"""Values through the Schema Registry for ``floe produce`` and ``floe consume``.

Encoding uses confluent-kafka's own serializers (``AvroSerializer``,
``JSONSerializer``, ``ProtobufSerializer``), so what ``floe produce`` writes is exactly
what a Confluent client would: the wire format (magic byte 0, 4-byte schema id, for
Protobuf the message indexes, then the payload), the schema registered under the
topic-name strategy's ``<topic>-value`` subject. A ``.proto`` file is compiled at run
time by the registry's own parser (:mod:`floe.registry.core.protobuf`), so no
``protoc`` is needed.

Decoding reads the schema id of a wire-format payload, asks the registry for that
schema and decodes with its type: ``AvroDeserializer`` and ``JSONDeserializer`` (writer
schema), and for Protobuf the writer's descriptor (with its references) and the
message indexes. Anything that is not wire format is UTF-8 text, else hex.

confluent-kafka and protobuf are imported lazily: ``floe topic`` does not pay for them.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from floe.cli.output import CliError, jsonable

FORMATS = ("text", "json", "avro", "protobuf")
DECODINGS = ("auto", *FORMATS)
MAGIC = 0
_HEADER = 5  # magic byte + schema id


def registry_client(url: str) -> Any:
    """A Confluent registry client for ``url``, with the client properties' credentials
    and CA (:func:`floe.cli.connect.http_access`)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from floe.cli.connect import http_access

    access = http_access(url)
    conf = {"url": url}
    if access.user:
        conf["basic.auth.user.info"] = f"{access.user}:{access.password}"
    if access.ca_location:
        conf["ssl.ca.location"] = access.ca_location
    return SchemaRegistryClient(conf)


def _context(topic: str, key: bool) -> Any:
    from confluent_kafka.serialization import MessageField, SerializationContext

    return SerializationContext(topic, MessageField.KEY if key else MessageField.VALUE)


# -- encoding -------------------------------------------------------------------------


def serializer(
    fmt: str, schema: Path | None, registry: Callable[[], Any], topic: str, message: str | None
) -> Callable[[bytes], bytes]:
    """A function from one input line (JSON for the structured formats) to value bytes.

    ``registry`` makes the registry client, called only for formats that need it.

    Raises:
        CliError: a missing or unreadable schema file, or a ``.proto`` that does not
            compile or lacks ``message``.
    """
    if fmt == "text":
        return bytes
    if schema is None:
        if fmt == "json":  # plain JSON, no registry: checked and compacted
            return lambda line: json.dumps(parse_json(line), separators=(",", ":")).encode()
        raise CliError(f"--format {fmt} needs --schema FILE")
    try:
        text = schema.read_text()
    except OSError as exc:
        raise CliError(f"cannot read {schema}: {exc.strerror or exc}") from None
    ctx = _context(topic, key=False)
    client = registry()
    if fmt == "avro":
        from confluent_kafka.schema_registry.avro import AvroSerializer

        avro = AvroSerializer(client, text)
        return lambda line: bytes(avro(parse_json(line), ctx))
    if fmt == "json":
        from confluent_kafka.schema_registry.json_schema import JSONSerializer

        js = JSONSerializer(text, client)
        return lambda line: bytes(js(parse_json(line), ctx))
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from google.protobuf import json_format

    cls = _proto_class(text, message, schema)
    pb = ProtobufSerializer(cls, client, {"use.deprecated.format": False})

    def encode(line: bytes) -> bytes:
        try:
            msg = json_format.Parse(line, cls())
        except json_format.ParseError as exc:
            raise CliError(f"not a {cls.DESCRIPTOR.full_name}: {exc}") from None
        return bytes(pb(msg, ctx))

    return encode


def parse_json(line: str | bytes) -> Any:
    """Raises:
    CliError: the line is not JSON (or not UTF-8).
    """
    try:
        return json.loads(line)
    except ValueError as exc:
        raise CliError(f"not JSON: {exc}: {line[:80]!r}") from None


def _proto_class(text: str, message: str | None, path: Path) -> Any:
    """The message class of ``message`` (default: the first message) in ``.proto`` text."""
    from google.protobuf import descriptor_pool
    from google.protobuf.message_factory import GetMessageClass

    from floe.registry.core.errors import RegistryError
    from floe.registry.core.protobuf import ProtobufSchema, well_known_files

    try:
        fdp = ProtobufSchema(text).descriptor
    except RegistryError as exc:
        raise CliError(f"{path}: {exc}") from None
    if not fdp.message_type:
        raise CliError(f"{path} declares no message")
    pool = descriptor_pool.DescriptorPool()
    for serialized in well_known_files().values():
        pool.AddSerializedFile(serialized)
    fdp.name = path.name
    pool.AddSerializedFile(fdp.SerializeToString())
    name = message or fdp.message_type[0].name
    full = f"{fdp.package}.{name}" if fdp.package and "." not in name else name
    try:
        return GetMessageClass(pool.FindMessageTypeByName(full))
    except KeyError:
        raise CliError(f"{path} has no message {name}") from None


# -- decoding -------------------------------------------------------------------------


def raw(data: bytes) -> str:
    """UTF-8 text, else ``hex:`` and the bytes in hex."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "hex:" + data.hex()


class Decoder:
    """Decodes keys and values of one topic in one ``--format``; caches deserializers
    and Protobuf descriptors by schema id. Owned by the consume loop (one thread)."""

    def __init__(self, fmt: str, registry: Callable[[], Any], topic: str) -> None:
        self.fmt = fmt
        self.topic = topic
        self._registry = registry
        self._client: Any = None
        self._types: dict[int, str] = {}
        self._avro: Any = None
        self._json: Any = None
        self._protos: dict[int, tuple[Any, Any]] = {}

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._registry()
        return self._client

    def decode(self, data: bytes | None, key: bool = False) -> Any:
        """The decoded key or value as JSON-able data (``None`` stays ``None``).

        Raises:
            CliError: an explicit format that does not match the bytes.
        """
        if data is None:
            return None
        wire = len(data) >= _HEADER and data[0] == MAGIC
        if self.fmt == "text" or (self.fmt == "auto" and not wire):
            return raw(data)
        if self.fmt == "json" and not wire:
            return parse_json(raw(data))
        if not wire:
            raise CliError(f"not in the registry's wire format, cannot decode as {self.fmt}")
        schema_id = int.from_bytes(data[1:_HEADER], "big")
        kind = self._type(schema_id)
        if self.fmt != "auto" and kind != self.fmt.upper():
            raise CliError(f"schema id {schema_id} is {kind}, not {self.fmt}")
        if kind == "AVRO":
            return jsonable(self._avro_deserializer()(data, _context(self.topic, key)))
        if kind == "JSON":
            return self._json_deserializer()(data, _context(self.topic, key))
        return self._protobuf(schema_id, data[_HEADER:])

    def _type(self, schema_id: int) -> str:
        if schema_id not in self._types:
            from confluent_kafka.schema_registry.error import SchemaRegistryError

            try:
                schema = self.client.get_schema(schema_id)
            except SchemaRegistryError as exc:
                raise CliError(f"schema id {schema_id}: {exc.error_message}") from None
            self._types[schema_id] = schema.schema_type or "AVRO"
        return self._types[schema_id]

    def _avro_deserializer(self) -> Any:
        if self._avro is None:
            from confluent_kafka.schema_registry.avro import AvroDeserializer

            self._avro = AvroDeserializer(self.client)
        return self._avro

    def _json_deserializer(self) -> Any:
        if self._json is None:
            from confluent_kafka.schema_registry.json_schema import JSONDeserializer

            self._json = JSONDeserializer(None, schema_registry_client=self.client)
        return self._json

    def _protobuf(self, schema_id: int, payload: bytes) -> Any:
        from google.protobuf import json_format
        from google.protobuf.message_factory import GetMessageClass

        indexes, rest = _message_indexes(payload)
        pool, fdp = self._proto_file(schema_id)
        path, messages, package = [], fdp.message_type, fdp.package
        for i in indexes:
            if i >= len(messages):
                raise CliError(f"schema id {schema_id} has no message index {indexes}")
            path.append(messages[i].name)
            messages = messages[i].nested_type
        name = ".".join([package, *path] if package else path)
        msg = GetMessageClass(pool.FindMessageTypeByName(name))()
        msg.ParseFromString(rest)
        return json_format.MessageToDict(msg, preserving_proto_field_name=True)

    def _proto_file(self, schema_id: int) -> tuple[Any, Any]:
        """A pool holding the writer's file (and its references) and its descriptor."""
        if schema_id in self._protos:
            return self._protos[schema_id]
        from google.protobuf import descriptor_pb2, descriptor_pool

        from floe.registry.core.protobuf import well_known_files

        # a client of its own: the shared one caches schemas by id whatever their format
        client = self._registry()
        pool = descriptor_pool.DescriptorPool()
        added = set(well_known_files())
        for serialized in well_known_files().values():
            pool.AddSerializedFile(serialized)

        def add(name: str, schema: Any) -> Any:
            for ref in schema.references or []:
                if ref.name not in added:
                    ref_schema = client.get_version(ref.subject, ref.version, fmt="serialized")
                    add(ref.name, ref_schema.schema)
            fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(schema.schema_str))
            fdp.name = name
            pool.AddSerializedFile(fdp.SerializeToString())
            added.add(name)
            return fdp

        fdp = add(f"schema-{schema_id}.proto", client.get_schema(schema_id, fmt="serialized"))
        self._protos[schema_id] = (pool, fdp)
        return pool, fdp


def _message_indexes(payload: bytes) -> tuple[list[int], bytes]:
    """Confluent's message-index array (zig-zag varints; ``[0]`` is one zero byte)."""
    pos = 0

    def varint() -> int:
        nonlocal pos
        shift = result = 0
        while True:
            if pos >= len(payload):
                raise CliError("truncated Protobuf message indexes")
            byte = payload[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return (result >> 1) ^ -(result & 1)
            shift += 7

    count = varint()
    indexes = [varint() for _ in range(count)] if count else [0]
    return indexes, payload[pos:]
