"""Kafka records -> one Arrow record batch in the table's row layout.

A :class:`Converter` is built once per table schema and (key, value) decoding spec and
then called per partition range. It decodes each record (raw bytes, UTF-8, Confluent
wire format with a schema looked up by id, or a payload of the subject's latest schema),
builds each column with one ``pa.array`` call, and returns the batch together with the
records it could not convert as :class:`ConversionError` values: the topic's error
tolerance decides what to do with them, never an exception.

Values of one schema (one schema id and Protobuf message, or the latest schema) are
decoded in bulk when there are at least ``min_native_run`` of them in the call: Avro by
:mod:`.avro_native`, JSON Schema by :class:`BulkJsonDecoder` (orjson and the schema's
normalizers over the whole run, then one ``pa.array``: the per-record functions without
the per-record bookkeeping), Protobuf by :class:`BulkProtobufDecoder` (upb parses, then
the messages are read column by column). A run that does not decode exactly is halved
and retried, down to runs decoded per record as above, which name the bad record. Avro
schemas the native reader does not handle, and keys, are always decoded per record.

With ``debezium`` (``flatten_debezium``) the values are Debezium envelopes: both paths
decode the whole envelope (:attr:`.debezium.Unwrap.envelope_type`), a value that is not
one is a per-record error (a native run holding one is decoded per record), and the
batch's row columns and ``_cdc`` are unwrapped from the envelopes at the end.

Invariants: the batch has exactly the Arrow schema of the table (:func:`.layout.
arrow_schema`), rows in input order minus the failed records; values decoded with an
older or newer schema than the table's fill missing columns with null and drop fields
the table lacks (the pipeline evolves the table first); one record's failure never
fails another record; the native path yields exactly the per-record path's batch and
errors (``min_native_run=None`` is that reference path). A record timestamp whose
microseconds do not fit 64 bits is a per-record error (checked before scaling, and
scaled with checked arithmetic), never a wrapped ``_kafka_metadata.timestamp``. Codecs
(and native decoders) are cached per schema id (and Protobuf message path); a converter
is owned by one task at a time (the cache is not locked).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

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
from floe.tabletopic.convert.avro_native import NativeAvroDecoder, NativeDecodeError
from floe.tabletopic.convert.debezium import CDC_COLUMN, Unwrap
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


class BulkJsonDecoder:
    """Decodes runs of JSON payloads of one JSON Schema into arrays of ``target``: the
    codec's per-record decoding (orjson, the schema's date/time normalizers) over the
    whole run, then one ``pa.array`` of the target type, which is what decoding each
    record and building the column does, minus the per-record bookkeeping. (Arrow's own
    JSON reader measured 1.4x faster on the decode alone, but parses differently from
    orjson: duplicate keys, several objects in one payload.)"""

    def __init__(
        self, codec: JsonCodec, target: pa.DataType, *, framed: bool, records: bool
    ) -> None:
        """``framed``: payloads start with the 5-byte wire-format header; ``records``:
        every value must be an object or null (``transform.value.type = flatten``)."""
        self._decode = codec.decode
        self._target = target
        self._skip = wire.HEADER_SIZE if framed else 0
        self._records = records

    def decode(self, payloads: Sequence[bytes]) -> pa.Array:
        """One array of the target type, a row per payload, in order.

        Raises:
            NativeDecodeError: a payload that does not decode or fit (the caller decodes
                the run per record, which reports it).
        """
        decode, skip = self._decode, self._skip
        try:
            values = [decode(memoryview(p)[skip:]) for p in payloads]
            if self._records and any(v is not None and type(v) is not dict for v in values):
                raise NativeDecodeError("a value is not a record to flatten")
            return pa.array(values, self._target)
        except (*_ARROW_ERRORS, RecursionError) as exc:
            raise NativeDecodeError(str(exc)) from None


class BulkProtobufDecoder:
    """Decodes runs of payloads of one Protobuf message type into arrays of ``target``:
    upb parses each payload, then the messages are read column by column
    (:meth:`.protobuf.ProtobufCodec.columns`), not into one dict per record."""

    def __init__(self, codec: ProtobufCodec, target: pa.DataType, *, skip: int) -> None:
        """``skip``: the bytes before the message (wire-format header and message-index
        path; 0 for unframed payloads).

        Raises:
            UnsupportedSchemaError: ``target`` has another shape than the message.
        """
        self._read = codec.columns(target)
        self._skip = skip

    def decode(self, payloads: Sequence[bytes]) -> pa.Array:
        """One array of the target type, a row per payload, in order.

        Raises:
            NativeDecodeError: a payload that does not parse or fit (the caller decodes
                the run per record, which reports it).
        """
        skip = self._skip
        try:
            return self._read([p[skip:] for p in payloads] if skip else payloads)
        except _ARROW_ERRORS as exc:
            raise NativeDecodeError(str(exc)) from None


NativeDecoder = NativeAvroDecoder | BulkJsonDecoder | BulkProtobufDecoder


class _Decoder:
    """Decodes one part (key or value) of records per its :class:`PartSpec`; with a
    ``native`` Arrow type, also finds the bulk decoder of a payload's schema (and
    Protobuf message) (``records``: values must be objects, as flatten needs)."""

    def __init__(
        self, spec: PartSpec, what: str, native: pa.DataType | None = None, *, records: bool = False
    ) -> None:
        """Raises:
        UnsupportedSchemaError: by_latest_schema with a refused schema.
        ValueError: a schema mode without its lookup or latest schema.
        """
        # schema id -> its codec, its Protobuf schema (codec per message path) or why not
        self._schemas: dict[SchemaId, Codec | ProtobufSchema | str] = {}
        self._messages: dict[tuple[SchemaId, tuple[int, ...]], Codec | str] = {}
        # wire-format header -> the native decoder of its schema, or None (per record);
        # or its Protobuf schema (the decoder depends on the message-index path too)
        self._natives: dict[bytes, NativeDecoder | None] = {}
        self._protobuf_heads: dict[bytes, ProtobufSchema] = {}
        # header and message-index path -> the native decoder of that message, or None;
        # the lengths of those prefixes
        self._message_natives: dict[bytes, NativeDecoder | None] = {}
        self._prefix_sizes: list[int] = []
        self._native_type = native
        self._records = records
        self.native: Callable[[bytes], NativeDecoder | None] | None = None
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
            if native is not None:
                self.native = self._native_by_id
        elif spec.refused is not None:
            self._refused = spec.refused
            self.decode = self._refuse
        else:
            if spec.latest is None:
                raise ValueError(f"{what}: by_latest_schema needs the latest schema")
            codec = codec_for(spec.latest, spec.message_name)
            self.decode = lambda data: None if data is None else codec.decode(data)
            latest = self._native_decoder(codec, skip=0)
            if latest is not None:
                self.native = lambda data: latest

    def _native_decoder(self, codec: Codec, *, skip: int) -> NativeDecoder | None:
        """The bulk decoder of ``codec``'s payloads after ``skip`` bytes of framing
        (0 or the wire-format header, plus the message-index path for Protobuf)."""
        target = self._native_type
        if target is None:
            return None
        if isinstance(codec, JsonCodec):
            return BulkJsonDecoder(codec, target, framed=skip > 0, records=self._records)
        try:
            if isinstance(codec, ProtobufCodec):
                return BulkProtobufDecoder(codec, target, skip=skip)
            return NativeAvroDecoder(codec, target, framed=skip > 0)
        except UnsupportedSchemaError:
            return None

    def _native_by_id(self, data: bytes) -> NativeDecoder | None:
        """The native decoder of a framed payload's schema (None: decode it per record,
        which also reports bad framing or an unknown or refused schema id)."""
        head = data[: wire.HEADER_SIZE]
        protobuf = self._protobuf_heads.get(head)
        if protobuf is not None:
            return self._native_by_message(data, protobuf)
        try:
            return self._natives[head]
        except KeyError:
            pass
        if len(head) < wire.HEADER_SIZE or head[0] != wire.MAGIC:
            return None  # not cached: junk must not grow the cache
        entry = self._entry(wire.split(head)[0])
        if isinstance(entry, ProtobufSchema):
            self._protobuf_heads[head] = entry
            return self._native_by_message(data, entry)
        found = self._natives[head] = (
            None if isinstance(entry, str) else self._native_decoder(entry, skip=wire.HEADER_SIZE)
        )
        return found

    def _native_by_message(self, data: bytes, schema: ProtobufSchema) -> NativeDecoder | None:
        """The native decoder of a framed Protobuf payload's message, by its header and
        message-index path bytes. Those prefixes are prefix-free (a fixed header, then
        self-delimiting varints), so a payload starting with a known prefix has that
        prefix: the known lengths are tried before the path is parsed."""
        natives = self._message_natives
        for size in self._prefix_sizes:
            prefix = data[:size]
            if prefix in natives:
                return natives[prefix]
        try:
            indexes, body = wire.message_indexes(memoryview(data)[wire.HEADER_SIZE :])
        except wire.FramingError:
            return None
        prefix = data[: len(data) - len(body)]
        codec = self._message_codec(schema, wire.split(data)[0], indexes)
        if isinstance(codec, str):
            return None  # not cached: a payload may name any path
        found = natives[prefix] = self._native_decoder(codec, skip=len(prefix))
        if len(prefix) not in self._prefix_sizes:
            self._prefix_sizes.append(len(prefix))
        return found

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

    def _entry(self, schema_id: SchemaId) -> Codec | ProtobufSchema | str:
        entry = self._schemas.get(schema_id)
        if entry is None:
            entry = self._schemas[schema_id] = self._resolve(schema_id)
        return entry

    def _message_codec(
        self, schema: ProtobufSchema, schema_id: SchemaId, indexes: tuple[int, ...]
    ) -> Codec | str:
        """The codec of a message of a Protobuf schema, or why not (cached for the paths
        the schema defines: a payload may name any other)."""
        key = (schema_id, indexes)
        found = self._messages.get(key)
        if found is not None:
            return found
        why = f"schema id {schema_id} message {list(indexes)} is not supported"
        try:
            name = message_name(schema, indexes)
        except UnsupportedSchemaError as exc:
            return f"{why}: {exc}"
        try:
            found = codec_for(schema, name)
        except UnsupportedSchemaError as exc:
            found = f"{why}: {exc}"
        self._messages[key] = found
        return found

    def _by_id(self, data: bytes | None) -> Any:
        """Raises:
        ValueError: bad framing, an unknown or refused schema, an undecodable payload.
        """
        if data is None:
            return None
        schema_id, body = wire.split(data)
        entry = self._entry(schema_id)
        if isinstance(entry, ProtobufSchema):
            indexes, body = wire.message_indexes(body)
            entry = self._message_codec(entry, schema_id, indexes)
        if isinstance(entry, str):
            raise _SchemaError(entry)
        return entry.decode(body)


def _raw(data: bytes | None) -> bytes | None:
    return data


def _utf8(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8")


_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError)

MIN_NATIVE_RUN = 32
"""The fewest values of one schema in a call that are decoded natively: a native decode
costs ~0.1 ms whatever its size, a value decoded per record ~4-5 us (2-core dev machine)."""

# what became of each record of a convert() call
_FAILED, _PER_RECORD, _NATIVE = 0, 1, 2


@dataclass(slots=True)
class _Rows:
    """One convert() call's records and, per record, its value decoded per record, its
    key and what became of it (``state``); the errors so far."""

    partition: PartitionId
    records: Sequence[Record]
    values: list[Any]
    keys: list[Any]
    state: bytearray
    errors: list[ConversionError]


class Converter:
    """Turns records of one partition range into a record batch of the table's layout.

    Owned by one task at a time (its codec cache is unlocked); cheap to keep per table.
    """

    def __init__(
        self,
        table: Schema,
        value: PartSpec,
        key: PartSpec,
        *,
        flatten: bool,
        debezium: bool = False,
        min_native_run: int | None = MIN_NATIVE_RUN,
    ) -> None:
        """``table`` is the table's current Iceberg schema (the union of all schema
        versions seen, as evolved by the pipeline). ``debezium``: values are Debezium
        envelopes (``flatten_debezium``; implies ``flatten``). ``min_native_run``: see
        :data:`MIN_NATIVE_RUN`; None decodes every record per record (the reference
        the native path is tested against).

        Raises:
            UnsupportedSchemaError: a by_latest_schema part with a refused schema, or a
                table schema with no Arrow mapping.
            ValueError: a part spec without the lookup or schema its mode needs, or a
                table schema that is not in the row layout.
        """
        self.schema = arrow_schema(table)
        names = self.schema.names
        flatten = flatten or debezium
        if names[-3:] != [KEY_COLUMN, HEADER_COLUMN, METADATA_COLUMN]:
            raise ValueError("the table schema does not end with the _kafka_* columns")
        if not flatten and names[:-3] != [VALUE_COLUMN]:
            raise ValueError("without flatten the table must have one _kafka_value column")
        if debezium and CDC_COLUMN not in names[:-3]:
            raise ValueError("flatten_debezium needs the table's _cdc column")
        self._flatten = flatten
        self._head = names[:-3]
        self._value_type: pa.DataType = (
            pa.struct([self.schema.field(n) for n in names[:-3]])
            if flatten
            else self.schema.field(VALUE_COLUMN).type
        )
        self._unwrap: Unwrap | None = None
        if debezium:
            row = pa.struct([self.schema.field(n) for n in names[:-3] if n != CDC_COLUMN])
            self._unwrap = Unwrap(row, self.schema.field(CDC_COLUMN).type)
            self._value_type = self._unwrap.envelope_type
        self._key_type: pa.DataType = self.schema.field(KEY_COLUMN).type
        self._header_type: pa.DataType = self.schema.field(HEADER_COLUMN).type
        self._metadata_fields = list(self.schema.field(METADATA_COLUMN).type)
        self._min_native_run = max(1, min_native_run or 1)  # a failed run of 1 is per record
        native = None if min_native_run is None else self._value_type
        self._value = _Decoder(value, "value", native, records=flatten)
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
        n = len(records)
        rows = _Rows(partition, records, [None] * n, [None] * n, bytearray(n), [])
        errors, keys, state = rows.errors, rows.keys, rows.state
        runs: dict[NativeDecoder, list[int]] = {}
        native = self._value.native
        decode_key = self._key.decode
        for i, record in enumerate(records):
            if record.timestamp > MAX_MILLIS:  # negative: no timestamp (null), see _batch
                reason = f"record timestamp {record.timestamp} ms is outside {RANGE}"
                errors.append(ConversionError(partition, Offset(record.offset), reason))
                continue
            decoder = None if native is None or record.value is None else native(record.value)
            if decoder is not None:
                try:
                    keys[i] = decode_key(record.key)
                except ValueError:
                    pass  # per record below: a bad value is reported before a bad key
                else:
                    state[i] = _NATIVE
                    runs.setdefault(decoder, []).append(i)
                    continue
            self._decode_one(rows, i)
        pieces: list[tuple[list[int], pa.Array]] = []
        for decoder, indices in runs.items():
            for i in self._decode_native(decoder, indices, records, pieces):
                self._decode_one(rows, i)
        kept = [i for i in range(n) if state[i]]
        value_array, key_array = self._columns(rows, kept, pieces)
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

    def _decode_one(self, rows: _Rows, i: int) -> None:
        """Decodes record ``i`` per record: its value and key, or its error."""
        record = rows.records[i]
        rows.state[i] = _FAILED  # until it converts (it may come back from a native run)
        try:
            value = self._value.decode(record.value)
            key = self._key.decode(record.key)
        except ValueError as exc:
            rows.errors.append(ConversionError(rows.partition, Offset(record.offset), str(exc)))
            return
        if self._flatten and value is not None and type(value) is not dict:
            reason = "value is not a record to flatten"
            rows.errors.append(ConversionError(rows.partition, Offset(record.offset), reason))
            return
        if self._unwrap is not None and value is not None:
            why = self._unwrap.error(value)
            if why is not None:
                rows.errors.append(ConversionError(rows.partition, Offset(record.offset), why))
                return
        rows.values[i] = value
        rows.keys[i] = key
        rows.state[i] = _PER_RECORD

    def _decode_native(
        self,
        decoder: NativeDecoder,
        indices: list[int],
        records: Sequence[Record],
        pieces: list[tuple[list[int], pa.Array]],
    ) -> list[int]:
        """Decodes the values of records ``indices`` natively into ``pieces`` (in
        place); returns the indices left to decode per record: a run shorter than
        ``min_native_run``, or the halves of a failed run that are."""
        if len(indices) < self._min_native_run:
            return indices
        # a run only holds records with a value (see convert)
        payloads = cast("list[bytes]", [records[i].value for i in indices])
        try:
            array = decoder.decode(payloads)
            if self._unwrap is not None and not self._unwrap.valid(array):
                raise NativeDecodeError("a value is not a Debezium envelope")
            pieces.append((indices, array))
        except NativeDecodeError:
            if len(indices) < 2 * self._min_native_run:
                return indices
            half = len(indices) // 2
            return [
                *self._decode_native(decoder, indices[:half], records, pieces),
                *self._decode_native(decoder, indices[half:], records, pieces),
            ]
        return []

    def _columns(
        self, rows: _Rows, kept: list[int], pieces: list[tuple[list[int], pa.Array]]
    ) -> tuple[pa.Array, pa.Array]:
        """The value and key arrays of the ``kept`` rows; rows that do not fit their type
        are moved from ``kept`` to ``rows.errors`` (in place) and the arrays rebuilt
        without them. Natively decoded values always fit (the native path fails
        otherwise)."""
        values, keys, state = rows.values, rows.keys, rows.state
        per_record = [i for i in kept if state[i] == _PER_RECORD] if pieces else kept
        try:
            head = pa.array([values[i] for i in per_record], self._value_type)
            key_array = pa.array([keys[i] for i in kept], self._key_type)
        except _ARROW_ERRORS:
            good = []
            for i in kept:
                reason = (
                    _misfit(values[i], self._value_type, "value")
                    if state[i] == _PER_RECORD
                    else None
                ) or _misfit(keys[i], self._key_type, "key")
                if reason is None:
                    good.append(i)
                else:
                    offset = Offset(rows.records[i].offset)
                    rows.errors.append(ConversionError(rows.partition, offset, reason))
            kept[:] = good
            per_record = [i for i in kept if state[i] == _PER_RECORD]
            head = _fitting([values[i] for i in per_record], self._value_type)
            key_array = _fitting([keys[i] for i in kept], self._key_type)
        if not pieces:
            return head, key_array
        if not per_record and len(pieces) == 1 and len(pieces[0][0]) == len(kept):
            return pieces[0][1], key_array  # one native run, every row kept: input order
        # rows come per record first, then run by run: take them back into input order
        position = [0] * len(rows.records)
        for j, i in enumerate(per_record):
            position[i] = j
        base = len(per_record)
        for indices, array in pieces:
            for j, i in enumerate(indices):
                position[i] = base + j
            base += len(array)
        combined = pa.concat_arrays([head, *(array for _, array in pieces)])
        return combined.take(pa.array([position[i] for i in kept], pa.int64())), key_array

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
        if self._unwrap is not None:
            row, cdc = self._unwrap.unwrap(value_array, metadata.field("offset"))
            columns = dict(zip(self._unwrap.row_type.names, row.flatten(), strict=True))
            columns[CDC_COLUMN] = cdc
            head = [columns[n] for n in self._head]
        else:
            head = value_array.flatten() if self._flatten else [value_array]
        return pa.RecordBatch.from_arrays([*head, key_array, headers, metadata], schema=self.schema)


def _fitting(values: list[Any], arrow_type: pa.DataType) -> pa.Array:
    """One array of ``values``, each of which fits ``arrow_type`` alone. pyarrow picks how
    it reads a struct (a dict, or a sequence of pairs) from the first value, so values
    that fit one by one can fail together: then each is converted alone."""
    try:
        return pa.array(values, arrow_type)
    except _ARROW_ERRORS:
        return pa.concat_arrays([pa.array([v], arrow_type) for v in values])


def _misfit(value: Any, arrow_type: pa.DataType, what: str) -> str | None:
    """Why one value does not fit ``arrow_type``, or None when it does."""
    try:
        pa.array([value], arrow_type)
    except _ARROW_ERRORS as exc:
        return f"{what} does not fit the column type: {exc}"
    return None
