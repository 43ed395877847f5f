"""Registry schemas for the pipeline: a picklable snapshot, and which ids a table holds.

A round needs the Schema Registry in three places: the coordinator (on the event loop)
takes a :class:`RegistrySnapshot` of the registry's schemas; the driver (a worker
thread) evolves the table so that it holds every schema the round may meet and records
the outcome as one :class:`PartPlan` per key/value part; Spark's Python workers rebuild
the same codecs from the snapshot (:func:`part_spec`) without any access to the broker.

Invariants:

* A worker decodes a ``by_schema_id`` record only with a schema id the table was
  evolved to hold (``PartPlan.covered``). An id the table does not hold yet, or an id
  newer than the snapshot, raises :class:`SchemaNotCoveredError`, which fails the job
  *before* its commit; the coordinator then evolves the table for that id and runs the
  round again. So a round never writes a row whose fields the table lacks, and the
  records of older and newer schema versions in one round land in one table schema.
* An id the registry does not know (and never knew at snapshot time), or one whose
  schema the table cannot represent (``PartPlan.refused``: an incompatible change, a
  refused construct), makes its records per-record conversion errors, which the topic's
  errors tolerance handles. The same holds for a ``by_latest_schema`` part whose latest
  schema is refused: every record is an error whose reason names the schema id, its
  subject, the table and the way forward (register a schema the table can hold, or let
  the tolerance skip them), so a round never fails, let alone forever, on a schema.
* :class:`SchemaUnavailableError` means only "nothing to decode with yet": no registry,
  a ``by_latest_schema`` subject without a version, or no table yet and no schema to
  create it from.

Pure data and functions: no Spark, no asyncio; the registry is only read by
:meth:`RegistrySnapshot.take`, called on the event loop that owns it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from floe.registry.core.errors import InvalidSchemaError
from floe.registry.core.model import SchemaType
from floe.registry.core.schemas import Dependency, ParsedSchema, parse
from floe.tabletopic.convert import (
    ConvertType,
    EvolutionPlan,
    Incompatible,
    PartSpec,
    SchemaUpdate,
    UnsupportedSchemaError,
    codec_for,
    plan_evolution,
    source_type,
)
from floe.tabletopic.convert.source import SourceType

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.table.update.schema import UpdateSchema

    from floe.registry.core.service import Registry


HELD_PROP = "floe.schema-ids.{part}"
"""Table property per part (``value``/``key``): JSON list of the schema ids the table
was fitted to, so that a restarted coordinator does not plan them again."""


def held_ids(properties: Mapping[str, str]) -> dict[str, frozenset[int]]:
    """The :data:`HELD_PROP` ids of a table's properties (unreadable values: none)."""
    import json

    out: dict[str, frozenset[int]] = {}
    for part in ("value", "key"):
        try:
            out[part] = frozenset(
                int(i) for i in json.loads(properties.get(HELD_PROP.format(part=part), "[]"))
            )
        except (ValueError, TypeError):
            out[part] = frozenset()
    return out


class SchemaNotCoveredError(Exception):
    """A worker met a schema id the table was not evolved for (raised, not a data
    error: the round fails before its commit and is redone after evolving).

    The message carries a marker the driver finds in Spark's error text
    (:func:`find_not_covered`): ``[floe-schema-not-covered part=value id=12]``.
    """

    MARKER = "floe-schema-not-covered"

    def __init__(self, part: str, schema_id: int) -> None:
        self.part = part
        self.schema_id = schema_id
        super().__init__(f"[{self.MARKER} part={part} id={schema_id}]")


def find_not_covered(text: str) -> tuple[str, int] | None:
    """The (part, schema id) of a :class:`SchemaNotCoveredError` quoted in ``text``."""
    import re

    found = re.search(rf"\[{SchemaNotCoveredError.MARKER} part=(value|key) id=(-?\d+)\]", text)
    return None if found is None else (found.group(1), int(found.group(2)))


@dataclass(frozen=True)
class RawSchema:
    """One registered schema as text, with its references resolved."""

    schema_id: int
    schema_type: SchemaType
    text: str
    deps: tuple[Dependency, ...] = ()


@dataclass(frozen=True)
class RegistrySnapshot:
    """The registry's schemas at one moment, as plain picklable data.

    Attributes:
        schemas: every schema id the registry stores (soft-deleted versions included:
            old records still carry their ids).
        subjects: live versions' schema ids per subject, oldest first.
        next_id: the registry's next id; an id at or above it may be registered after
            the snapshot was taken.
    """

    schemas: Mapping[int, RawSchema] = field(default_factory=dict)
    subjects: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    next_id: int = 1

    @classmethod
    def take(cls, registry: Registry) -> RegistrySnapshot:
        """Copy what the pipeline needs out of ``registry`` (call on its event loop)."""
        schemas: dict[int, RawSchema] = {}
        subjects: dict[str, tuple[int, ...]] = {}
        for subject in registry.subjects(deleted=True):
            for sv in registry.versions(subject, deleted=True):
                if sv.schema_id not in schemas:
                    try:
                        deps = registry.dependencies(sv)
                    except InvalidSchemaError:
                        continue  # a dangling reference: its records become errors
                    schemas[sv.schema_id] = RawSchema(sv.schema_id, sv.schema_type, sv.schema, deps)
            live = tuple(
                sv.schema_id for sv in registry.versions(subject, deleted=True) if not sv.deleted
            )
            if live:
                subjects[subject] = live
        return cls(schemas, subjects, registry.state.next_id)

    def parse(self, schema_id: int) -> ParsedSchema:
        """The parsed schema of an id in the snapshot.

        Raises:
            KeyError: the id is not in the snapshot.
            InvalidSchemaError: it no longer parses (never for a registered schema).
        """
        raw = self.schemas[schema_id]
        return parse(raw.schema_type, raw.text, raw.deps)


@dataclass(frozen=True)
class PartPlan:
    """How workers decode one part (value or key) in one round.

    Attributes:
        part: ``value`` or ``key``.
        convert: the part's convert type.
        latest: ``by_latest_schema``: the schema id decoding every payload (when it is
            in ``refused``, every payload is a conversion error with that reason).
        message_name: Protobuf message of ``latest`` (or of the subject's schemas when
            evolving); None: the file's first message.
        covered: ``by_schema_id``: ids the table holds (decode them).
        refused: ids whose records are conversion errors, with the reason.
        unknown: ids seen in records that the registry did not know when asked again
            (conversion errors, not a reason to redo the round).
    """

    part: str
    convert: ConvertType
    latest: int | None = None
    message_name: str | None = None
    covered: frozenset[int] = frozenset()
    refused: Mapping[int, str] = field(default_factory=dict)
    unknown: frozenset[int] = frozenset()


def part_spec(plan: PartPlan, snapshot: RegistrySnapshot) -> PartSpec:
    """The converter's :class:`PartSpec` for ``plan`` (built in each Spark worker).

    Raises:
        InvalidSchemaError, UnsupportedSchemaError: the latest schema no longer parses
            or maps (the driver checked both before the job).
    """
    if plan.convert in (ConvertType.RAW, ConvertType.STRING):
        return PartSpec(plan.convert)
    if plan.convert is ConvertType.BY_LATEST_SCHEMA:
        assert plan.latest is not None  # the driver plans by_latest_schema with its id
        if plan.latest in plan.refused:
            return PartSpec(plan.convert, refused=plan.refused[plan.latest])
        return PartSpec(
            plan.convert, latest=snapshot.parse(plan.latest), message_name=plan.message_name
        )
    cache: dict[int, ParsedSchema] = {}

    def lookup(schema_id: int) -> ParsedSchema | str | None:
        if schema_id in plan.refused:
            return plan.refused[schema_id]
        if schema_id in plan.covered:
            found = cache.get(schema_id)
            if found is None:
                found = cache[schema_id] = snapshot.parse(schema_id)
            return found
        if schema_id in plan.unknown or (
            schema_id not in snapshot.schemas and schema_id < snapshot.next_id
        ):
            return None
        raise SchemaNotCoveredError(plan.part, schema_id)

    return PartSpec(plan.convert, lookup=lookup)


class SchemaUnavailableError(Exception):
    """A schema mode has nothing to decode with yet (no registry, a subject without a
    version, no table yet and no schema to create it from): the round cannot run; it
    is retried with backoff. Never raised for a schema the table refuses once it
    exists: that makes records conversion errors (see :class:`PartPlan`)."""


_FORWARD = (
    "register a schema the table can hold (a compatible change), or set "
    "table.topic.errors.tolerance=invalid_data to skip these records"
)
"""The way forward quoted in every by_latest_schema refusal."""


def _latest_name(
    snapshot: RegistrySnapshot, part: str, schema_id: int, subjects: Mapping[str, str] | None
) -> str:
    """``value schema id 7 (latest of subject clicks-value)``: the part's subject from
    ``subjects`` (part -> subject), else every subject of ``snapshot`` whose latest
    version is ``schema_id`` (one id is shared by every subject that registered the
    same text)."""
    given = (subjects or {}).get(part)
    found = sorted(s for s, ids in snapshot.subjects.items() if ids and ids[-1] == schema_id)
    names = [given] if given else found
    if not names:
        of = "its subject"
    else:
        of = ("subjects " if len(names) > 1 else "subject ") + ", ".join(names)
    return f"{part} schema id {schema_id} (latest of {of})"


def _why(exc: UnsupportedSchemaError | InvalidSchemaError) -> str:
    return str(exc) if isinstance(exc, UnsupportedSchemaError) else f"it does not parse: {exc}"


def _source(snapshot: RegistrySnapshot, schema_id: int, message: str | None) -> SourceType:
    """Raises:
    UnsupportedSchemaError: the schema has a construct the layout refuses.
    InvalidSchemaError: it does not parse.
    """
    return codec_for(snapshot.parse(schema_id), message).source


def candidate_ids(
    snapshot: RegistrySnapshot,
    convert: ConvertType,
    subject: str,
    seen: Iterable[int] = (),
) -> tuple[list[int], set[int]]:
    """The schema ids a part's table columns should hold, oldest first, and the ids
    among ``seen`` (reported by workers) that the registry does not know.

    ``by_latest_schema``: the subject's latest version. ``by_schema_id``: every live
    version of the subject (the Confluent serializers' default TopicNameStrategy), then
    the ids workers met in records (other naming strategies).

    Raises:
        SchemaUnavailableError: ``by_latest_schema`` and the subject has no version.
    """
    versions = list(snapshot.subjects.get(subject, ()))
    if convert is ConvertType.BY_LATEST_SCHEMA:
        if not versions:
            raise SchemaUnavailableError(f"subject {subject!r} has no registered schema")
        return [versions[-1]], set()
    ids = list(versions)
    unknown: set[int] = set()
    for schema_id in seen:
        if schema_id in snapshot.schemas:
            if schema_id not in ids:
                ids.append(schema_id)
        else:
            unknown.add(schema_id)
    return ids, unknown


def first_schema(
    snapshot: RegistrySnapshot,
    value: tuple[ConvertType, str | None, list[int]],
    key: tuple[ConvertType, str | None, list[int]],
    *,
    flatten: bool,
    debezium: bool = False,
    subjects: Mapping[str, str] | None = None,
) -> Schema | None:
    """The schema to create a table with: each part's fixed type (raw, string) or its
    oldest usable candidate schema; None when a schema part has no usable candidate yet
    (the pipeline then looks for schema ids in the records). ``subjects`` (part ->
    subject) names the by_latest_schema subjects in errors; ``debezium``: values are
    Debezium envelopes (``flatten_debezium``).

    Raises:
        SchemaUnavailableError: the layout refuses the chosen schemas (flatten of a
            non-record value, a reserved column name) or a by_latest_schema schema:
            without a table there is nowhere to record skipped offsets, so the round
            waits (retried with backoff, the reason in the table's status) until a
            schema the layout accepts is registered.
    """
    from floe.tabletopic.convert import table_schema

    chosen: list[SourceType] = []
    for name, (convert, message, ids) in (("value", value), ("key", key)):
        if convert in (ConvertType.RAW, ConvertType.STRING):
            chosen.append(source_type(PartSpec(convert)))
            continue
        for schema_id in ids:
            try:
                chosen.append(_source(snapshot, schema_id, message))
                break
            except (UnsupportedSchemaError, InvalidSchemaError) as exc:
                if convert is ConvertType.BY_LATEST_SCHEMA:
                    raise SchemaUnavailableError(
                        f"{_latest_name(snapshot, name, schema_id, subjects)} "
                        "cannot create the table: "
                        f"{_why(exc)}; register a schema the table can hold (the records "
                        "wait in the topic until then)"
                    ) from None
        else:
            return None
    try:
        return table_schema(chosen[0], chosen[1], flatten=flatten, debezium=debezium)
    except UnsupportedSchemaError as exc:
        raise SchemaUnavailableError(str(exc)) from None


def fit_table(
    current: Schema,
    evolve: Callable[[EvolutionPlan], Schema],
    snapshot: RegistrySnapshot,
    value: tuple[ConvertType, str | None, list[int], set[int]],
    key: tuple[ConvertType, str | None, list[int], set[int]],
    *,
    flatten: bool,
    debezium: bool = False,
    held: Mapping[str, frozenset[int]] | None = None,
    table: str | None = None,
    subjects: Mapping[str, str] | None = None,
) -> tuple[PartPlan, PartPlan]:
    """Evolve the table so that it holds each part's candidate schemas, and say how
    workers decode each part.

    Each part is ``(convert, Protobuf message name, candidate ids oldest first, ids the
    registry does not know)``; ``debezium``: values are Debezium envelopes
    (``flatten_debezium``: a value schema that is not one is refused). Every candidate
    id ends up covered or refused: ids are planned one at a time against the schema the
    previous ones produced (``evolve`` applies a non-empty plan and returns the new
    schema), so the table holds the union of every covered schema; an id whose schema
    the layout refuses, or whose plan is :class:`Incompatible`, is refused with the
    reason. Ids in ``held`` (per part: the ids the table was already fitted to, see
    :data:`HELD_PROP`) are covered without planning them again: after a rename by
    alias, planning an older schema against the renamed column would add the old name
    back.

    A ``by_latest_schema`` part plans its one candidate, the latest; when that is
    refused the plan still names it as ``latest`` and its reason (quoting ``table``,
    ``<namespace>.<table>``, the part's subject from ``subjects``, part -> subject, and
    :data:`_FORWARD`) becomes every record's conversion error.

    Raises:
        SchemaUnavailableError: a by_latest_schema part without a candidate id.
    """
    schema = current
    plans = []
    for name, (convert, message, ids, unknown) in (("value", value), ("key", key)):
        covered: list[int] = []
        refused: dict[int, str] = {}
        named = (table, subjects)
        for schema_id in ids:
            if held is not None and schema_id in held.get(name, frozenset()):
                covered.append(schema_id)
                continue
            try:
                src = _source(snapshot, schema_id, message)
                outcome = plan_evolution(
                    schema,
                    src if name == "value" else None,
                    src if name == "key" else None,
                    flatten=flatten,
                    debezium=debezium,
                )
            except (UnsupportedSchemaError, InvalidSchemaError) as exc:
                refused[schema_id] = (
                    _latest_refused(snapshot, name, schema_id, named, _why(exc))
                    if convert is ConvertType.BY_LATEST_SCHEMA
                    else f"schema id {schema_id} is not supported: {exc}"
                )
                continue
            if isinstance(outcome, Incompatible):
                why = "; ".join(outcome.reasons)
                refused[schema_id] = (
                    _latest_refused(snapshot, name, schema_id, named, why)
                    if convert is ConvertType.BY_LATEST_SCHEMA
                    else f"schema id {schema_id} cannot be applied to the table: {why}"
                )
                continue
            if outcome.updates:
                schema = evolve(outcome)
            covered.append(schema_id)
        latest = None
        if convert is ConvertType.BY_LATEST_SCHEMA:
            if not ids:
                raise SchemaUnavailableError(f"{name}: by_latest_schema without a schema id")
            latest = ids[-1]
        plans.append(
            PartPlan(
                name,
                convert,
                latest=latest,
                message_name=message,
                covered=frozenset(covered),
                refused=refused,
                unknown=frozenset(unknown),
            )
        )
    return plans[0], plans[1]


def _latest_refused(
    snapshot: RegistrySnapshot,
    part: str,
    schema_id: int,
    named: tuple[str | None, Mapping[str, str] | None],
    why: str,
) -> str:
    """The one-line reason of every record of a refused by_latest_schema part;
    ``named`` is fit_table's (table, subjects)."""
    table, subjects = named
    where = f"table {table}" if table else "the table"
    name = _latest_name(snapshot, part, schema_id, subjects)
    return f"{name} cannot be written to {where}: {why}; {_FORWARD}"


def stage(update: UpdateSchema, updates: Iterable[SchemaUpdate]) -> None:
    """Stage ``updates`` on a pyiceberg ``UpdateSchema`` (paths name current fields)."""
    from floe.tabletopic.convert import AddColumn, MakeOptional, RenameColumn, WidenType
    from floe.tabletopic.convert.layout import KEY_COLUMN

    for u in updates:
        if isinstance(u, AddColumn):
            update.add_column((*u.parent, u.name), u.type, doc=u.doc)
            if not u.parent:  # a flattened value field: keep the _kafka_* columns last
                update.move_before(u.name, u.before or KEY_COLUMN)
        elif isinstance(u, WidenType):
            update.update_column(u.path, field_type=u.type)
        elif isinstance(u, MakeOptional):
            update.make_column_optional(u.path)
        elif isinstance(u, RenameColumn):
            update.rename_column(u.path, u.new_name)
