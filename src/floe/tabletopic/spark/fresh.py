"""Hybrid reads: a query over table topics that also sees the records not committed yet
(``floe sql --fresh``, the admin API's SQL with ``fresh``).

A *fresh* read replaces each table topic the statement reads with a temporary view:

* the table at a pinned snapshot (``VERSION AS OF``: the snapshot whose committed
  offsets the table properties record, read together from one metadata load), and
* the *tail*: every record of the topic from those offsets up to the partitions' last
  stable offsets, converted by the round's own Spark job (:func:`tail_frame`: the same
  read tasks and converter a round would run, nothing written), unioned by column name
  (the tail has the table's current schema, which may have grown since the snapshot).

So the committed offsets decide the boundary: a record is either in the snapshot or in
the tail, never both, never neither. In an upsert table the tail's last record per id
replaces the snapshot's row for that id, and its deletes remove it (:func:`upserted`).

Which relations are table topics is decided on the statement as Spark parses it
(:func:`relations`): each ``UnresolvedRelation`` with its character span in the text, so
the rewrite (:func:`rewrite`) swaps exactly the table names and nothing else. A relation
read at a point in time (``VERSION AS OF``, ``TIMESTAMP AS OF``) or a metadata table
(``t.snapshots``) is left as written.

This module imports pyspark lazily (inside functions).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from floe.tabletopic.spark.sql import SqlError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from floe.tabletopic.spark.job import JobSpec
    from floe.tabletopic.upsert import Upsert

_RELATION = "UnresolvedRelation"
_AS_OF = "RelationTimeTravel"
_ALIAS = "SubqueryAlias"
_WITH = "UnresolvedWith"


@dataclass(frozen=True, slots=True)
class Relation:
    """A table the statement names: its identifier as written (``parts``), resolved to
    ``<catalog>.<namespace>.<table>`` (``name``, lower case; None when it cannot be a
    catalog table: a CTE, a metadata table), its span ``[start, stop]`` in the text and
    whether the statement gives it an alias."""

    parts: tuple[str, ...]
    name: str | None
    start: int
    stop: int
    aliased: bool


def relations(session: SparkSession, statement: str) -> list[Relation]:
    """Every relation ``statement`` reads by name, as Spark's parser sees it (in the
    main query, CTEs and subqueries), in text order; relations read at a point in time
    are left out.

    Raises:
        SqlError: the statement does not parse (Spark's one-line message).
    """
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    from floe.tabletopic.spark.sql import first_line

    jsession: Any = session._jsparkSession
    try:
        plan = jsession.sessionState().sqlParser().parsePlan(statement)
    except PySparkException as exc:
        raise SqlError(first_line(str(exc))) from None
    except Py4JJavaError as exc:
        raise SqlError(first_line(str(exc.java_exception.toString()))) from None
    catalog = session.catalog.currentCatalog().lower()
    namespace = (session.catalog.currentDatabase() or "").lower()
    found: list[tuple[Any, bool]] = []
    ctes: set[str] = set()
    for node, parent in _walk(plan):
        kind = node.getClass().getSimpleName()
        if kind == _WITH:
            names = node.cteRelations().iterator()
            while names.hasNext():
                ctes.add(str(names.next()._1()).lower())
        elif kind == _RELATION and parent != _AS_OF:
            found.append((node, parent == _ALIAS))
    out = []
    for node, aliased in found:
        parts = tuple(str(p) for p in _iterate(node.multipartIdentifier()))
        origin = node.origin()
        if origin.startIndex().isEmpty() or origin.stopIndex().isEmpty():
            continue  # not from the text (cannot be rewritten)
        lower = [p.lower() for p in parts]
        if len(lower) == 1 and lower[0] in ctes:
            name = None
        elif len(lower) == 1:
            name = f"{catalog}.{namespace}.{lower[0]}"
        elif len(lower) == 2:
            name = f"{catalog}.{lower[0]}.{lower[1]}"
        elif len(lower) == 3:
            name = ".".join(lower)
        else:
            name = None  # a metadata table (t.snapshots) or a nested namespace
        out.append(
            Relation(
                parts, name, int(origin.startIndex().get()), int(origin.stopIndex().get()), aliased
            )
        )
    return sorted(out, key=lambda r: r.start)


def _iterate(seq: Any) -> Iterator[Any]:
    it = seq.iterator()
    while it.hasNext():
        yield it.next()


def _walk(plan: Any) -> Iterator[tuple[Any, str | None]]:
    """Every node of a parsed plan with its parent's class name: children and inner
    children (CTE definitions, subqueries in expressions), with its own stack."""
    stack: list[tuple[Any, str | None]] = [(plan, None)]
    while stack:
        node, parent = stack.pop()
        yield node, parent
        kind = node.getClass().getSimpleName()
        for accessor in ("children", "innerChildren"):
            stack.extend((child, kind) for child in _iterate(getattr(node, accessor)()))


def rewrite(statement: str, views: Sequence[tuple[Relation, str]]) -> str:
    """``statement`` with each relation's span replaced by its view name; a relation
    without an alias keeps its table name as one (``clicks.user`` still resolves)."""
    out = []
    at = 0
    for relation, view in sorted(views, key=lambda v: v[0].start):
        out.append(statement[at : relation.start])
        out.append(view if relation.aliased else f"{view} AS `{relation.parts[-1]}`")
        at = relation.stop + 1
    out.append(statement[at:])
    return "".join(out)


def tail_frame(session: SparkSession, table_name: str, spec: JobSpec) -> DataFrame:
    """The records of ``spec``'s read tasks, converted as a round converts them, in the
    table's current columns (plus the delete marker of an upsert table): a DataFrame
    evaluated when the query runs, nothing written."""
    from floe.tabletopic.spark.job import converted

    return converted(session, table_name, spec)


def base_frame(session: SparkSession, table_name: str, snapshot_id: int | None) -> DataFrame:
    """The table at ``snapshot_id`` (no snapshot yet: no rows)."""
    if snapshot_id is None:
        return session.table(table_name).limit(0)
    return session.sql(f"SELECT * FROM {table_name} VERSION AS OF {snapshot_id}")


def fresh_frame(base: DataFrame, tail: DataFrame, upsert: Upsert | None) -> DataFrame:
    """The snapshot's rows and the tail's, by column name (columns the snapshot lacks
    are null in its rows); an upsert table's as :func:`upserted`."""
    if upsert is not None:
        return upserted(base, tail, upsert)
    return base.unionByName(tail, allowMissingColumns=True)


def upserted(base: DataFrame, tail: DataFrame, upsert: Upsert) -> DataFrame:
    """An upsert table's rows: the snapshot's rows whose id the tail does not touch, and
    the tail's last row per id unless it is a delete."""
    from pyspark.sql import functions as F  # noqa: N812 - PySpark's convention

    from floe.tabletopic.spark import upsert as up

    winners = up.latest(tail, upsert)
    ids = up.id_aliases(upsert)
    keyed = base.select(
        "*",
        *[F.col(up.column_path(c)).alias(a) for c, a in zip(upsert.id_columns, ids, strict=True)],
    )
    kept = keyed.join(winners.select(*ids), on=ids, how="left_anti").drop(*ids)
    return kept.unionByName(up.data_rows(winners, upsert), allowMissingColumns=True)
