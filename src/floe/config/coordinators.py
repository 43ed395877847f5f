"""The group and transaction coordinators' keys (Kafka's names and defaults): how
groups rebalance and keep offsets, how transactions time out, and how many partitions
the internal topics that hold their state get.
"""

from __future__ import annotations

from floe.config.keys import ConfigKey

_DAY_MS = 24 * 3600 * 1000

GROUP_INITIAL_REBALANCE_DELAY_MS = ConfigKey(
    "group.initial.rebalance.delay.ms",
    int,
    3000,
    "How long the first rebalance of an empty group waits for more members to join.",
    min=0,
)
GROUP_MIN_SESSION_TIMEOUT_MS = ConfigKey(
    "group.min.session.timeout.ms",
    int,
    6000,
    "Smallest session.timeout.ms a consumer may ask for.",
    min=1,
)
GROUP_MAX_SESSION_TIMEOUT_MS = ConfigKey(
    "group.max.session.timeout.ms",
    int,
    1800000,
    "Largest session.timeout.ms a consumer may ask for.",
    min=1,
)
GROUP_MAX_SIZE = ConfigKey(
    "group.max.size", int, 2147483647, "Largest number of members in one group.", min=1
)
OFFSETS_RETENTION_MS = ConfigKey(
    "offsets.retention.ms",
    int,
    7 * _DAY_MS,
    "How long committed offsets of an empty group are kept.",
    min=1,
)
OFFSETS_RETENTION_CHECK_INTERVAL_MS = ConfigKey(
    "offsets.retention.check.interval.ms",
    int,
    600000,
    "How often expired offsets are removed.",
    min=1,
)
TRANSACTION_MAX_TIMEOUT_MS = ConfigKey(
    "transaction.max.timeout.ms",
    int,
    900000,
    "Largest transaction.timeout.ms a producer may ask for.",
    min=1,
)
TRANSACTION_ABORT_CHECK_INTERVAL_MS = ConfigKey(
    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
    int,
    10000,
    "How often transactions past their timeout are aborted.",
    min=1,
)
TRANSACTIONAL_ID_EXPIRATION_MS = ConfigKey(
    "transactional.id.expiration.ms",
    int,
    7 * _DAY_MS,
    "How long an idle transactional id is remembered.",
    min=1,
)
OFFSETS_TOPIC_NUM_PARTITIONS = ConfigKey(
    "offsets.topic.num.partitions",
    int,
    50,
    "Partitions of __consumer_offsets when it is created (a group's coordinator is the "
    "leader of partition abs(hash(group.id)) % this, as in Kafka; in a cluster that "
    "shares partitions they are spread over the brokers). An existing __consumer_offsets "
    "keeps its count.",
    min=1,
    max=1000,
    dynamic=False,
)
TRANSACTION_STATE_LOG_NUM_PARTITIONS = ConfigKey(
    "transaction.state.log.num.partitions",
    int,
    50,
    "Partitions of __transaction_state when it is created (a transactional id's "
    "coordinator is the leader of partition abs(hash(transactional.id)) % this, as in "
    "Kafka; in a cluster that shares partitions they are spread over the brokers). An "
    "existing __transaction_state keeps its count.",
    min=1,
    max=1000,
    dynamic=False,
)

COORDINATOR_KEYS = [
    GROUP_INITIAL_REBALANCE_DELAY_MS,
    GROUP_MIN_SESSION_TIMEOUT_MS,
    GROUP_MAX_SESSION_TIMEOUT_MS,
    GROUP_MAX_SIZE,
    OFFSETS_RETENTION_MS,
    OFFSETS_RETENTION_CHECK_INTERVAL_MS,
    TRANSACTION_MAX_TIMEOUT_MS,
    TRANSACTION_ABORT_CHECK_INTERVAL_MS,
    TRANSACTIONAL_ID_EXPIRATION_MS,
    OFFSETS_TOPIC_NUM_PARTITIONS,
    TRANSACTION_STATE_LOG_NUM_PARTITIONS,
]
