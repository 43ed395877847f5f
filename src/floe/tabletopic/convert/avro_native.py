"""Avro payloads of one writer schema -> one Arrow array of the table's type, natively.

How: the payloads (each a Confluent-framed value, or a bare body for
``by_latest_schema``) are joined into one in-memory Avro object-container file of one
block, behind a header whose schema is the writer schema as the per-record decoder reads
it (:attr:`.avro.AvroCodec.decode_schema`), and read by arrow-avro, the Apache Arrow Rust
Avro reader, through polars-avro's reader (``polars_avro._avro_rs.AvroSource``, which
yields Arrow record batches without going through polars). The columns are then brought
to the table's Arrow types with the per-record path's normalizations: millisecond times
and timestamps scaled to microseconds (checked), dates and timestamps from their
underlying ints, enums to strings, ints and floats widened to an evolved column, struct
fields matched by name (a field the table lacks is dropped, a column the writer lacks is
null).

Invariant: :meth:`NativeAvroDecoder.decode` returns exactly the array that the
per-record path (fastavro, its normalizers, then ``pa.array`` with the table's type)
builds from the same payloads, or raises :class:`NativeDecodeError`; the caller then
decodes those payloads per record, which names the bad record. The reader is more
lenient than fastavro in a few places, so a run fails when:

- a payload is longer or shorter than its datum: each one is followed by a random 8-byte
  nonce, read back as a ``fixed(8)`` column and compared, so a misaligned run passes only
  with probability 2**-64 per record;
- a ``["null", T]`` branch index is neither of the two (the reader would take any
  non-null index for T): every union is read with an extra sentinel branch, whose use
  fails the run, and indexes beyond it fail in the reader;
- a decimal exceeds its writer precision (fastavro rounds it to that precision);
- a map repeats a key (fastavro keeps the last value, the reader every entry);
- anything else goes wrong in the reader or in a cast (an int beyond int32, a timestamp
  whose microseconds do not fit 64 bits, invalid UTF-8, a bad enum index, ...).

Not native (:class:`UnsupportedSchemaError` at construction, the caller keeps the
per-record path): a writer/table type pair other than the ones above (a narrowing, a
decimal scale change, an int where the table has a date, ...), logical types other than
those the per-record path strips (and ``decimal`` on bytes or fixed), a schema the reader
refuses (e.g. a record with no fields).

polars-avro's reader is loaded on first use, without polars: only Spark workers need it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.machinery
import importlib.util
import io
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from floe.tabletopic.convert.avro import (
    LOGICAL,
    PRIMITIVES,
    UNDERLYING,
    AvroCodec,
    fullname,
)
from floe.tabletopic.convert.layout import arrow_type
from floe.tabletopic.convert.source import UnsupportedSchemaError, child_path
from floe.tabletopic.convert.wire import HEADER_SIZE, zigzag

Conv = Callable[[pa.Array], pa.Array]
"""Brings one column as the reader returns it to the table's Arrow type (raises on a
value the per-record path would not produce the same way)."""

NONCE_SIZE = 8
_MAGIC = b"Obj\x01"
_SYNC = b"floe-native-avro"  # any 16 bytes: the file is never read as a stream
_HEAD_FIELD, _VALUE_FIELD, _NONCE_FIELD = "h", "v", "m"
# int -> long and float -> double: the widenings schema evolution applies
_WIDER = {pa.int32(): pa.int64(), pa.float32(): pa.float64()}


class NativeDecodeError(ValueError):
    """A run of payloads that the native reader did not decode exactly (see the module
    docstring); decode them per record."""


@functools.cache
def _reader() -> Any:
    """polars-avro's native source class, from its extension module loaded on its own:
    the package's ``__init__`` imports polars, which this reader never uses and which
    costs ~40 MB of RSS in every Spark Python worker (measured: 41 MB vs 3 MB).

    Raises:
        ImportError: polars-avro is not installed.
    """
    name = "polars_avro._avro_rs"
    module = sys.modules.get(name)
    if module is None:
        package = importlib.util.find_spec("polars_avro")
        if package is None or not package.submodule_search_locations:
            raise ImportError("polars-avro is not installed")
        (path,) = Path(package.submodule_search_locations[0]).glob("_avro_rs*.so")
        loader = importlib.machinery.ExtensionFileLoader(name, str(path))
        spec = importlib.util.spec_from_file_location(name, path, loader=loader)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # an import of polars_avro later reuses it (once only)
        loader.exec_module(module)
    return module.AvroSource


def _read(data: bytes, rows: int) -> pa.RecordBatch:
    """The first ``rows`` rows of an in-memory container file, as one batch.

    Only one batch is taken: asked for more, the reader loops forever over a block that
    has bytes left after its rows (a misaligned run).
    """
    source = _reader()([lambda: contextlib.nullcontext(io.BytesIO(data))], False, False)
    return pa.record_batch(next(iter(source.batch_iter(rows, None))))


class NativeAvroDecoder:
    """Decodes runs of payloads of one Avro writer schema into arrays of ``target``.

    Immutable after construction; safe to share between threads.
    """

    def __init__(self, codec: AvroCodec, target: pa.DataType, *, framed: bool) -> None:
        """``framed``: each payload starts with the 5-byte Confluent wire-format header
        (all payloads of a run share it; it is read as a ``fixed(5)`` and ignored).

        Raises:
            UnsupportedSchemaError: the writer schema and ``target`` need the per-record
                path (see the module docstring).
        """
        self._named: dict[str, Any] = {}
        # the type pa.array gives for target (it drops the map key and value fields'
        # metadata), so that arrays of both paths are of one type
        target = pa.array([], target).type
        self._convert = self._plan(codec.schema_json, None, target, "")
        fields = [{"name": _VALUE_FIELD, "type": _with_sentinels(codec.decode_schema)}]
        if framed:
            head = {"type": "fixed", "name": "floe_native_head", "size": HEADER_SIZE}
            fields.insert(0, {"name": _HEAD_FIELD, "type": head})
        nonce = {"type": "fixed", "name": "floe_native_nonce", "size": NONCE_SIZE}
        fields.append({"name": _NONCE_FIELD, "type": nonce})
        container = {"type": "record", "name": "floe_native_row", "fields": fields}
        self._header = _MAGIC + _metadata(json.dumps(container).encode()) + _SYNC
        header = self._header
        reader = _reader()  # not installed: an ImportError, never a silent per-record path
        try:  # the reader's own verdict on the schema, and the conversion of no rows
            source = reader([lambda: contextlib.nullcontext(io.BytesIO(header))], False, False)
            self._convert(pa.record_batch(source.schema()).column(_VALUE_FIELD))
        except BaseException as exc:
            _reraise_unless_failure(exc)
            raise UnsupportedSchemaError(
                "", f"the native Avro reader refuses it: {exc!r}"
            ) from None

    def decode(self, payloads: Sequence[bytes]) -> pa.Array:
        """One array of the target type, a row per payload, in order.

        Raises:
            NativeDecodeError: not decoded exactly; decode these payloads per record.
        """
        nonce = os.urandom(NONCE_SIZE)
        data = nonce.join(payloads) + nonce
        rows = len(payloads)
        container = b"".join((self._header, zigzag(rows), zigzag(len(data)), data, _SYNC))
        try:
            batch = _read(container, rows)
            if batch.num_rows != rows:
                raise NativeDecodeError(f"read {batch.num_rows} of {rows} rows")
            nonces = batch.column(_NONCE_FIELD)
            if not pc.all(pc.equal(nonces, pa.scalar(nonce, nonces.type))).as_py():
                raise NativeDecodeError("a payload is longer or shorter than its datum")
            return self._convert(batch.column(_VALUE_FIELD))
        except NativeDecodeError:
            raise
        except BaseException as exc:
            _reraise_unless_failure(exc)
            raise NativeDecodeError(f"native Avro decoding failed: {exc!r}") from None

    def _plan(
        self, node: Any, namespace: str | None, target: pa.DataType | None, path: str
    ) -> Conv:
        """The conversion of ``node``'s column to ``target`` (walks the writer schema
        like :class:`.avro._Mapper`, which has already refused what the layout cannot
        hold). With no ``target`` (a field the table lacks) the column is only checked
        for what fails the per-record path there too (a millisecond value that does
        not fit as microseconds, a union branch out of range) and returned as is.

        Raises:
            UnsupportedSchemaError: see the module docstring.
        """
        if isinstance(node, str):
            if node in PRIMITIVES:
                return _primitive(arrow_type(PRIMITIVES[node]), target, 0, path)
            full = fullname(node, namespace)
            if full not in self._named:
                raise UnsupportedSchemaError(path, f"unknown type {node}")
            return self._plan(self._named[full], full.rpartition(".")[0] or None, target, path)
        if isinstance(node, list):
            return self._union(node, namespace, target, path)
        kind = node["type"]
        logical = node.get("logicalType")
        if logical == "decimal":
            return self._decimal(node, namespace, target, path)
        if logical in LOGICAL and kind == UNDERLYING[logical]:
            iceberg, scale = LOGICAL[logical]
            if target is not None and arrow_type(iceberg) != target:
                raise UnsupportedSchemaError(path, f"{logical} into a {target} column")
            underlying = arrow_type(PRIMITIVES[kind])
            return _primitive(underlying, target, scale, path, exact=False)
        if kind in PRIMITIVES:
            return self._plan(kind, namespace, target, path)
        if logical is not None:  # kept in the decode schema: fastavro may interpret it
            raise UnsupportedSchemaError(path, f"logical type {logical} on {kind}")
        if kind == "array":
            return self._list(node, namespace, target, path)
        if kind == "map":
            return self._map(node, namespace, target, path)
        if kind in ("record", "error"):
            return self._record(node, namespace, target, path)
        if kind == "enum":
            self._define(node, namespace)
            return _enum(target, path)
        if kind == "fixed":
            self._define(node, namespace)
            return _primitive(pa.binary(int(node["size"])), target, 0, path)
        return self._plan(kind, namespace, target, path)  # {"type": <name, union, schema>}

    def _define(self, node: dict[str, Any], namespace: str | None) -> str:
        full = fullname(node["name"], node.get("namespace", namespace))
        self._named[full] = {**node, "name": full}
        return full

    def _decimal(
        self, node: dict[str, Any], namespace: str | None, target: pa.DataType | None, path: str
    ) -> Conv:
        if node["type"] == "fixed":
            self._define(node, namespace)
        elif node["type"] != "bytes":
            raise UnsupportedSchemaError(path, f"decimal on {node['type']}")
        if target is None:
            return _same
        precision, scale = int(node.get("precision", 0)), int(node.get("scale", 0))
        if not (
            pa.types.is_decimal128(target)
            and target.scale == scale
            and target.precision >= precision
        ):
            raise UnsupportedSchemaError(path, f"decimal({precision}, {scale}) into {target}")
        written = pa.decimal128(precision, scale)

        def convert(column: pa.Array) -> pa.Array:
            _expect(column, written)
            column.validate(full=True)  # a value beyond the writer's precision raises
            return column.cast(target)

        return convert

    def _union(
        self, members: list[Any], namespace: str | None, target: pa.DataType | None, path: str
    ) -> Conv:
        nulls = [i for i, m in enumerate(members) if m in ("null", {"type": "null"})]
        (branch,) = [i for i in range(len(members)) if i not in nulls]  # the mapper's rule
        inner = self._plan(members[branch], namespace, target, path)
        sentinel = len(members)

        def convert(column: pa.Array) -> pa.Array:
            if not pa.types.is_union(column.type) or column.type.mode != "dense":
                raise TypeError(f"{path}: expected a dense union, got {column.type}")
            codes = column.type_codes
            if pc.any(pc.equal(codes, sentinel)).as_py():
                raise ValueError(f"{path}: a union branch index out of range")
            values = inner(column.field(branch))
            if target is None:
                return column
            if not nulls:
                return values.take(column.offsets)
            return values.take(pc.if_else(pc.equal(codes, branch), column.offsets, None))

        return convert

    def _list(self, node: dict[str, Any], namespace: str | None, target: pa.DataType | None,
              path: str) -> Conv:  # fmt: skip
        if target is not None and not pa.types.is_list(target):
            raise UnsupportedSchemaError(path, f"an array into a {target} column")
        items = self._plan(node["items"], namespace, _child(target, "value_type"), path)

        def convert(column: pa.Array) -> pa.Array:
            if not pa.types.is_list(column.type):
                raise TypeError(f"{path}: expected a list, got {column.type}")
            values = items(column.values)
            if target is None:
                return column
            return pa.ListArray.from_arrays(column.offsets, values, type=target, mask=_mask(column))

        return convert

    def _map(self, node: dict[str, Any], namespace: str | None, target: pa.DataType | None,
             path: str) -> Conv:  # fmt: skip
        if target is not None and not (pa.types.is_map(target) and target.key_type == pa.string()):
            raise UnsupportedSchemaError(path, f"a map into a {target} column")
        values = self._plan(node["values"], namespace, _child(target, "item_type"), path)

        def convert(column: pa.Array) -> pa.Array:
            if not pa.types.is_map(column.type):
                raise TypeError(f"{path}: expected a map, got {column.type}")
            items = values(column.items)
            if target is None:
                return column
            keys = column.keys
            # (list_parent_indices on a map array aborts the process in pyarrow 26)
            rows = pc.list_parent_indices(pa.ListArray.from_arrays(column.offsets, keys))
            entries = pa.table({"row": rows, "key": keys})
            if entries.group_by(["row", "key"]).aggregate([]).num_rows != len(keys):
                raise ValueError(f"{path}: a map repeats a key")
            return pa.MapArray.from_arrays(
                column.offsets, keys, items, type=target, mask=_mask(column)
            )

        return convert

    def _record(self, node: dict[str, Any], namespace: str | None, target: pa.DataType | None,
                path: str) -> Conv:  # fmt: skip
        full = self._define(node, namespace)
        if target is not None and not pa.types.is_struct(target):
            raise UnsupportedSchemaError(path, f"a record into a {target} column")
        inner_ns = full.rpartition(".")[0] or None
        # every field, in order (one may use a type an earlier one defines); the ones
        # the table lacks are only checked
        plans = {
            f["name"]: self._plan(
                f["type"],
                inner_ns,
                _child(target, f["name"]),
                child_path(path, f["name"]),
            )
            for f in node["fields"]
        }
        fields = [] if target is None else list(target)
        written = set(plans)

        def convert(column: pa.Array) -> pa.Array:
            if not pa.types.is_struct(column.type):
                raise TypeError(f"{path}: expected a struct, got {column.type}")
            converted = {name: plan(column.field(name)) for name, plan in plans.items()}
            if target is None:
                return column
            children = [
                converted[f.name] if f.name in written else pa.nulls(len(column), f.type)
                for f in fields
            ]
            return pa.StructArray.from_arrays(children, fields=fields, mask=_mask(column))

        return convert


def _reraise_unless_failure(exc: BaseException) -> None:
    """Re-raises ``exc`` unless it is the reader or a cast failing: an ``Exception``, or a
    Rust panic (polars-avro turns one into pyo3's ``PanicException``, a BaseException)."""
    if not isinstance(exc, Exception) and type(exc).__name__ != "PanicException":
        raise exc


def _child(target: pa.DataType | None, name: str) -> pa.DataType | None:
    """A list's ``value_type``, a map's ``item_type`` or a struct field's type, if any."""
    if target is None:
        return None
    if pa.types.is_struct(target):
        index = target.get_field_index(name)
        return None if index < 0 else target.field(index).type
    return getattr(target, name, None)


def _same(column: pa.Array) -> pa.Array:
    return column


def _expect(column: pa.Array, arrow: pa.DataType) -> None:
    """Raises:
    TypeError: the reader returned another type than planned.
    """
    if column.type != arrow:
        raise TypeError(f"expected {arrow}, got {column.type}")


def _mask(column: pa.Array) -> pa.Array | None:
    return column.is_null() if column.null_count else None


def _primitive(
    written: pa.DataType,
    target: pa.DataType | None,
    scale: int,
    path: str,
    *,
    exact: bool = True,
) -> Conv:
    """A primitive column read as ``written``, scaled by ``scale`` (checked) when not 0,
    cast to ``target``: the same type, its widening, or (``exact=False``, a logical
    type's plain column) the logical type's own column type. With no ``target``, only
    the scaling is checked.

    Raises:
        UnsupportedSchemaError: another pair of types.
    """
    if target is None and not scale:
        return _same
    if exact and target != written and _WIDER.get(written) != target:
        raise UnsupportedSchemaError(path, f"{written} into a {target} column")

    def convert(column: pa.Array) -> pa.Array:
        _expect(column, written)
        scaled = pc.multiply_checked(column.cast(pa.int64()), scale) if scale else column
        return column if target is None else scaled.cast(target)

    return convert


def _enum(target: pa.DataType | None, path: str) -> Conv:
    if target is None:
        return _same
    if target != pa.string():
        raise UnsupportedSchemaError(path, f"an enum into a {target} column")

    def convert(column: pa.Array) -> pa.Array:
        if not pa.types.is_dictionary(column.type):
            raise TypeError(f"{path}: expected an enum dictionary, got {column.type}")
        return column.dictionary_decode().cast(target)

    return convert


def _with_sentinels(node: Any) -> Any:
    """``node`` with a sentinel branch appended to every union (see the module
    docstring): ``boolean``, or ``int`` where the union already holds a boolean; and
    each named type defined by its full name (``a.b.R``, as the decode schema defines
    them) defined as name ``R`` in namespace ``a.b`` instead, the same type by the Avro
    spec: the reader registers a dotted name under a name it cannot resolve later, so a
    type referenced a second time (Debezium's ``after``, a reference to ``before``'s
    row record) made it refuse the schema."""
    if isinstance(node, list):
        members = [_with_sentinels(m) for m in node]
        boolean = any(m in ("boolean", {"type": "boolean"}) for m in members)
        return [*members, "int" if boolean else "boolean"]
    if not isinstance(node, dict):
        return node
    out = dict(node)
    if node["type"] in ("record", "error", "enum", "fixed") and "." in node.get("name", ""):
        out["namespace"], _, out["name"] = node["name"].rpartition(".")
    if isinstance(node["type"], list | dict):
        out["type"] = _with_sentinels(node["type"])
    if "items" in node:
        out["items"] = _with_sentinels(node["items"])
    if "values" in node:
        out["values"] = _with_sentinels(node["values"])
    if "fields" in node and node["type"] in ("record", "error"):
        out["fields"] = [{**f, "type": _with_sentinels(f["type"])} for f in node["fields"]]
    return out


def _metadata(schema: bytes) -> bytes:
    """The container header's metadata map: the schema, no codec (uncompressed)."""
    key = b"avro.schema"
    return b"".join((zigzag(1), zigzag(len(key)), key, zigzag(len(schema)), schema, zigzag(0)))
