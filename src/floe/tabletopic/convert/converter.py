"""Kafka records -> one Arrow record batch in the table's row layout.

A :class:`Converter` is built once per table schema and (key, value) decoding spec and
then called per partition range. It decodes each record (raw bytes, UTF-8, Confluent
wire format with a schema looked up by id, or a payload of the subject's latest schema),
builds each column with one ``pa.array`` call, and returns the batch together with the
records it could not convert as :class:`ConversionError` values: the topic's error
tolerance decides what to do with them, never an exception.

Invariants: the batch has exactly the Arrow schema of the table (:func:`.layout.
arrow_schema`), rows in input order minus the failed records; values decoded with an
older or newer schema than the table's fill missing columns with null and drop fields
the table lacks (the pipeline evolves the table first); one record's failure never
fails another record. A record timestamp whose microseconds do not fit 64 bits is a
per-record error (checked before scaling, and scaled with checked arithmetic), never a
wrapped ``_kafka_metadata.timestamp``. Codecs are cached per schema id (and Protobuf
message path); a converter is owned by one task at a time (the cache is not locked).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.schema import Schema
from pyiceberg.types import BinaryType, StringType

from floe.protocol.records import Record
from floe.registry.core.avro import AvroSchema
from floe.registry.core.json_schema import JsonSchema
from floe.registry.core.model import SchemaId
from floe.registry.core.protobuf import ProtobufSchema
from floe.registry.core.schemas import ParsedSchema
from floe.tabletopic.convert import wire
from floe.tabletopic.convert.avro import AvroCodec
from floe.tabletopic.convert.json_schema import JsonCodec
from floe.tabletopic.convert.layout import (
    HEADER_COLUMN,
    KEY_COLUMN,
    METADATA_COLUMN,
    UTC_MICROS,
    VALUE_COLUMN,
    ConvertType,
    TimestampKind,
    arrow_schema,
)
from floe.tabletopic.convert.protobuf import ProtobufCodec, message_name
from floe.tabletopic.convert.source import SourceType, UnsupportedSchemaError
from floe.tabletopic.convert.temporal import MAX_MILLIS, RANGE
from floe.types import Offset, PartitionId

Codec = AvroCodec | JsonCodec | ProtobufCodec
SchemaLookup = Callable[[SchemaId], ParsedSchema | str | None]
"""The registry's schema for an id, a reason why records of that id are refused, or
None when the id is unknown (no I/O expected). Any exception it raises propagates out
of :meth:`Converter.convert` (the pipeline uses that to redo a round)."""


@dataclass(frozen=True, slots=True)
class ConversionError:
    """A record that did not become a row: where it is and why."""

    partition: PartitionId
    offset: Offset
    reason: str


@dataclass(frozen=True, slots=True)
class ConversionResult:
    """The rows that converted, and the records that did not."""

    batch: pa.RecordBatch
    errors: tuple[ConversionError, ...]


@dataclass(frozen=True, slots=True)
class PartSpec:
    """How the key or the value of a topic's records is decoded.

    ``lookup`` is required for ``by_schema_id``; ``latest`` (the subject's latest
    schema) for ``by_latest_schema``, unless ``refused`` says why the table cannot
    hold the latest schema: then every non-null payload is a conversion error with
    that reason. ``message_name`` picks a Protobuf message of ``latest`` (default: the
    file's first message).
    """

    convert: ConvertType
    lookup: SchemaLookup | None = None
    latest: ParsedSchema | None = None
    message_name: str | None = None
    refused: str | None = None


def codec_for(schema: ParsedSchema, message: str | None = None) -> Codec:
    """The codec of a parsed registry schema (``message``: Protobuf full name).

    Raises:
        UnsupportedSchemaError: the schema has a construct the layout refuses.
    """
    if isinstance(schema, AvroSchema):
        return AvroCodec(schema)
    if isinstance(schema, JsonSchema):
        return JsonCodec(schema)
    if isinstance(schema, ProtobufSchema):
        return ProtobufCodec(schema, message)
    raise UnsupportedSchemaError("", f"unknown schema type {type(schema).__name__}")


def source_type(spec: PartSpec, schema: ParsedSchema | None = None) -> SourceType:
    """The source type of a key or value part, for creating or evolving the table:
    binary for ``raw``, string for ``string``, else the mapping of ``schema`` (the
    subject's latest schema; defaults to ``spec.latest``).

    Raises:
        UnsupportedSchemaError: a schema mode without a schema, or a refused schema.
    """
    if spec.convert is ConvertType.RAW:
        return BinaryType()
    if spec.convert is ConvertType.STRING:
        return StringType()
    if schema is None and spec.refused is not None:
        raise UnsupportedSchemaError("", spec.refused)
    chosen = schema or spec.latest
    if chosen is None:
        raise UnsupportedSchemaError("", f"{spec.convert} needs a registered schema")
    return codec_for(chosen, spec.message_name).source


class _SchemaError(ValueError):
    """Internal: a record whose schema id is unknown or refused (a ConversionError)."""


class _Decoder:
    """Decodes one part (key or value) of records per its :class:`PartSpec`."""

    def __init__(self, spec: PartSpec, what: str) -> None:
        """Raises:
        UnsupportedSchemaError: by_latest_schema with a refused schema.
        ValueError: a schema mode without its lookup or latest schema.
        """
        # schema id -> its codec, its Protobuf schema (codec per message path) or why not
        self._schemas: dict[SchemaId, Codec | ProtobufSchema | str] = {}
        self._messages: dict[tuple[SchemaId, tuple[int, ...]], Codec | str] = {}
        self.decode: Callable[[bytes | None], Any]
        if spec.convert is ConvertType.RAW:
            self.decode = _raw
        elif spec.convert is ConvertType.STRING:
            self.decode = _utf8
        elif spec.convert is ConvertType.BY_SCHEMA_ID:
            if spec.lookup is None:
                raise ValueError(f"{what}: by_schema_id needs a schema lookup")
            self._lookup: SchemaLookup = spec.lookup
            self.decode = self._by_id
        elif spec.refused is not None:
            self._refused = spec.refused
            self.decode = self._refuse
        else:
            if spec.latest is None:
                raise ValueError(f"{what}: by_latest_schema needs the latest schema")
            codec = codec_for(spec.latest, spec.message_name)
            self.decode = lambda data: None if data is None else codec.decode(data)

    def _refuse(self, data: bytes | None) -> None:
        """Raises:
        _SchemaError: for any payload (a null needs no schema).
        """
        if data is not None:
            raise _SchemaError(self._refused)

    def _resolve(self, schema_id: SchemaId) -> Codec | ProtobufSchema | str:
        schema = self._lookup(schema_id)
        if schema is None:
            return f"unknown schema id {schema_id}"
        if isinstance(schema, str):
            return schema
        if isinstance(schema, ProtobufSchema):
            return schema
        try:
            return codec_for(schema)
        except UnsupportedSchemaError as exc:
            return f"schema id {schema_id} is not supported: {exc}"

    def _message(
        self, schema: ProtobufSchema, schema_id: SchemaId, indexes: tuple[int, ...]
    ) -> Codec | str:
        try:
            return codec_for(schema, message_name(schema, indexes))
        except UnsupportedSchemaError as exc:
            return f"schema id {schema_id} message {list(indexes)} is not supported: {exc}"

    def _by_id(self, data: bytes | None) -> Any:
        """Raises:
        ValueError: bad framing, an unknown or refused schema, an undecodable payload.
        """
        if data is None:
            return None
        schema_id, body = wire.split(data)
        entry = self._schemas.get(schema_id)
        if entry is None:
            entry = self._schemas[schema_id] = self._resolve(schema_id)
        if isinstance(entry, ProtobufSchema):
            indexes, body = wire.message_indexes(body)
            found = self._messages.get((schema_id, indexes))
            if found is None:
                found = self._messages[(schema_id, indexes)] = self._message(
                    entry, schema_id, indexes
                )
            entry = found
        if isinstance(entry, str):
            raise _SchemaError(entry)
        return entry.decode(body)


def _raw(data: bytes | None) -> bytes | None:
    return data


def _utf8(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8")


_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError)


class Converter:
    """Turns records of one partition range into a record batch of the table's layout.

    Owned by one task at a time (its codec cache is unlocked); cheap to keep per table.
    """

    def __init__(self, table: Schema, value: PartSpec, key: PartSpec, *, flatten: bool) -> None:
        """``table`` is the table's current Iceberg schema (the union of all schema
        versions seen, as evolved by the pipeline).

        Raises:
            UnsupportedSchemaError: a by_latest_schema part with a refused schema, or a
                table schema with no Arrow mapping.
            ValueError: a part spec without the lookup or schema its mode needs, or a
                table schema that is not in the row layout.
        """
        self.schema = arrow_schema(table)
        names = self.schema.names
        if names[-3:] != [KEY_COLUMN, HEADER_COLUMN, METADATA_COLUMN]:
            raise ValueError("the table schema does not end with the _kafka_* columns")
        if not flatten and names[:-3] != [VALUE_COLUMN]:
            raise ValueError("without flatten the table must have one _kafka_value column")
        self._flatten = flatten
        self._value_type: pa.DataType = (
            pa.struct([self.schema.field(n) for n in names[:-3]])
            if flatten
            else self.schema.field(VALUE_COLUMN).type
        )
        self._key_type: pa.DataType = self.schema.field(KEY_COLUMN).type
        self._header_type: pa.DataType = self.schema.field(HEADER_COLUMN).type
        self._metadata_fields = list(self.schema.field(METADATA_COLUMN).type)
        self._value = _Decoder(value, "value")
        self._key = _Decoder(key, "key")

    def convert(
        self,
        partition: PartitionId,
        records: Sequence[Record],
        timestamp_type: TimestampKind | Sequence[TimestampKind] = TimestampKind.CREATE_TIME,
    ) -> ConversionResult:
        """Rows for ``records`` (one partition, any offsets) and the records that failed.

        ``timestamp_type`` is the batch timestamp type of all records, or one per record.
        Never raises for bad data: undecodable payloads, a wrong magic byte, an unknown
        schema id, or a value that does not fit its column become ConversionErrors.
        """
        errors: list[ConversionError] = []
        values: list[Any] = []
        keys: list[Any] = []
        kept: list[int] = []
        decode_value = self._value.decode
        decode_key = self._key.decode
        flatten = self._flatten
        for i, record in enumerate(records):
            if record.timestamp > MAX_MILLIS:  # negative: no timestamp (null), see _batch
                reason = f"record timestamp {record.timestamp} ms is outside {RANGE}"
                errors.append(ConversionError(partition, Offset(record.offset), reason))
                continue
            try:
                value = decode_value(record.value)
                key = decode_key(record.key)
            except ValueError as exc:
                errors.append(ConversionError(partition, Offset(record.offset), str(exc)))
                continue
            if flatten and value is not None and type(value) is not dict:
                errors.append(
                    ConversionError(
                        partition, Offset(record.offset), "value is not a record to flatten"
                    )
                )
                continue
            values.append(value)
            keys.append(key)
            kept.append(i)
        value_array, key_array = self._columns(
            values=values,
            keys=keys,
            kept=kept,
            records=records,
            partition=partition,
            errors=errors,
        )
        errors.sort(key=lambda e: e.offset)
        batch = self._batch(
            value_array=value_array,
            key_array=key_array,
            kept=kept,
            records=records,
            partition=partition,
            timestamp_type=timestamp_type,
        )
        return ConversionResult(batch, tuple(errors))

    def _columns(
        self,
        *,
        values: list[Any],
        keys: list[Any],
        kept: list[int],
        records: Sequence[Record],
        partition: PartitionId,
        errors: list[ConversionError],
    ) -> tuple[pa.Array, pa.Array]:
        """The value and key arrays; rows that do not fit their type are moved from
        ``kept`` to ``errors`` (in place) and the arrays rebuilt without them."""
        try:
            return pa.array(values, self._value_type), pa.array(keys, self._key_type)
        except _ARROW_ERRORS:
            pass
        good = []
        for row, (value, key) in enumerate(zip(values, keys, strict=True)):
            reason = _misfit(value, self._value_type, "value") or _misfit(
                key, self._key_type, "key"
            )
            if reason is None:
                good.append(row)
            else:
                offset = Offset(records[kept[row]].offset)
                errors.append(ConversionError(partition, offset, reason))
        kept[:] = [kept[row] for row in good]
        return (
            pa.array([values[row] for row in good], self._value_type),
            pa.array([keys[row] for row in good], self._key_type),
        )

    def _batch(
        self,
        *,
        value_array: pa.Array,
        key_array: pa.Array,
        kept: list[int],
        records: Sequence[Record],
        partition: PartitionId,
        timestamp_type: TimestampKind | Sequence[TimestampKind],
    ) -> pa.RecordBatch:
        rows = [records[i] for i in kept]
        n = len(rows)
        timestamps = pa.array([r.timestamp for r in rows], pa.int64())
        # checked: convert() dropped timestamps beyond MAX_MILLIS, so this never raises
        timestamps = pc.if_else(
            pc.less(timestamps, 0),
            pa.scalar(None, pa.int64()),
            pc.multiply_checked(pc.max_element_wise(timestamps, 0), 1000),
        ).cast(UTC_MICROS)
        if isinstance(timestamp_type, str):
            kinds = pa.repeat(pa.scalar(str(timestamp_type)), n)
        else:
            kinds = pa.array([str(timestamp_type[i]) for i in kept], pa.string())
        metadata = pa.StructArray.from_arrays(
            [
                pa.repeat(pa.scalar(partition, pa.int32()), n),
                pa.array([r.offset for r in rows], pa.int64()),
                timestamps,
                kinds,
            ],
            fields=self._metadata_fields,
        )
        headers = pa.array([r.headers for r in rows], self._header_type)
        head = value_array.flatten() if self._flatten else [value_array]
        return pa.RecordBatch.from_arrays([*head, key_array, headers, metadata], schema=self.schema)


def _misfit(value: Any, arrow_type: pa.DataType, what: str) -> str | None:
    """Why one value does not fit ``arrow_type``, or None when it does."""
    try:
        pa.array([value], arrow_type)
    except _ARROW_ERRORS as exc:
        return f"{what} does not fit the column type: {exc}"
    return None
