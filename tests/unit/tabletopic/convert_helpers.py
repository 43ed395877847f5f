"""Shared helpers of the converter tests: build a converter for a registry schema and
convert payloads through the Confluent wire format."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from unittest.mock import patch

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, event, settings
from pyiceberg.schema import Schema

from floe.protocol.records import Record
from floe.registry.core.model import SchemaId
from floe.registry.core.schemas import ParsedSchema
from floe.tabletopic.convert import (
    ConversionResult,
    Converter,
    ConvertType,
    PartSpec,
    source_type,
    table_schema,
)
from floe.tabletopic.convert.wire import frame
from floe.types import PartitionId

PARTITION = PartitionId(2)


def by_id(*schemas: ParsedSchema, message: str | None = None) -> PartSpec:
    """A by_schema_id spec whose registry holds ``schemas`` as ids 1, 2, ...; the table
    is made from Protobuf message ``message`` (default: the first)."""
    table = {SchemaId(i): s for i, s in enumerate(schemas, start=1)}
    return PartSpec(ConvertType.BY_SCHEMA_ID, lookup=table.get, message_name=message)


def converter(
    value_schema: ParsedSchema,
    *,
    flatten: bool = False,
    key: PartSpec | None = None,
    table_from: ParsedSchema | None = None,
    extra: Sequence[ParsedSchema] = (),
    message: str | None = None,
) -> Converter:
    """A converter of by_schema_id values: id 1 is ``value_schema``, then ``extra``; the
    table is made from ``table_from`` (default ``value_schema``)."""
    value = by_id(value_schema, *extra, message=message)
    key = key or PartSpec(ConvertType.STRING)
    table = table_schema(
        source_type(value, table_from or value_schema), source_type(key), flatten=flatten
    )
    return Converter(table, value, key, flatten=flatten)


def records(*values: bytes | None, key: bytes | None = None) -> list[Record]:
    """Records at offsets 0.. with the given raw values."""
    return [Record(i, 1_000 + i, key, v) for i, v in enumerate(values)]


def convert_values(conv: Converter, *bodies: bytes, schema_id: int = 1) -> ConversionResult:
    """Frame ``bodies`` with ``schema_id`` and convert them."""
    return conv.convert(PARTITION, records(*(frame(schema_id, b) for b in bodies)))


def only_value(result: ConversionResult) -> Any:
    """The single row's ``_kafka_value`` (asserting there were no errors)."""
    assert result.errors == ()
    rows = result.batch.to_pylist()
    assert len(rows) == 1
    return rows[0]["_kafka_value"]


def reasons(result: ConversionResult) -> list[tuple[int, int, str]]:
    """The errors, with the object addresses some reasons carry (fastavro's) masked."""
    return [(e.partition, e.offset, re.sub("0x[0-9a-f]+", "0x?", e.reason)) for e in result.errors]


def _comparable(array: pa.Array) -> pa.Array:
    """``array`` with each float column as (is NaN, value or 0), for ``equals``, where
    NaN differs from itself (corrupt payloads decode to NaNs now and then)."""
    t, mask = array.type, array.is_null() if array.null_count else None
    if pa.types.is_floating(t):
        nan = pc.is_nan(array)
        return pa.StructArray.from_arrays([nan, pc.if_else(nan, 0, array)], ["nan", "v"])
    if pa.types.is_struct(t):
        children = [_comparable(array.field(i)) for i in range(t.num_fields)]
        return pa.StructArray.from_arrays(children, [f.name for f in t], mask=mask)
    if pa.types.is_map(t):
        items = _comparable(array.items)
        return pa.MapArray.from_arrays(array.offsets, array.keys, items, mask=mask)
    if pa.types.is_list(t):
        return pa.ListArray.from_arrays(array.offsets, _comparable(array.values), mask=mask)
    return array


def assert_same(got: ConversionResult, want: ConversionResult) -> None:
    assert reasons(got) == reasons(want)
    assert got.batch.schema.equals(want.batch.schema, check_metadata=True)
    for mine, theirs in zip(got.batch.columns, want.batch.columns, strict=True):
        # without metadata: pa.array drops a map's key and item field metadata, arrays
        # built from their children keep it; writers take field ids from the batch schema
        assert mine.type.equals(theirs.type)
        assert _comparable(mine).equals(_comparable(theirs))


@contextmanager
def counting(decoder: type[Any]) -> Iterator[list[int]]:
    """Counts the bulk decodes of ``decoder`` (a native decoder class) that returned an
    array."""
    done = [0]
    real = decoder.decode

    def decode(self: Any, payloads: list[bytes]) -> pa.Array:
        out = real(self, payloads)
        done[0] += 1
        return out

    with patch.object(decoder, "decode", decode):
        yield done


BULK_SETTINGS = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
"""Hypothesis settings of the bulk-decoding differential tests."""


def value_spec(schema: ParsedSchema, *, latest: bool) -> PartSpec:
    """Values of ``schema``: by latest schema, or by schema id (``schema`` is id 1)."""
    if latest:
        return PartSpec(ConvertType.BY_LATEST_SCHEMA, latest=schema)
    return PartSpec(ConvertType.BY_SCHEMA_ID, lookup={SchemaId(1): schema}.get)


def bulk_and_reference(
    table: Schema,
    value: PartSpec,
    key: PartSpec,
    records: list[Record],
    decoder: type[Any],
    *,
    flatten: bool,
) -> tuple[ConversionResult, int]:
    """Converts ``records`` in bulk (every run, halved down to single records:
    ``min_native_run=1``) and per record (``min_native_run=None``, the reference);
    asserts both give the same batch and errors. Returns the bulk result and how many
    bulk decodes of ``decoder`` returned an array."""
    bulk = Converter(table, value, key, flatten=flatten, min_native_run=1)
    reference = Converter(table, value, key, flatten=flatten, min_native_run=None)
    with counting(decoder) as done:
        got = bulk.convert(PARTITION, records)
    assert_same(got, reference.convert(PARTITION, records))
    return got, done[0]


def every_record_accounted(got: ConversionResult, count: int, bulk: int) -> None:
    """Each of the ``count`` records is a row or an error; notes what the case exercised."""
    rows = set(got.batch.column("_kafka_metadata").field("offset").to_pylist())
    event("bulk decodes" if bulk else "per record only")
    event("some errors" if got.errors else "no errors")
    assert rows | {e.offset for e in got.errors} == set(range(count))
