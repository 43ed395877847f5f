"""Read-only Spark SQL, decided by Spark's own parser and analyzer (the admin API's SQL).

A statement is run only if its plan has no side effects:

1. Spark's parser (the session's, with the Iceberg extensions) turns it into a logical
   plan; a parse error, or more than one statement, is refused with Spark's message.
2. The plan is a query, or one of the read-only commands in :data:`READ_ONLY_COMMANDS`
   (SHOW ..., DESCRIBE ...). EXPLAIN and DESCRIBE QUERY are allowed when the plan they
   wrap passes these same checks. Any other command or statement anywhere in the plan
   (DDL, DML, SET, USE, CACHE, ADD JAR, CALL, a CTE wrapping an INSERT) is refused.
3. The plan is analyzed (nothing runs) on a session of its own, derived from the
   broker's, with ``spark.sql.runSQLOnFiles=false``: ``text.`/etc/passwd```-style file
   reads do not resolve at all, so no file is opened (the refusal names them). Every
   relation the analyzed plan reads must be an Iceberg catalog table
   (``DataSourceV2Relation``), inline ``VALUES``, ``range()`` or a CTE (:data:`LEAVES`);
   every expression must be free of reflection (``java_method``, ``reflect``),
   user-defined functions and XPath (XML parsing).
4. The analyzed plan itself is what runs (no second parse of the text), except in a
   fresh read (:mod:`.fresh`): there the checked text runs with the table topics' names
   swapped for views of their tables and tails, at the spans Spark's parser gave them.

Plans are inspected through ``TreeNode.toJSON``, which includes every node and
expression, subqueries too; each class is classified once against Spark's own traits
(``Command``, ``ParsedStatement``, ``LeafNode``, ...). Anything that cannot be inspected
is refused (fail closed).

Ownership: a :class:`ReadOnlySql` belongs to the admin facade (``LakeService``) and is
used from worker threads; a lock guards the derived session, which is rebuilt when the
broker's session is (a Spark driver restart).
"""

from __future__ import annotations

import json
import threading
import uuid
from typing import TYPE_CHECKING, Any

from floe.tabletopic.spark.fresh import relations, rewrite
from floe.tabletopic.spark.sql import SqlError, collect_rows, first_line

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from floe.tabletopic.hybrid import Views

READ_ONLY_COMMANDS = frozenset(
    {
        # as parsed, and as analyzed for v2 (Iceberg) and v1 catalogs
        "ShowTables",
        "ShowTablesCommand",
        "ShowTableExtended",
        "ShowNamespaces",
        "ShowColumns",
        "ShowColumnsCommand",
        "ShowTableProperties",
        "ShowTablePropertiesCommand",
        "ShowCreateTable",
        "ShowCreateTableCommand",
        "ShowPartitions",
        "ShowPartitionsCommand",
        "ShowFunctions",
        "ShowFunctionsCommand",
        "ShowViews",
        "ShowViewsCommand",
        "ShowIcebergViews",
        "ShowCatalogsCommand",
        "ShowCurrentNamespaceCommand",
        "DescribeRelation",
        "DescribeTableCommand",
        "DescribeColumn",
        "DescribeColumnCommand",
        "DescribeNamespace",
        "DescribeDatabaseCommand",
        "DescribeFunction",
        "DescribeFunctionCommand",
    }
)
"""Commands that only read catalog metadata (matched by class name)."""

WRAPPERS = {"ExplainCommand": "logicalPlan", "DescribeQueryCommand": "plan"}
"""Read-only commands around a query (EXPLAIN, DESCRIBE QUERY): the accessor of the
wrapped plan, which must pass the query checks itself."""

LEAVES = frozenset(
    {
        "DataSourceV2Relation",  # a table (or metadata table) of a v2 catalog: Iceberg
        "LocalRelation",  # VALUES
        "OneRowRelation",  # SELECT without FROM, generator functions
        "Range",  # range()
        "CTERelationRef",  # WITH name AS (...)
        "ResolvedNamespace",  # what SHOW and DESCRIBE name
        "ResolvedTable",
        "ResolvedPersistentView",
        "ResolvedTempView",
        "ResolvedV2View",  # an Iceberg view
    }
)
"""What an analyzed plan may read; any other leaf (files, v1 or Hive tables, streams,
RDDs) is refused."""

_TRAITS = {
    "command": "org.apache.spark.sql.catalyst.plans.logical.Command",
    "statement": "org.apache.spark.sql.catalyst.plans.logical.ParsedStatement",
    "leaf": "org.apache.spark.sql.catalyst.plans.logical.LeafNode",
    "reflection": "org.apache.spark.sql.catalyst.expressions.CallMethodViaReflection",
    "udf": "org.apache.spark.sql.catalyst.expressions.UserDefinedExpression",
    "xpath": "org.apache.spark.sql.catalyst.expressions.xml.XPathExtract",
}

_REASONS = {
    "command": "is a command that is not read-only",
    "statement": "is a statement that writes",
    "reflection": "calls Java methods by reflection (java_method, reflect)",
    "udf": "is a user-defined function",
    "xpath": "parses XML (xpath functions)",
}

ALLOWED = "SELECT, SHOW, DESCRIBE and EXPLAIN of catalog tables"


class NotReadOnlyError(SqlError):
    """The statement is not a read-only query; the message says what and why."""


class ReadOnlySql:
    """Checks and runs read-only statements on a session derived from the broker's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._base: SparkSession | None = None
        self._session: SparkSession | None = None
        self._kinds: dict[str, frozenset[str]] = {}

    def session(self, base: SparkSession) -> SparkSession:
        """The derived session for ``base`` (built on first use and after ``base``
        changed): its own SQL conf, temporary views and current namespace, sharing the
        SparkContext and the catalogs' configuration, with SQL on files off."""
        with self._lock:
            if self._base is not base or self._session is None:
                derived = base.newSession()
                derived.conf.set("spark.sql.runSQLOnFiles", "false")
                self._base, self._session = base, derived
            return self._session

    def run(
        self,
        base: SparkSession,
        statement: str,
        limit: int | None = None,
        views: Views | None = None,
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Check ``statement`` (module docstring) and run it: column names and at most
        ``limit`` rows, as :func:`floe.tabletopic.spark.sql.run_sql` returns them.

        ``views`` (a fresh read, :mod:`.fresh`) gives DataFrames for some of the tables
        the statement names (built before the checks: a tail may evolve its table, and
        the statement may name a column only the tail has): once the statement passed
        the checks as written, it runs with those names swapped for temporary views of
        them (dropped after).

        Raises:
            NotReadOnlyError: the statement is not read-only (one line: what and why).
            SqlError: Spark refused or failed it (its one-line message).
        """
        from py4j.protocol import Py4JError, Py4JJavaError
        from pyspark.errors import PySparkException
        from pyspark.sql import DataFrame

        session = self.session(base)
        jsession: Any = session._jsparkSession
        jvm: Any = session._jvm
        named: list[str] = []
        try:
            plan = jsession.sessionState().sqlParser().parsePlan(statement)
            # the views first: their tails may evolve a table, and the statement may
            # name a column only the tail has
            swapped = views(session, relations(session, statement)) if views else []
            checked = self._check(session, plan)
            if swapped:
                prefix = f"floe_fresh_{uuid.uuid4().hex[:12]}"
                named = [f"{prefix}_{i}" for i in range(len(swapped))]
                for (_, frame), name in zip(swapped, named, strict=True):
                    frame.createOrReplaceTempView(name)
                statement = rewrite(
                    statement, [(r, n) for (r, _), n in zip(swapped, named, strict=True)]
                )
                result = session.sql(statement)
            else:
                result = DataFrame(
                    jvm.org.apache.spark.sql.Dataset.ofRows(jsession, checked), session
                )
            return collect_rows(result, limit)
        except PySparkException as exc:
            raise SqlError(first_line(str(exc))) from None
        except Py4JJavaError as exc:
            raise SqlError(first_line(str(exc.java_exception.toString()))) from None
        except Py4JError as exc:  # the plan could not be inspected: refuse
            raise NotReadOnlyError(f"statement refused: {first_line(str(exc))}") from None
        finally:
            for name in named:
                session.catalog.dropTempView(name)

    def _check(self, session: SparkSession, plan: Any) -> Any:
        """The plan to run: ``plan`` analyzed, or a read-only wrapper as parsed.

        Raises:
            NotReadOnlyError: see the module docstring.
        """
        root = _simple(plan.getClass().getName())
        if root in WRAPPERS:
            self._check(session, getattr(plan, WRAPPERS[root])())
            return plan  # runs the wrapped plan's analysis itself
        from pyspark.errors import PySparkException

        allowed_root = root in READ_ONLY_COMMANDS
        parsed = _nodes(plan)
        self._refuse(session, parsed, root if allowed_root else None, analyzed=False)
        jvm: Any = session._jvm
        mode = jvm.org.apache.spark.sql.execution.CommandExecutionMode.SKIP()
        jsession: Any = session._jsparkSession
        try:
            analyzed = jsession.sessionState().executePlan(plan, mode).analyzed()
        except PySparkException:
            # SQL on files is off in this session, so `csv`.`/path` is "not found":
            # say what it was instead (nothing was read)
            path = _file_read(parsed)
            if path is not None:
                raise NotReadOnlyError(_refusal(path, "reads files directly")) from None
            raise
        analyzed_root = _simple(analyzed.getClass().getName())
        if allowed_root and analyzed_root not in READ_ONLY_COMMANDS:
            raise NotReadOnlyError(_refusal(analyzed_root, _REASONS["command"]))
        self._refuse(
            session, _nodes(analyzed), analyzed_root if allowed_root else None, analyzed=True
        )
        return analyzed

    def _refuse(
        self,
        session: SparkSession,
        nodes: list[dict[str, Any]],
        allowed_root: str | None,
        *,
        analyzed: bool,
    ) -> None:
        """Raises NotReadOnlyError for the first class the rules refuse (the root may be
        ``allowed_root``, a read-only command)."""
        first = True
        for name in (node["class"] for node in nodes):
            simple = _simple(name)
            skip_root, first = first and simple == allowed_root, False
            kinds = self._kinds_of(session, name)
            for kind in ("command", "statement", "reflection", "udf", "xpath"):
                if kind in kinds and not (skip_root and kind == "command"):
                    raise NotReadOnlyError(_refusal(simple, _REASONS[kind]))
            if analyzed and "leaf" in kinds and simple not in LEAVES:
                raise NotReadOnlyError(
                    _refusal(
                        simple,
                        "reads something other than a catalog table (files, v1 or Hive "
                        "tables, streams)",
                    )
                )

    def _kinds_of(self, session: SparkSession, name: str) -> frozenset[str]:
        """Which of :data:`_TRAITS` the JVM class ``name`` has (cached per class)."""
        kinds = self._kinds.get(name)
        if kinds is None:
            jvm: Any = session._jvm
            utils = jvm.org.apache.spark.util.Utils
            cls = utils.classForName(name, False, False)
            kinds = frozenset(
                kind
                for kind, trait in _TRAITS.items()
                if utils.classForName(trait, False, False).isAssignableFrom(cls)
            )
            self._kinds[name] = kinds
        return kinds


def _simple(name: str) -> str:
    return name.rsplit(".", 1)[-1].rstrip("$")


def _refusal(node: str, why: str) -> str:
    return f"not a read-only query: {node} {why}; allowed: {ALLOWED}"


def _nodes(plan: Any) -> list[dict[str, Any]]:
    """Every node and expression of ``plan`` (its JSON form: objects with a ``class``),
    root first; a walk with its own stack, so no recursion limit to hit.

    Raises:
        NotReadOnlyError: the plan has no JSON form (fail closed).
    """
    try:
        tree = json.loads(plan.toJSON())
    except (ValueError, RecursionError) as exc:
        raise NotReadOnlyError(f"statement refused: its plan cannot be inspected ({exc})") from None
    out: list[dict[str, Any]] = []
    stack: list[Any] = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("class"), str):
                out.append(item)
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return out


FILE_SOURCES = frozenset(
    {"text", "csv", "json", "parquet", "orc", "avro", "binaryfile", "xml", "libsvm", "image"}
)
"""Spark's file data sources, for the message refusing ``csv.`/path```."""


def _file_read(nodes: list[dict[str, Any]]) -> str | None:
    """``fmt.`path``` if the parsed plan names a relation that way, else ``None``."""
    for node in nodes:
        ident = node.get("multipartIdentifier")
        if node["class"].endswith(".UnresolvedRelation") and isinstance(ident, str):
            parts = ident.strip("[]").split(", ", 1)
            if len(parts) == 2 and parts[0].lower() in FILE_SOURCES:
                return f"{parts[0]}.`{parts[1]}`"
    return None
