"""``table.topic.id.columns`` and ``table.topic.cdc.field``: the columns that identify
a row of an upsert table, written as AutoMQ writes them, ``[region, name]``.

The grammar, checked when the config is set (each column's existence and type are
checked against the table's schema at the round: :mod:`floe.tabletopic.upsert`):

* a list in brackets (the brackets may be left out), columns separated by commas;
* a column is a dotted path to a nested field (``user.id``, ``_kafka_key`` for a string
  key, ``_kafka_key.id`` for a record key), each column once;
* ``_kafka_header`` and ``_kafka_metadata`` identify nothing and are refused;
* ``[_from_debezium_key_]`` (:data:`FROM_DEBEZIUM_KEY`, alone) names the fields of the
  key's record schema, resolved at each round (a Debezium key is a record of the
  primary-key columns): :func:`floe.tabletopic.upsert.debezium_key_columns`.

The empty string (or ``[]``) means no id columns: the table is append-only.
"""

from __future__ import annotations

import re

from floe.errors import ConfigError

_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_NOT_IDS = ("_kafka_header", "_kafka_metadata")
FROM_DEBEZIUM_KEY = "_from_debezium_key_"


def parse_column(text: str) -> str:
    """One dotted column path, stripped.

    Raises:
        ConfigError: not a column path, or a Kafka header/metadata column.
    """
    column = text.strip()
    if not _COLUMN.fullmatch(column):
        raise ConfigError(f"{column!r} is not a column (a name or a dotted path: a.b)")
    if column.split(".")[0] in _NOT_IDS:
        raise ConfigError(f"{column!r}: Kafka headers and metadata cannot identify a row")
    return column


def parse_id_columns(text: str) -> tuple[str, ...]:
    """``[a, b.c]`` (brackets optional) as its column paths; empty for none.

    Raises:
        ConfigError: a bad column, an empty item, a repeated column, or
            ``_from_debezium_key_`` beside other columns.
    """
    body = text.strip()
    if body.startswith("[") != body.endswith("]"):
        raise ConfigError(f"{text!r}: unbalanced brackets")
    if body.startswith("["):
        body = body[1:-1].strip()
    if not body:
        return ()
    columns = tuple(parse_column(item) for item in body.split(","))
    seen: set[str] = set()
    for column in columns:
        if column in seen:
            raise ConfigError(f"{text!r}: column {column!r} is listed twice")
        seen.add(column)
    if FROM_DEBEZIUM_KEY in seen and len(columns) > 1:
        raise ConfigError(
            f"{text!r}: {FROM_DEBEZIUM_KEY} stands alone (it names all the key's fields)"
        )
    return columns


def render_id_columns(columns: tuple[str, ...]) -> str:
    return f"[{', '.join(columns)}]" if columns else ""


def check_id_columns(value: str) -> str | None:
    """The config check: None when ``value`` parses, else the one-line reason."""
    try:
        parse_id_columns(value)
    except ConfigError as exc:
        return str(exc)
    return None


def check_cdc_field(value: str) -> str | None:
    if not value:
        return None
    try:
        parse_column(value)
    except ConfigError as exc:
        return str(exc)
    return None
