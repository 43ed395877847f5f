"""Table-topic settings checked against the table's columns when they are set (topic
creation, AlterConfigs, the admin API), not only at the next round.

The keys' own syntax and the rules spanning keys are the config layer's
(:mod:`floe.config.tabletopic`); what needs the columns is checked here: a
``partition.by`` term on a missing column or with a transform its type does not take,
and ``id.columns`` (or ``cdc.field``) that break Iceberg's identifier rules. The columns
are those the row layout gives the registry's latest schema of each part's subject
(``<topic>-value`` and ``<topic>-key`` unless configured), and the fixed columns of raw
and string parts. When the layout is not known yet (no schema registered for a subject,
other subject naming strategies, ``[_from_debezium_key_]``) nothing is refused here: the
round checks against the table and reports in the table's status.

The composition root gives the broker :func:`checker` (the broker does not import table
topics).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from floe.config.tabletopic import TableTopicConfig, resolve_table_topic
from floe.errors import ConfigError
from floe.tabletopic.convert import ConvertType
from floe.tabletopic.schemas import RegistrySnapshot, SchemaUnavailableError, first_schema

if TYPE_CHECKING:
    from pyiceberg.schema import Schema

    from floe.registry.core.service import Registry

Check = Callable[[str, Mapping[str, str]], None]


def layout_schema(cfg: TableTopicConfig, topic: str, snapshot: RegistrySnapshot) -> Schema | None:
    """The table's columns as the registry's latest schemas give them (None: unknown)."""
    parts: list[tuple[ConvertType, str | None, list[int]]] = []
    for _, convert_type, subject, message in cfg.parts_of(topic):
        convert = ConvertType(convert_type)
        versions = snapshot.subjects.get(subject, ())
        if convert in (ConvertType.RAW, ConvertType.STRING):
            parts.append((convert, None, []))
        elif versions:
            parts.append((convert, message or None, [versions[-1]]))
        else:
            return None
    try:
        return first_schema(
            snapshot, parts[0], parts[1], flatten=cfg.flattens, debezium=cfg.debezium
        )
    except SchemaUnavailableError:
        return None  # the layout refuses the schema: the round says so


def check_columns(cfg: TableTopicConfig, topic: str, snapshot: RegistrySnapshot) -> None:
    """Raises:
    ConfigError: ``partition.by``, ``id.columns`` or ``cdc.field`` name a column the
        layout lacks, or one of a type they cannot take (one line, as the round would
        say it).
    """
    from floe.config.id_columns import FROM_DEBEZIUM_KEY
    from floe.tabletopic.partitioning import PartitionSpecError, partition_spec
    from floe.tabletopic.upsert import Upsert, UpsertSpecError
    from floe.tabletopic.upsert import check_columns as check_ids

    schema = layout_schema(cfg, topic, snapshot)
    if schema is None:
        return
    try:
        partition_spec(schema, cfg.partition_by)
        if cfg.id_columns and cfg.id_columns != (FROM_DEBEZIUM_KEY,):
            check_ids(schema, Upsert(cfg.id_columns, cfg.cdc_field))
    except (PartitionSpecError, UpsertSpecError) as exc:
        raise ConfigError(f"{exc} (the columns of {topic}'s table)") from None


def checker(registry: Registry | None) -> Check:
    """The check the broker runs on a topic's validated config overrides (on its event
    loop: the registry is read in memory, nothing blocks).

    The check raises:
        ConfigError: see :func:`check_columns`.
    """

    def check(topic: str, overrides: Mapping[str, str]) -> None:
        cfg = resolve_table_topic(overrides)
        if not cfg.partition_by and not cfg.id_columns:
            return  # nothing names a column: no copy of the registry for every topic
        snapshot = RegistrySnapshot.take(registry) if registry is not None else RegistrySnapshot()
        check_columns(cfg, topic, snapshot)

    return check
