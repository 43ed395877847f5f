"""Topic configuration keys (the Kafka topic configs Floe honours), declared once.

A topic stores only the keys set on it; every other key resolves to the broker key
named in :data:`BROKER_DEFAULTS` or to the topic key's own default. Keys in the
``table.topic.*`` and ``automq.table.topic.*`` families are declared and validated in
:mod:`floe.config.tabletopic` and persisted under the name the client used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from floe.config import broker as b
from floe.config.keys import ConfigKey, KeySet
from floe.config.tabletopic import is_table_topic_key, validate_table_topic_configs
from floe.errors import ConfigError

CLEANUP_POLICY = ConfigKey(
    "cleanup.policy",
    str,
    "delete",
    "'delete' removes old segments by retention; 'compact' keeps the latest record per key.",
    choices=("delete", "compact"),
    is_list=True,
)
RETENTION_MS = ConfigKey(
    "retention.ms", int, 604800000, "Time records are kept, -1 forever.", min=-1
)
RETENTION_BYTES = ConfigKey(
    "retention.bytes", int, -1, "Per-partition size cap, -1 unbounded.", min=-1
)
SEGMENT_BYTES = ConfigKey(
    "segment.bytes", int, 1073741824, "Segment size before rolling.", min=14, max=2**31 - 1
)
SEGMENT_MS = ConfigKey("segment.ms", int, 604800000, "Segment age before rolling.", min=1)
MAX_MESSAGE_BYTES = ConfigKey(
    "max.message.bytes", int, 1048588, "Largest record batch accepted.", min=0, max=2**31 - 1
)
MESSAGE_TIMESTAMP_TYPE = ConfigKey(
    "message.timestamp.type",
    str,
    "CreateTime",
    "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches on append.",
    choices=("CreateTime", "LogAppendTime"),
)
MESSAGE_TIMESTAMP_BEFORE_MAX_MS = ConfigKey(
    "message.timestamp.before.max.ms",
    int,
    2**63 - 1,
    "How far a CreateTime record timestamp may be behind the broker's clock "
    "(INVALID_TIMESTAMP beyond).",
    min=0,
)
MESSAGE_TIMESTAMP_AFTER_MAX_MS = ConfigKey(
    "message.timestamp.after.max.ms",
    int,
    3600000,
    "How far a CreateTime record timestamp may be ahead of the broker's clock "
    "(INVALID_TIMESTAMP beyond).",
    min=0,
)
INDEX_INTERVAL_BYTES = ConfigKey(
    "index.interval.bytes", int, 4096, "Bytes between offset-index entries.", min=0
)
DELETE_RETENTION_MS = ConfigKey(
    "delete.retention.ms", int, 86400000, "How long compaction keeps tombstones.", min=0
)
MIN_COMPACTION_LAG_MS = ConfigKey(
    "min.compaction.lag.ms", int, 0, "Minimum record age before compaction.", min=0
)
FLUSH_MS = ConfigKey(
    "flush.ms",
    int,
    9223372036854775807,
    "Accepted for compatibility; the broker flush policy governs fsync.",
    min=0,
)
FLUSH_MESSAGES = ConfigKey(
    "flush.messages",
    int,
    9223372036854775807,
    "Accepted for compatibility; the broker flush policy governs fsync.",
    min=1,
)
COMPRESSION_TYPE = ConfigKey(
    "compression.type",
    str,
    "producer",
    "Batches are stored as the producer compressed them; only 'producer' is supported.",
    choices=("producer",),
)
MIN_INSYNC_REPLICAS = ConfigKey(
    "min.insync.replicas",
    int,
    1,
    "Accepted for compatibility; a single-node Floe has one replica.",
    min=1,
    max=1,
)
UNCLEAN_LEADER_ELECTION = ConfigKey(
    "unclean.leader.election.enable",
    bool,
    False,
    "Accepted for compatibility; a single-node Floe has one replica.",
)
PREALLOCATE = ConfigKey(
    "preallocate", bool, False, "Accepted for compatibility; segments are not preallocated."
)

TOPIC_KEYS = KeySet(
    [
        CLEANUP_POLICY,
        RETENTION_MS,
        RETENTION_BYTES,
        SEGMENT_BYTES,
        SEGMENT_MS,
        MAX_MESSAGE_BYTES,
        MESSAGE_TIMESTAMP_TYPE,
        MESSAGE_TIMESTAMP_BEFORE_MAX_MS,
        MESSAGE_TIMESTAMP_AFTER_MAX_MS,
        INDEX_INTERVAL_BYTES,
        DELETE_RETENTION_MS,
        MIN_COMPACTION_LAG_MS,
        FLUSH_MS,
        FLUSH_MESSAGES,
        COMPRESSION_TYPE,
        MIN_INSYNC_REPLICAS,
        UNCLEAN_LEADER_ELECTION,
        PREALLOCATE,
    ]
)

BROKER_DEFAULTS: dict[str, ConfigKey[Any]] = {
    CLEANUP_POLICY.name: b.LOG_CLEANUP_POLICY,
    RETENTION_MS.name: b.LOG_RETENTION_MS,
    RETENTION_BYTES.name: b.LOG_RETENTION_BYTES,
    SEGMENT_BYTES.name: b.LOG_SEGMENT_BYTES,
    SEGMENT_MS.name: b.LOG_SEGMENT_MS,
    MAX_MESSAGE_BYTES.name: b.MESSAGE_MAX_BYTES,
    MESSAGE_TIMESTAMP_TYPE.name: b.LOG_MESSAGE_TIMESTAMP_TYPE,
    MESSAGE_TIMESTAMP_BEFORE_MAX_MS.name: b.LOG_MESSAGE_TIMESTAMP_BEFORE_MAX_MS,
    MESSAGE_TIMESTAMP_AFTER_MAX_MS.name: b.LOG_MESSAGE_TIMESTAMP_AFTER_MAX_MS,
    INDEX_INTERVAL_BYTES.name: b.LOG_INDEX_INTERVAL_BYTES,
    DELETE_RETENTION_MS.name: b.LOG_CLEANER_DELETE_RETENTION_MS,
    MIN_COMPACTION_LAG_MS.name: b.LOG_CLEANER_MIN_COMPACTION_LAG_MS,
}


def is_passthrough(name: str) -> bool:
    """A key outside :data:`TOPIC_KEYS` that topics may carry (the table-topic family,
    validated by :func:`floe.config.tabletopic.validate_table_topic_configs`)."""
    return is_table_topic_key(name)


def validate_topic_configs(raw: Mapping[str, str | None]) -> dict[str, str]:
    """Validate topic config overrides and return them in canonical string form.

    Raises:
        ConfigError: an unknown key or an invalid value (the message says which and why).
    """
    out: dict[str, str] = {}
    table: dict[str, str] = {}
    for name, value in raw.items():
        if value is None:
            raise ConfigError(f"{name}: a value is required")
        if is_passthrough(name):
            table[name] = value
            continue
        key = TOPIC_KEYS.get(name)
        if key is None:
            raise ConfigError(f"unknown topic config {name!r}")
        out[name] = key.render(key.parse(value))
    # table-topic keys are validated together: some rules span keys and spellings
    out.update(validate_table_topic_configs(table))
    return out


@dataclass(frozen=True)
class ResolvedTopicConfig:
    """A topic's effective configuration: its overrides over the broker defaults."""

    overrides: Mapping[str, str]
    broker: Mapping[str, Any]

    def value(self, key: ConfigKey[Any]) -> Any:
        raw = self.overrides.get(key.name)
        if raw is not None:
            return key.parse(raw)
        broker_key = BROKER_DEFAULTS.get(key.name)
        if broker_key is not None:
            return self.broker.get(broker_key.name, broker_key.default)
        return key.default

    def source(self, name: str) -> str:
        """Where a key's value comes from: ``topic``, ``broker`` or ``default``."""
        if name in self.overrides:
            return "topic"
        broker_key = BROKER_DEFAULTS.get(name)
        if broker_key is not None and broker_key.name in self.broker:
            return "broker"
        return "default"

    @property
    def retention_ms(self) -> int:
        return int(self.value(RETENTION_MS))

    @property
    def retention_bytes(self) -> int:
        return int(self.value(RETENTION_BYTES))

    @property
    def segment_bytes(self) -> int:
        return int(self.value(SEGMENT_BYTES))

    @property
    def segment_ms(self) -> int:
        return int(self.value(SEGMENT_MS))

    @property
    def max_message_bytes(self) -> int:
        return int(self.value(MAX_MESSAGE_BYTES))

    @property
    def log_append_time(self) -> bool:
        return bool(self.value(MESSAGE_TIMESTAMP_TYPE) == "LogAppendTime")

    @property
    def timestamp_before_max_ms(self) -> int:
        return int(self.value(MESSAGE_TIMESTAMP_BEFORE_MAX_MS))

    @property
    def timestamp_after_max_ms(self) -> int:
        return int(self.value(MESSAGE_TIMESTAMP_AFTER_MAX_MS))

    @property
    def index_interval_bytes(self) -> int:
        return int(self.value(INDEX_INTERVAL_BYTES))

    @property
    def compact(self) -> bool:
        return "compact" in str(self.value(CLEANUP_POLICY)).split(",")

    @property
    def delete(self) -> bool:
        return "delete" in str(self.value(CLEANUP_POLICY)).split(",")

    @property
    def delete_retention_ms(self) -> int:
        return int(self.value(DELETE_RETENTION_MS))

    @property
    def min_compaction_lag_ms(self) -> int:
        return int(self.value(MIN_COMPACTION_LAG_MS))
