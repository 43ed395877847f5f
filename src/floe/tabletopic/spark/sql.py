"""Run one Spark SQL statement and hand back plain Python values (for ``floe sql``).

Invariants:

* The result is ``(columns, rows)`` of plain Python values: ``None``, ``bool``,
  ``int``, ``float``, ``Decimal``, ``str``, ``bytes``, ``date``, ``datetime``, lists,
  dicts (maps and structs, the latter keyed by field name). Nothing from pyspark leaks.
* Spark ``TIMESTAMP`` (with local time zone) values come back as UTC-aware datetimes
  (PySpark hands them over as naive datetimes in the Python process's zone);
  ``TIMESTAMP_NTZ`` values stay naive.
* Any failure of the statement becomes :class:`SqlError` whose message is one line:
  the first line of Spark's message (error class and text, no plan, no Java stack).

pyspark is imported inside functions only: importing this module costs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from floe.errors import FloeError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class SqlError(FloeError):
    """A statement Spark refused or failed to run; the message is one line."""


def first_line(text: str) -> str:
    """The first non-blank line of ``text`` (Spark's parse errors start with a newline)."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return text.strip()


def run_sql(
    session: SparkSession, statement: str, limit: int | None = None
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run ``statement``; return its column names and at most ``limit`` rows.

    DDL and DML (``CREATE TABLE``, ``INSERT``) run eagerly and return their (usually
    empty) result the same way.

    Raises:
        SqlError: a parse, analysis or execution error, with a one-line message.
    """
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    try:
        frame = session.sql(statement)
    except PySparkException as exc:
        raise SqlError(first_line(str(exc))) from None
    except Py4JJavaError as exc:  # errors PySpark does not translate
        raise SqlError(first_line(str(exc.java_exception.toString()))) from None
    return collect_rows(frame, limit)


def collect_rows(frame: DataFrame, limit: int | None) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Column names and at most ``limit`` rows of ``frame``, as plain values.

    Raises:
        SqlError: Spark failed, with a one-line message.
    """
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException
    from pyspark.sql.types import TimestampType

    try:
        if limit is not None:
            frame = frame.limit(limit)
        fields = frame.schema.fields
        collected = frame.collect()
    except PySparkException as exc:
        raise SqlError(first_line(str(exc))) from None
    except Py4JJavaError as exc:  # errors PySpark does not translate
        raise SqlError(first_line(str(exc.java_exception.toString()))) from None
    utc = [isinstance(f.dataType, TimestampType) for f in fields]
    rows = [
        tuple(_plain(v, as_utc) for v, as_utc in zip(row, utc, strict=True)) for row in collected
    ]
    return [f.name for f in fields], rows


def _plain(value: Any, as_utc: bool = False) -> Any:
    from pyspark.sql import Row

    if isinstance(value, datetime) and as_utc and value.tzinfo is None:
        return value.astimezone(UTC)  # naive local time -> aware UTC
    if isinstance(value, Row):
        return {k: _plain(v) for k, v in value.asDict(recursive=False).items()}
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [_plain(v) for v in value]
    return value
