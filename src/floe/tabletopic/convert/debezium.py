"""Debezium change-event envelopes (``table.topic.transform.value.type=flatten_debezium``).

A Debezium value is an envelope: a record with ``before`` and ``after`` (the row before
and after the change, each a nullable record of the table's columns), ``op`` (``c``
create, ``u`` update, ``d`` delete, ``r`` snapshot read), ``ts_ms`` (when the connector
handled the event), ``source`` (where the change comes from: connector, database, table,
log position...) and optionally ``transaction``. A table topic of envelopes holds the
*row*: the row record's fields become the top-level columns exactly as ``flatten`` makes
them of a plain value, plus one struct column ``_cdc`` (:func:`cdc_type`): ``op``,
``ts`` (``ts_ms`` as a UTC timestamp), ``offset`` (the record's Kafka offset) and
``source`` (the envelope's ``source`` struct as it is, so it evolves like any nested
column). The row of a delete is ``before``; of any other op, ``after``.

Two levels, as for every format: :func:`envelope` reads the row and source types out of
an envelope's source type tree (the layout and evolution use it, and refuse a schema
that is not an envelope), and :class:`Unwrap` turns decoded envelopes into the row and
``_cdc`` arrays (the converter uses it). The decoders decode the whole envelope (into
:attr:`Unwrap.envelope_type`), per record or natively, so Avro, JSON Schema and Protobuf
envelopes all go the same way.

A value that is not an envelope (no ``op``, no row for its op: a ``d`` without
``before``, a ``c`` without ``after``, a ``t`` truncate) is a bad record
(:meth:`Unwrap.error` names why). A null value (Debezium's tombstone after a delete)
stays a tombstone: a row of nulls, ``_cdc`` null.

This module imports no other converter module (the layout imports it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.types import IntegerType, LongType, StringType, TimestamptzType

from floe.tabletopic.convert.source import (
    SourceField,
    SourceStruct,
    SourceType,
    UnsupportedSchemaError,
)
from floe.tabletopic.convert.temporal import MAX_MILLIS, RANGE

CDC_COLUMN = "_cdc"
"""The struct column of a Debezium table's change metadata (a reserved column name)."""
OP, BEFORE, AFTER, TS_MS, SOURCE = "op", "before", "after", "ts_ms", "source"
_NOT_ENVELOPE = (
    "flatten_debezium needs a Debezium envelope value schema "
    "(a record with op and before/after row records)"
)
_UTC_MICROS = pa.timestamp("us", tz="UTC")  # the layout's timestamptz (not imported: cycle)


@dataclass(frozen=True, slots=True)
class Envelope:
    """The parts of an envelope schema the table holds: the row record's type and the
    ``source`` field's type (None when the envelope has none)."""

    row: SourceStruct
    source: SourceType | None


def envelope(value: SourceType) -> Envelope:
    """The row and source types of a Debezium envelope's source type.

    Raises:
        UnsupportedSchemaError: not an envelope: not a record, no string ``op``, no
            ``before``/``after`` record (or the two of different types), a ``ts_ms``
            that is not an int or long of milliseconds.
    """
    if not isinstance(value, SourceStruct):
        raise UnsupportedSchemaError("", _NOT_ENVELOPE)
    fields = {f.name: f.type for f in value.fields}
    if OP not in fields:
        raise UnsupportedSchemaError("", f"{_NOT_ENVELOPE}: it has no op field")
    if fields[OP] != StringType():
        raise UnsupportedSchemaError(OP, f"a Debezium op is a string, not {fields[OP]}")
    rows = [(name, fields[name]) for name in (BEFORE, AFTER) if name in fields]
    if not rows:
        raise UnsupportedSchemaError("", f"{_NOT_ENVELOPE}: it has no before or after field")
    for name, row in rows:
        if not isinstance(row, SourceStruct):
            raise UnsupportedSchemaError(name, f"the row must be a record, not {row}")
    if len(rows) == 2 and _names(rows[0][1]) != _names(rows[1][1]):
        raise UnsupportedSchemaError(AFTER, "before and after must be the same record type")
    ts = fields.get(TS_MS)
    if ts is not None and not isinstance(ts, (IntegerType, LongType)):
        raise UnsupportedSchemaError(TS_MS, f"must be an int or long of milliseconds, not {ts}")
    row = rows[-1][1]  # after when there is one: the newer shape if they ever differ
    assert isinstance(row, SourceStruct)
    return Envelope(row, fields.get(SOURCE))


def _names(row: SourceType) -> Any:
    """A row type without docs (a schema may document before and after differently)."""
    if isinstance(row, SourceStruct):
        return tuple((f.name, _names(f.type)) for f in row.fields)
    return row


def cdc_type(source: SourceType | None) -> SourceStruct:
    """The ``_cdc`` column's type: op, ts, offset, and source when the envelope has one."""
    fields = [
        SourceField(OP, StringType(), doc="Debezium's operation: c, u, d or r"),
        SourceField("ts", TimestamptzType(), doc="the envelope's ts_ms"),
        SourceField("offset", LongType(), doc="the record's Kafka offset"),
    ]
    if source is not None:
        fields.append(SourceField(SOURCE, source, doc="the envelope's source, as it is"))
    return SourceStruct(tuple(fields))


def _is_delete(op: str) -> bool:
    """Debezium's ``d`` (and, as ``cdc.field`` reads it, any op starting with D/d)."""
    return op[:1] in ("d", "D")


class Unwrap:
    """Decoded envelopes -> the row and ``_cdc`` columns of one table schema.

    Immutable after construction; safe to share between threads.
    """

    def __init__(self, row_type: pa.StructType, cdc: pa.StructType) -> None:
        """``row_type``: the table's row columns as one struct; ``cdc``: the table's
        ``_cdc`` column type."""
        self.row_type = row_type
        self.cdc = cdc
        fields = [
            pa.field(BEFORE, row_type),
            pa.field(AFTER, row_type),
            pa.field(OP, pa.string()),
            pa.field(TS_MS, pa.int64()),
        ]
        if cdc.get_field_index(SOURCE) >= 0:
            fields.append(pa.field(SOURCE, cdc.field(SOURCE).type))
        self.envelope_type = pa.struct(fields)
        """What the decoders decode a value into (fields the writer lacks are null)."""

    @staticmethod
    def error(value: Any) -> str | None:
        """Why one decoded value (not null) is not an envelope, or None."""
        if type(value) is not dict:
            return "value is not a Debezium envelope (not a record)"
        op = value.get(OP)
        if not isinstance(op, str) or not op:
            return "value is not a Debezium envelope: it has no op"
        side = BEFORE if _is_delete(op) else AFTER
        if value.get(side) is None:
            return f"Debezium op {op!r} has no {side} row"
        ts = value.get(TS_MS)
        if isinstance(ts, int) and abs(ts) > MAX_MILLIS:
            return f"Debezium ts_ms {ts} is outside {RANGE}"
        return None

    def valid(self, envelopes: pa.Array) -> bool:
        """Whether every envelope of a natively decoded run (no nulls) is one that
        :meth:`error` accepts (else the run is decoded per record, which names it)."""
        op = pc.struct_field(envelopes, OP)
        missing = pc.is_null(pc.struct_field(envelopes, BEFORE))
        missing_after = pc.is_null(pc.struct_field(envelopes, AFTER))
        side = pc.if_else(self._deletes(op), missing, missing_after)
        ts = pc.abs(pc.struct_field(envelopes, TS_MS))
        bad = pc.or_(
            pc.or_(pc.fill_null(pc.equal(pc.utf8_length(op), 0), True), side),
            pc.fill_null(pc.greater(ts, MAX_MILLIS), False),
        )
        return not pc.any(bad).as_py()

    @staticmethod
    def _deletes(op: pa.Array) -> pa.Array:
        first = pc.utf8_slice_codeunits(op, 0, 1)
        return pc.fill_null(pc.equal(pc.utf8_upper(first), "D"), False)

    def unwrap(self, envelopes: pa.StructArray, offsets: pa.Array) -> tuple[pa.Array, pa.Array]:
        """The row (a struct of :attr:`row_type`) and ``_cdc`` arrays of ``envelopes``
        (valid ones, or null for tombstones), whose records are at ``offsets``."""
        parts = dict(zip(self.envelope_type.names, envelopes.flatten(), strict=True))
        op = parts[OP]
        row = pc.if_else(self._deletes(op), parts[BEFORE], parts[AFTER])
        # checked: error()/valid() refused ts_ms beyond MAX_MILLIS, so this never raises
        ts = pc.multiply_checked(parts[TS_MS], 1000).cast(_UTC_MICROS)
        values = {OP: op, "ts": ts, "offset": offsets, SOURCE: parts.get(SOURCE)}
        n = len(envelopes)
        children = [
            values.get(f.name) if values.get(f.name) is not None else pa.nulls(n, f.type)
            for f in self.cdc
        ]
        mask = envelopes.is_null() if envelopes.null_count else None  # tombstones
        cdc = pa.StructArray.from_arrays(children, fields=list(self.cdc), mask=mask)
        return row, cdc
