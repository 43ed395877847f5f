"""Table-topic configuration keys (``table.topic.*``), declared once.

Every key is declared here under its canonical name ``table.topic.X`` and is accepted
as well under the AutoMQ name ``automq.table.topic.X`` (drop-in compatibility with
AutoMQ tooling). Both names denote the *same* key:

* a topic may carry either name; the stored override keeps the name the client used;
* setting both names on one topic with different values is rejected (INVALID_CONFIG);
  with equal values it is accepted, and when reading, ``table.topic.X`` wins;
* besides each key's own type and bounds, :func:`check_table_topic_configs` checks the
  rules that span keys (``flatten`` needs a schema-aware value conversion).

:func:`validate_table_topic_configs` is what :func:`floe.config.topic.validate_topic_configs`
calls for these keys at CreateTopics, AlterConfigs and IncrementalAlterConfigs;
:func:`resolve_table_topic` turns a topic's overrides into a typed
:class:`TableTopicConfig` for the pipeline.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from floe.config import broker as b
from floe.config.id_columns import (
    FROM_DEBEZIUM_KEY,
    check_cdc_field,
    check_id_columns,
    parse_id_columns,
)
from floe.config.keys import ConfigKey, KeySet
from floe.config.partition_by import PartitionTerm, check_partition_by, parse_partition_by
from floe.errors import ConfigError

PREFIX = "table.topic."
AUTOMQ_PREFIX = "automq.table.topic."

CONVERT_TYPES = ("raw", "string", "by_schema_id", "by_latest_schema")
"""``raw``: bytes as is; ``string``: UTF-8 text; ``by_schema_id``: Confluent wire format
(magic byte + schema id) decoded with the built-in registry; ``by_latest_schema``: a
payload without prefix, decoded with the latest schema of the subject."""

SCHEMA_CONVERT_TYPES = ("by_schema_id", "by_latest_schema")
FLATTENING = ("flatten", "flatten_debezium")
"""The transforms that make the value's (or the Debezium row's) fields columns."""
DEBEZIUM_CDC_FIELD = "_cdc.op"
"""``cdc.field`` of a ``flatten_debezium`` upsert table when it is not set (the layout's
``_cdc`` column, :data:`floe.tabletopic.convert.debezium.CDC_COLUMN`)."""
DLQ_DEFAULT_TOPIC = "true"
"""``errors.dlq.topic`` naming the default dead-letter topic, ``<topic>.dlq``."""

_PROTO_NAME = re.compile(r"\.?[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def _check_subject(value: str) -> str | None:
    if value != value.strip() or any(ord(c) < 32 for c in value):
        return f"{value!r} is not a subject name (no control characters or edge spaces)"
    return None


_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def _check_dlq_topic(value: str) -> str | None:
    if value in ("", DLQ_DEFAULT_TOPIC) or (_TOPIC.fullmatch(value) and value not in (".", "..")):
        return None
    return f"{value!r} is not a topic name (1-249 of a-z A-Z 0-9 . _ -), 'true' or empty"


def _check_proto_name(value: str) -> str | None:
    if value == "" or _PROTO_NAME.fullmatch(value):
        return None
    return f"{value!r} is not a Protobuf message full name (like 'com.acme.Click')"


ENABLE = ConfigKey(
    "table.topic.enable",
    bool,
    False,
    "Materialize this topic as an Iceberg table. Disabling stops materializing and keeps "
    "the table; re-enabling resumes from the offsets recorded in the table.",
)
COMMIT_INTERVAL_MS = ConfigKey(
    "table.topic.commit.interval.ms",
    int,
    60000,
    "Time between commit rounds; each round that finds new data makes one Iceberg commit.",
    min=1000,
    max=900000,
)
NAMESPACE = ConfigKey(
    "table.topic.namespace",
    str,
    "",
    "Iceberg namespace of the table (empty: the broker's table.topic.namespace).",
    check=b.check_namespace,  # empty on a topic: the broker default
)
CONVERT_VALUE_TYPE = ConfigKey(
    "table.topic.convert.value.type",
    str,
    "raw",
    "How record values are decoded: raw (bytes), string (UTF-8), by_schema_id (Confluent "
    "wire format, schema from the registry) or by_latest_schema (latest schema of the "
    "subject, payload without prefix).",
    choices=CONVERT_TYPES,
)
CONVERT_KEY_TYPE = ConfigKey(
    "table.topic.convert.key.type",
    str,
    "string",
    "How record keys are decoded: raw, string, by_schema_id or by_latest_schema.",
    choices=CONVERT_TYPES,
)
VALUE_SUBJECT = ConfigKey(
    "table.topic.convert.value.by_latest_schema.subject",
    str,
    "",
    "Subject whose latest schema decodes values in by_latest_schema mode (empty: '<topic>-value').",
    check=_check_subject,
)
VALUE_MESSAGE_FULL_NAME = ConfigKey(
    "table.topic.convert.value.by_latest_schema.message.full.name",
    str,
    "",
    "Protobuf message (full name) decoding values in by_latest_schema mode "
    "(empty: the schema's first message).",
    check=_check_proto_name,
)
KEY_SUBJECT = ConfigKey(
    "table.topic.convert.key.by_latest_schema.subject",
    str,
    "",
    "Subject whose latest schema decodes keys in by_latest_schema mode (empty: '<topic>-key').",
    check=_check_subject,
)
KEY_MESSAGE_FULL_NAME = ConfigKey(
    "table.topic.convert.key.by_latest_schema.message.full.name",
    str,
    "",
    "Protobuf message (full name) decoding keys in by_latest_schema mode "
    "(empty: the schema's first message).",
    check=_check_proto_name,
)
TRANSFORM_VALUE_TYPE = ConfigKey(
    "table.topic.transform.value.type",
    str,
    "none",
    "none: the value is one column _kafka_value; flatten: the value's top-level fields "
    "become columns; flatten_debezium: the value is a Debezium change event whose row "
    "(after, or before for a delete) is flattened, plus a _cdc column (op, ts, offset, "
    "source). Both need convert.value.type by_schema_id or by_latest_schema.",
    choices=("none", *FLATTENING),
)
ROUTE_BY = ConfigKey(
    "table.topic.route.by",
    str,
    "none",
    "none: every record lands in the topic's table (several record types: one table with "
    "the union of their fields); record_name: each Avro record type (a subject "
    "<topic>-<record full name>, as TopicRecordNameStrategy registers it) lands in its own "
    "table <topic>_<record name>, each with its own schema evolution and committed "
    "offsets. record_name needs convert.value.type by_schema_id.",
    choices=("none", "record_name"),
)
ERRORS_TOLERANCE = ConfigKey(
    "table.topic.errors.tolerance",
    str,
    "invalid_data",
    "none: stop materializing the table on a bad record and report it; invalid_data: skip "
    "records that cannot be decoded or converted, count and log them; all: skip any "
    "record whose processing fails.",
    choices=("none", "invalid_data", "all"),
)
ERRORS_DLQ_TOPIC = ConfigKey(
    "table.topic.errors.dlq.topic",
    str,
    "",
    "Where skipped records go, byte-identical, with headers saying why (a dead-letter "
    "topic, created when first needed): a topic name, 'true' for <topic>.dlq, empty for "
    "none. Needs errors.tolerance invalid_data or all.",
    check=_check_dlq_topic,
)
DLQ_SOURCE = ConfigKey(
    "table.topic.errors.dlq.source",
    str,
    "",
    "Set by Floe on the dead-letter topics it creates: the table topic whose skipped "
    "records it holds (in a cluster its partitions stay with that topic's pipeline).",
)
ROUND_MAX_RECORDS = ConfigKey(
    "table.topic.round.max.records",
    int,
    2_000_000,
    "Records (offsets) one commit round takes at most; a larger backlog (after an "
    "outage, or when a topic becomes a table topic) catches up in several rounds, each "
    "its own commit, run back to back.",
    min=1000,
    max=100_000_000,
)
ROUND_MAX_BYTES = ConfigKey(
    "table.topic.round.max.bytes",
    int,
    512 * 1024 * 1024,
    "Bytes of log one commit round reads at most (as for round.max.records). The Spark "
    "tasks of a round read at most 64 MiB each, so worker memory is bounded by bytes.",
    min=1024 * 1024,
    max=64 * 1024 * 1024 * 1024,
)
RETENTION_WAIT = ConfigKey(
    "table.topic.retention.wait",
    bool,
    True,
    "Retention (retention.ms, retention.bytes) and compaction keep a partition's records "
    "until the table has materialized them. false: they follow their own settings, and "
    "records deleted before the table read them are counted as lost.",
)
PARTITION_BY = ConfigKey(
    "table.topic.partition.by",
    str,
    "",
    "The table's Iceberg partition spec, e.g. [bucket(user_id, 16), day(ts)]: columns "
    "(identity) and identity, year, month, day, hour, bucket(col, N), truncate(col, W) "
    "of any column, nested ones as a.b (_kafka_metadata.timestamp). Changing it evolves "
    "the table's spec at the next round (files written before keep theirs). []: "
    "unpartitioned; empty: the table keeps the spec it has.",
    check=check_partition_by,
)
ID_COLUMNS = ConfigKey(
    "table.topic.id.columns",
    str,
    "",
    "The columns identifying a row of an upsert table, e.g. [region, name]: value "
    "columns, nested ones as a.b, or the key (_kafka_key, _kafka_key.id). Each a "
    "primitive, non-floating type; a record with one of them null is a bad record. "
    "[_from_debezium_key_]: the fields of the key's record schema (needs a "
    "schema-decoded key and a flattening transform).",
    check=check_id_columns,
)
UPSERT_ENABLE = ConfigKey(
    "table.topic.upsert.enable",
    bool,
    False,
    "true: a record replaces the table's row with the same id.columns (the last by "
    "offset wins within a round) and a tombstone (null value) deletes it; the table "
    "gets position deletes (Iceberg v2 merge-on-read). Needs id.columns.",
)
CDC_FIELD = ConfigKey(
    "table.topic.cdc.field",
    str,
    "",
    "A column whose first letter says what a record does to its row (case-insensitive): "
    "D deletes it, I, U, anything else or null upserts it. Implies upsert; needs "
    "id.columns. Empty with flatten_debezium and id.columns: _cdc.op.",
    check=check_cdc_field,
)
MAINTENANCE_INTERVAL_MS = ConfigKey(
    "table.topic.maintenance.interval.ms",
    int,
    3_600_000,
    "Time between two maintenance runs of the table (compaction, snapshot expiry, orphan "
    "files, manifests), measured from the last run recorded in the table; 0: never on a "
    "schedule (floe table maintain --now still runs it).",
    min=0,
    max=7 * 24 * 3_600_000,
)
MAINTENANCE_TARGET_FILE_SIZE_BYTES = ConfigKey(
    "table.topic.maintenance.target.file.size.bytes",
    int,
    128 * 1024 * 1024,
    "Size compaction (rewrite_data_files) combines small data files into.",
    min=1024 * 1024,
    max=16 * 1024 * 1024 * 1024,
)
MAINTENANCE_MIN_INPUT_FILES = ConfigKey(
    "table.topic.maintenance.min.input.files",
    int,
    5,
    "Compaction rewrites a partition's files only when it can combine at least this many.",
    min=2,
    max=100_000,
)
MAINTENANCE_RETAIN_LAST = ConfigKey(
    "table.topic.maintenance.snapshots.retain.last",
    int,
    100,
    "Snapshots snapshot expiry always keeps (the newest), whatever their age.",
    min=1,
    max=1_000_000,
)
MAINTENANCE_SNAPSHOT_MAX_AGE_MS = ConfigKey(
    "table.topic.maintenance.snapshots.max.age.ms",
    int,
    24 * 3_600_000,
    "Snapshots older than this are expired (beyond the retained ones): the time-travel "
    "window (0: keep only the retained ones). Lower it for short commit intervals (each "
    "snapshot is a line of metadata). Floe's offsets live in the table properties: no "
    "expiry loses them.",
    min=0,
    max=365 * 24 * 3_600_000,
)
MAINTENANCE_ORPHAN_AGE_MS = ConfigKey(
    "table.topic.maintenance.orphan.age.ms",
    int,
    3 * 24 * 3_600_000,
    "Files in the table's location that no snapshot references are deleted once older "
    "than this (files of failed rounds); it must outlast any round, whose staged files "
    "are unreferenced until it commits (at least 24 h, Iceberg's own safety limit).",
    min=24 * 3_600_000,
    max=365 * 24 * 3_600_000,
)
METADATA_VERSIONS_KEPT = ConfigKey(
    "table.topic.metadata.versions.kept",
    int,
    100,
    "Table metadata files (one per commit) kept besides the current one; older ones are "
    "deleted at each commit (Iceberg's write.metadata.previous-versions-max, with "
    "delete-after-commit on). A reader holding an older metadata file's path reads a "
    "deleted file after this many commits.",
    min=1,
    max=100_000,
)

TABLE_TOPIC_KEYS = KeySet(
    [
        ENABLE,
        COMMIT_INTERVAL_MS,
        NAMESPACE,
        CONVERT_VALUE_TYPE,
        CONVERT_KEY_TYPE,
        VALUE_SUBJECT,
        VALUE_MESSAGE_FULL_NAME,
        KEY_SUBJECT,
        KEY_MESSAGE_FULL_NAME,
        TRANSFORM_VALUE_TYPE,
        ROUTE_BY,
        ERRORS_TOLERANCE,
        ERRORS_DLQ_TOPIC,
        DLQ_SOURCE,
        ROUND_MAX_RECORDS,
        ROUND_MAX_BYTES,
        RETENTION_WAIT,
        PARTITION_BY,
        ID_COLUMNS,
        UPSERT_ENABLE,
        CDC_FIELD,
        MAINTENANCE_INTERVAL_MS,
        MAINTENANCE_TARGET_FILE_SIZE_BYTES,
        MAINTENANCE_MIN_INPUT_FILES,
        MAINTENANCE_RETAIN_LAST,
        MAINTENANCE_SNAPSHOT_MAX_AGE_MS,
        MAINTENANCE_ORPHAN_AGE_MS,
        METADATA_VERSIONS_KEPT,
    ]
)


def is_table_topic_key(name: str) -> bool:
    """A name in the ``table.topic.*`` or ``automq.table.topic.*`` family."""
    return name.startswith((PREFIX, AUTOMQ_PREFIX))


def canonical_name(name: str) -> str:
    """``automq.table.topic.X`` -> ``table.topic.X``; other names unchanged."""
    if name.startswith(AUTOMQ_PREFIX):
        return name[len("automq.") :]
    return name


def key_for(name: str) -> ConfigKey[Any]:
    """The declaration behind either spelling of a table-topic key.

    Raises:
        ConfigError: no such table-topic key.
    """
    key = TABLE_TOPIC_KEYS.get(canonical_name(name))
    if key is None:
        raise ConfigError(f"unknown topic config {name!r} (not a table.topic key)")
    return key


def validate_table_topic_configs(raw: Mapping[str, str]) -> dict[str, str]:
    """Validate the table-topic keys among a topic's full set of overrides.

    ``raw`` holds only table-topic names (either spelling). Returns them in canonical
    string form, under the names given.

    Raises:
        ConfigError: an unknown key, an invalid value, both spellings of one key with
            different values, or a rule spanning keys broken (the message says which).
    """
    out: dict[str, str] = {}
    parsed: dict[str, tuple[str, Any]] = {}  # canonical name -> (given name, value)
    for name, value in raw.items():
        key = key_for(name)
        try:
            typed = key.parse(value)
        except ConfigError as exc:
            # name the key as the client spelled it
            raise ConfigError(str(exc).replace(key.name, name, 1)) from None
        out[name] = key.render(typed)
        seen = parsed.get(key.name)
        if seen is not None and seen[1] != typed:
            raise ConfigError(
                f"{seen[0]} and {name} are the same key and are set to different values "
                f"({key.render(seen[1])!r} and {key.render(typed)!r}): set only one"
            )
        parsed[key.name] = (name, typed)
    check_table_topic_configs({k: v for k, (_, v) in parsed.items()})
    return out


def check_table_topic_configs(values: Mapping[str, Any]) -> None:
    """Rules spanning keys, on parsed values by canonical name (unset keys: defaults).

    Raises:
        ConfigError: the first broken rule.
    """

    def get(key: ConfigKey[Any]) -> Any:
        return values.get(key.name, key.default)

    transform = get(TRANSFORM_VALUE_TYPE)
    if transform in FLATTENING and get(CONVERT_VALUE_TYPE) not in SCHEMA_CONVERT_TYPES:
        raise ConfigError(
            f"{TRANSFORM_VALUE_TYPE.name}: {transform!r} needs a schema: set "
            f"{CONVERT_VALUE_TYPE.name} to by_schema_id or by_latest_schema "
            f"(it is {get(CONVERT_VALUE_TYPE)!r})"
        )
    if parse_id_columns(get(ID_COLUMNS)) == (FROM_DEBEZIUM_KEY,):
        if get(CONVERT_KEY_TYPE) not in SCHEMA_CONVERT_TYPES:
            raise ConfigError(
                f"{ID_COLUMNS.name}: [{FROM_DEBEZIUM_KEY}] takes the columns from the key's "
                f"record schema: set {CONVERT_KEY_TYPE.name} to by_schema_id or "
                f"by_latest_schema (it is {get(CONVERT_KEY_TYPE)!r})"
            )
        if transform not in FLATTENING:
            raise ConfigError(
                f"{ID_COLUMNS.name}: [{FROM_DEBEZIUM_KEY}] names value columns: set "
                f"{TRANSFORM_VALUE_TYPE.name} to flatten_debezium or flatten "
                f"(it is {transform!r})"
            )
    if get(ROUTE_BY) == "record_name" and get(CONVERT_VALUE_TYPE) != "by_schema_id":
        raise ConfigError(
            f"{ROUTE_BY.name}: record_name routes by the schema id each value carries: set "
            f"{CONVERT_VALUE_TYPE.name} to by_schema_id (it is {get(CONVERT_VALUE_TYPE)!r})"
        )
    if get(ERRORS_DLQ_TOPIC) and get(ERRORS_TOLERANCE) == "none":
        raise ConfigError(
            f"{ERRORS_DLQ_TOPIC.name}: a dead-letter topic needs skipped records: set "
            f"{ERRORS_TOLERANCE.name} to invalid_data or all (it is 'none')"
        )
    for needs_ids in (UPSERT_ENABLE, CDC_FIELD):
        if get(needs_ids) and not parse_id_columns(get(ID_COLUMNS)):
            raise ConfigError(
                f"{needs_ids.name}: upserts need the columns identifying a row: set "
                f"{ID_COLUMNS.name} (e.g. [id])"
            )


@dataclass(frozen=True)
class TableTopicConfig:
    """A topic's effective table-topic settings (overrides over defaults), typed."""

    enable: bool
    commit_interval_ms: int
    namespace: str
    convert_value_type: str
    convert_key_type: str
    value_subject: str
    value_message_full_name: str
    key_subject: str
    key_message_full_name: str
    transform_value_type: str
    errors_tolerance: str
    route_by: str = ROUTE_BY.default
    round_max_records: int = ROUND_MAX_RECORDS.default
    round_max_bytes: int = ROUND_MAX_BYTES.default
    retention_wait: bool = RETENTION_WAIT.default
    partition_by: tuple[PartitionTerm, ...] | None = None
    """None: the spec is not Floe's to manage (``partition.by`` unset)."""
    dlq_topic: str = ERRORS_DLQ_TOPIC.default
    """``errors.dlq.topic`` as set (see :meth:`dead_letter_topic`)."""
    id_columns: tuple[str, ...] = ()
    upsert_enable: bool = UPSERT_ENABLE.default
    cdc_field: str = CDC_FIELD.default
    maintenance_interval_ms: int = MAINTENANCE_INTERVAL_MS.default
    maintenance_target_file_size_bytes: int = MAINTENANCE_TARGET_FILE_SIZE_BYTES.default
    maintenance_min_input_files: int = MAINTENANCE_MIN_INPUT_FILES.default
    maintenance_retain_last: int = MAINTENANCE_RETAIN_LAST.default
    maintenance_snapshot_max_age_ms: int = MAINTENANCE_SNAPSHOT_MAX_AGE_MS.default
    maintenance_orphan_age_ms: int = MAINTENANCE_ORPHAN_AGE_MS.default
    metadata_versions_kept: int = METADATA_VERSIONS_KEPT.default

    @property
    def flattens(self) -> bool:
        """The value's (or the Debezium row's) fields are columns."""
        return self.transform_value_type in FLATTENING

    @property
    def routes(self) -> bool:
        """Each record type lands in its own table (``route.by = record_name``)."""
        return self.route_by == "record_name"

    @property
    def debezium(self) -> bool:
        """Values are Debezium envelopes (``flatten_debezium``)."""
        return self.transform_value_type == "flatten_debezium"

    @property
    def upserts(self) -> bool:
        """Records upsert (and delete) rows by their id columns."""
        return bool(self.id_columns) and (self.upsert_enable or bool(self.cdc_field))

    def value_subject_for(self, topic: str) -> str:
        """The subject decoding values in ``by_latest_schema`` mode."""
        return self.value_subject or f"{topic}-value"

    def dead_letter_topic(self, topic: str) -> str | None:
        """The topic ``topic``'s skipped records go to; None without one."""
        if not self.dlq_topic:
            return None
        return f"{topic}.dlq" if self.dlq_topic == DLQ_DEFAULT_TOPIC else self.dlq_topic

    def key_subject_for(self, topic: str) -> str:
        """The subject decoding keys in ``by_latest_schema`` mode."""
        return self.key_subject or f"{topic}-key"

    def parts_of(self, topic: str) -> tuple[tuple[str, str, str, str], tuple[str, str, str, str]]:
        """``(part, convert type, subject, message full name)`` of the value, then the
        key: how each part of ``topic``'s records is decoded."""
        return (
            ("value", self.convert_value_type, self.value_subject_for(topic),
             self.value_message_full_name),
            ("key", self.convert_key_type, self.key_subject_for(topic),
             self.key_message_full_name),
        )  # fmt: skip


def resolve_table_topic(
    overrides: Mapping[str, str], broker: Mapping[str, Any] | None = None
) -> TableTopicConfig:
    """The effective table-topic settings of a topic.

    Args:
        overrides: the topic's stored config overrides (any keys; others are ignored).
        broker: explicit broker values by name (for ``table.topic.namespace``).

    Raises:
        ConfigError: a stored value no longer parses (configs are validated on write).
    """
    values: dict[str, Any] = {}
    # AutoMQ spelling first, so the canonical spelling wins when both are present
    for name in sorted(overrides, key=lambda n: not n.startswith(AUTOMQ_PREFIX)):
        if is_table_topic_key(name):
            key = TABLE_TOPIC_KEYS.get(canonical_name(name))
            if key is not None:
                values[key.name] = key.parse(overrides[name])

    def get(key: ConfigKey[Any]) -> Any:
        return values.get(key.name, key.default)

    id_columns = parse_id_columns(get(ID_COLUMNS))
    cdc_field = get(CDC_FIELD)
    if not cdc_field and id_columns and get(TRANSFORM_VALUE_TYPE) == "flatten_debezium":
        cdc_field = DEBEZIUM_CDC_FIELD  # a Debezium table with ids applies the changes
    namespace = get(NAMESPACE) or (broker or {}).get(
        b.TABLE_TOPIC_NAMESPACE.name, b.TABLE_TOPIC_NAMESPACE.default
    )
    return TableTopicConfig(
        enable=get(ENABLE),
        commit_interval_ms=get(COMMIT_INTERVAL_MS),
        namespace=namespace,
        convert_value_type=get(CONVERT_VALUE_TYPE),
        convert_key_type=get(CONVERT_KEY_TYPE),
        value_subject=get(VALUE_SUBJECT),
        value_message_full_name=get(VALUE_MESSAGE_FULL_NAME),
        key_subject=get(KEY_SUBJECT),
        key_message_full_name=get(KEY_MESSAGE_FULL_NAME),
        transform_value_type=get(TRANSFORM_VALUE_TYPE),
        errors_tolerance=get(ERRORS_TOLERANCE),
        route_by=get(ROUTE_BY),
        round_max_records=get(ROUND_MAX_RECORDS),
        round_max_bytes=get(ROUND_MAX_BYTES),
        retention_wait=get(RETENTION_WAIT),
        partition_by=parse_partition_by(get(PARTITION_BY)),
        dlq_topic=get(ERRORS_DLQ_TOPIC),
        id_columns=id_columns,
        upsert_enable=get(UPSERT_ENABLE),
        cdc_field=cdc_field,
        maintenance_interval_ms=get(MAINTENANCE_INTERVAL_MS),
        maintenance_target_file_size_bytes=get(MAINTENANCE_TARGET_FILE_SIZE_BYTES),
        maintenance_min_input_files=get(MAINTENANCE_MIN_INPUT_FILES),
        maintenance_retain_last=get(MAINTENANCE_RETAIN_LAST),
        maintenance_snapshot_max_age_ms=get(MAINTENANCE_SNAPSHOT_MAX_AGE_MS),
        maintenance_orphan_age_ms=get(MAINTENANCE_ORPHAN_AGE_MS),
        metadata_versions_kept=get(METADATA_VERSIONS_KEPT),
    )
