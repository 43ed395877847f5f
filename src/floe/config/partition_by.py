"""``table.topic.partition.by``: an Iceberg partition spec written as AutoMQ writes it,
``[bucket(user_id, 16), day(ts)]``, parsed into :class:`PartitionTerm` values.

The grammar, checked when the config is set (the column's existence and type are
checked against the table's schema where the schema is known: see
:mod:`floe.tabletopic.partitioning`):

* a list in brackets (the brackets may be left out), terms separated by commas;
* a term is a column (identity), or ``identity(col)``, ``year(col)``, ``month(col)``,
  ``day(col)``, ``hour(col)`` (Spark's plurals ``years``... too), ``bucket(col, N)`` or
  ``truncate(col, W)`` (Spark's argument order ``bucket(N, col)`` too);
* a column is a dotted path to a nested field (``_kafka_metadata.timestamp``,
  ``address.city``); one term per column and transform, one time transform per column.

The empty string means the spec is not Floe's to manage (the table keeps whatever spec
it has, unpartitioned when Floe creates it); ``[]`` means unpartitioned.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from floe.errors import ConfigError

TIME_TRANSFORMS = ("year", "month", "day", "hour")
TRANSFORMS = ("identity", *TIME_TRANSFORMS, "bucket", "truncate")
WIDTH_TRANSFORMS = ("bucket", "truncate")
"""The transforms taking a number: bucket count, truncation width."""
_ALIASES = {f"{t}s": t for t in TIME_TRANSFORMS}  # Spark SQL's years(ts)...
_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_CALL = re.compile(r"([A-Za-z_]+)\s*\((.*)\)", re.S)
WIDTH_MAX = 2**31 - 1


@dataclass(frozen=True)
class PartitionTerm:
    """One partition field: ``transform`` applied to ``column`` (a dotted path);
    ``width`` is the bucket count or truncation width, else None."""

    transform: str
    column: str
    width: int | None = None

    def render(self) -> str:
        if self.transform == "identity":
            return self.column
        if self.width is not None:
            return f"{self.transform}({self.column}, {self.width})"
        return f"{self.transform}({self.column})"

    @property
    def field_name(self) -> str:
        """The partition field's name, as Iceberg's Java builder names it, with the
        path's dots as underscores (a dotted partition name trips some readers)."""
        base = self.column.replace(".", "_")
        if self.transform == "identity":
            return base
        suffix = "trunc" if self.transform == "truncate" else self.transform
        return f"{base}_{suffix}" if self.width is None else f"{base}_{suffix}_{self.width}"


def parse_partition_by(text: str) -> tuple[PartitionTerm, ...] | None:
    """The terms of a ``table.topic.partition.by`` value; None for the empty string.

    Raises:
        ConfigError: a one-line reason (the term and what is wrong with it).
    """
    body = text.strip()
    if not body:
        return None
    if body.startswith("[") != body.endswith("]"):
        raise ConfigError(f"{text!r}: unbalanced brackets (write [term, term, ...])")
    if body.startswith("["):
        body = body[1:-1].strip()
    terms = tuple(_term(t.strip()) for t in _split(body)) if body else ()
    seen: dict[tuple[str, str], PartitionTerm] = {}
    timed: dict[str, PartitionTerm] = {}
    for term in terms:
        key = (term.column, term.transform)
        if key in seen:
            raise ConfigError(f"{term.render()!r} and {seen[key].render()!r}: one is enough")
        seen[key] = term
        if term.transform in TIME_TRANSFORMS:
            other = timed.setdefault(term.column, term)
            if other is not term:
                raise ConfigError(
                    f"{other.render()!r} and {term.render()!r}: one time transform per "
                    "column (Iceberg refuses redundant time partitions)"
                )
    return terms


def render_partition_by(terms: tuple[PartitionTerm, ...] | None) -> str:
    """The canonical text of parsed terms (what :func:`parse_partition_by` reads back)."""
    if terms is None:
        return ""
    return "[" + ", ".join(t.render() for t in terms) + "]"


def check_partition_by(text: str) -> str | None:
    """The config key's check: None, or why ``text`` is not a partition spec."""
    try:
        parse_partition_by(text)
    except ConfigError as exc:
        return str(exc)
    return None


def _split(body: str) -> list[str]:
    """``body`` cut at the commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(body):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth < 0:
                raise ConfigError(f"{body!r}: a ')' without its '('")
        elif c == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    if depth:
        raise ConfigError(f"{body!r}: a '(' without its ')'")
    parts.append(body[start:])
    return parts


def _term(text: str) -> PartitionTerm:
    if not text:
        raise ConfigError("an empty term (two commas in a row, or a trailing comma)")
    if _COLUMN.fullmatch(text):
        return PartitionTerm("identity", text)
    call = _CALL.fullmatch(text)
    if call is None:
        raise ConfigError(f"{text!r} is neither a column nor a transform like day(ts)")
    name = call.group(1).lower()
    transform = _ALIASES.get(name, name)
    if transform not in TRANSFORMS:
        raise ConfigError(
            f"{text!r}: unknown transform {call.group(1)!r} (one of {', '.join(TRANSFORMS)})"
        )
    args = [a.strip() for a in call.group(2).split(",")]
    columns = [a for a in args if _COLUMN.fullmatch(a)]
    numbers = [a for a in args if a.isdigit()]
    wanted = 2 if transform in WIDTH_TRANSFORMS else 1
    if len(args) != wanted or len(columns) != 1 or len(numbers) != wanted - 1:
        shape = f"{transform}(column, N)" if wanted == 2 else f"{transform}(column)"
        raise ConfigError(f"{text!r}: write {shape}")
    width = int(numbers[0]) if numbers else None
    if width is not None and not 1 <= width <= WIDTH_MAX:
        raise ConfigError(f"{text!r}: {transform} needs a width from 1 to {WIDTH_MAX}")
    return PartitionTerm(transform, columns[0], width)
