"""One table per record type (``table.topic.route.by = record_name``), sans I/O.

A topic written with Confluent's ``TopicRecordNameStrategy`` carries several Avro record
types, each registered under the subject ``<topic>-<record full name>``. In route mode
each type lands in its own table, :func:`route_table`: ``<topic>_<full name, dots as
underscores, lower-cased>`` (``shop`` + ``com.acme.Click`` -> ``shop_com_acme_click``),
named after the full name so that two types of one simple name in different namespaces
never share a table. The table records its record type in :data:`ROUTE_PROP`; a second
type mapping to the same name (``com.a_b.C`` and ``com_a.b.C``) is refused with
:class:`RouteClashError` and never written there.

Exactly-once: every route table has its own coordinator and commit state, exactly as a
table topic's one table has. Each of its rounds reads the topic's whole range and keeps
only its own type's records (:meth:`RouteFilter.verdict`); records of other types are
not this table's and count neither as skipped nor as lost. So each table, alone, holds
every record of its type exactly once, whatever the others did or when they crashed.
A record no table can own (a tombstone, no wire-format framing, a schema id the registry
does not know, a schema that is not an Avro record) is a bad record for the errors
tolerance of every route table.

Invariant: a schema id's record name never changes (registry ids are immutable), so
the verdict of a record is the same in every round and every table.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from floe.errors import FloeError
from floe.tabletopic.convert.layout import sql_name
from floe.tabletopic.schemas import RawSchema, RegistrySnapshot

ROUTE_PROP = "floe.route"
"""Table property: the record full name a route table holds."""
RESERVED_SUFFIXES = ("value", "key")


class RouteClashError(FloeError):
    """Two record types of a topic map to one table name; the second is not written."""


def record_name(raw: RawSchema) -> str | None:
    """The full name of ``raw``'s top-level Avro record; None for any other schema
    (JSON Schema, Protobuf, an Avro primitive, enum, union or unparsable text)."""
    if raw.schema_type.upper() != "AVRO":
        return None
    try:
        parsed = json.loads(raw.text)
    except ValueError:
        return None
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        return None
    name = parsed.get("name")
    if not isinstance(name, str) or not name:
        return None
    namespace = parsed.get("namespace")
    if "." in name or not isinstance(namespace, str) or not namespace:
        return name
    return f"{namespace}.{name}"


def route_table(namespace: str, topic: str, record: str) -> tuple[str, str]:
    """The (namespace, table) of ``record``'s table in ``topic``."""
    return sql_name(namespace), f"{sql_name(topic)}_{record.replace('.', '_').lower()}"


def route_records(topic: str, subjects: Iterable[tuple[str, RawSchema | None]]) -> list[str]:
    """The record types of ``topic``, sorted: every subject ``<topic>-<full name>`` whose
    latest schema (given beside it) is an Avro record of that full name."""
    prefix = f"{topic}-"
    found = set()
    for subject, latest in subjects:
        if not subject.startswith(prefix) or latest is None:
            continue
        name = subject[len(prefix) :]
        if name not in RESERVED_SUFFIXES and record_name(latest) == name:
            found.add(name)
    return sorted(found)


class Verdict(Enum):
    MINE = "mine"
    OTHER = "other"
    NEW = "new"  # an id registered after the snapshot: redo the round with a new one


@dataclass(frozen=True)
class RouteFilter:
    """Which records of a topic a route table keeps, as plain picklable data.

    Attributes:
        record: the record full name of the table.
        mine: schema ids of that record type.
        others: schema ids of the topic's other route types (their tables keep them).
        next_id: the registry's next id when the snapshot was taken.
        unrouted: schema ids of Avro record types with no table in the topic (no
            subject ``<topic>-<full name>``), by full name.
    """

    record: str
    mine: frozenset[int]
    others: frozenset[int]
    next_id: int
    unrouted: Mapping[int, str] = field(default_factory=dict)

    @classmethod
    def of(cls, record: str, snapshot: RegistrySnapshot, topic: str) -> RouteFilter:
        """The filter of ``record``'s table in ``topic``: the other types' ids are those
        of the topic's other route types in ``snapshot`` (a record of a type without a
        table is never dropped unseen: it is unroutable)."""
        routed = set(
            route_records(
                topic,
                (
                    (subject, snapshot.schemas.get(ids[-1]))
                    for subject, ids in snapshot.subjects.items()
                    if ids
                ),
            )
        )
        mine, others, unrouted = set(), set(), {}
        for schema_id, raw in snapshot.schemas.items():
            name = record_name(raw)  # parsed once per schema
            if name == record:
                mine.add(schema_id)
            elif name in routed:
                others.add(schema_id)
            elif name is not None:
                unrouted[schema_id] = name
        return cls(record, frozenset(mine), frozenset(others), snapshot.next_id, unrouted)

    def verdict(self, value: bytes | memoryview | None) -> Verdict | str:
        """MINE, OTHER (not this table's: dropped, counted nowhere), NEW (an id
        registered after the snapshot), or why no table can own the record."""
        from floe.tabletopic.convert import wire

        if value is None:
            return "a tombstone has no schema id to route by (route.by=record_name)"
        try:
            schema_id = int(wire.split(value)[0])
        except wire.FramingError as exc:
            return f"no schema id to route by (route.by=record_name): {exc}"
        if schema_id in self.mine:
            return Verdict.MINE
        if schema_id in self.others:
            return Verdict.OTHER
        if schema_id >= self.next_id:
            return Verdict.NEW
        name = self.unrouted.get(schema_id)
        if name is not None:
            return (
                f"record type {name} has no table: register its schema under subject "
                f"<topic>-{name} (route.by=record_name)"
            )
        return (
            f"value schema id {schema_id} is unknown or not an Avro record: it cannot be "
            "routed to a table (route.by=record_name)"
        )
