"""Broker configuration keys: every key ``floe up`` reads, declared once.

Sources, lowest to highest precedence: these defaults, ``floe.toml`` (dotted keys or
TOML tables: ``[log] segment.bytes = ...`` is ``log.segment.bytes``), ``FLOE_*``
environment variables (``FLOE_LOG_SEGMENT_BYTES``), then command-line options.

Two families are open-ended and are not declared here (see :mod:`floe.config.loader`):
any other ``spark.*`` key is a Spark conf passed to the SparkSession verbatim, and
``catalog.properties.*`` / ``catalog.spark.*`` / ``catalog.pyiceberg.*`` are Iceberg
catalog properties (for both engines / Spark only / pyiceberg only).
"""

from __future__ import annotations

import re

from floe.config.cli import CLI_KEYS
from floe.config.coordinators import COORDINATOR_KEYS
from floe.config.keys import ConfigKey, KeySet, check_with
from floe.config.security import SECURITY_KEYS
from floe.errors import ConfigError

_DAY_MS = 24 * 3600 * 1000

DATA_DIR = ConfigKey(
    "data.dir", str, "./floe-data", "Directory holding logs and metadata.", dynamic=False
)
HOST = ConfigKey(
    "host",
    str,
    "127.0.0.1",
    "Interface the Kafka, Schema Registry and admin listeners bind to (registry.host and "
    "admin.host bind theirs elsewhere when set).",
    dynamic=False,
)
KAFKA_PORT = ConfigKey(
    "kafka.port",
    int,
    9092,
    "Kafka protocol listener port (0 = any free port).",
    min=0,
    max=65535,
    dynamic=False,
)
ADVERTISED_HOST = ConfigKey(
    "advertised.host",
    str,
    "",
    "Host clients are told to connect to (empty: the bind host).",
    dynamic=False,
)
ADVERTISED_PORT = ConfigKey(
    "advertised.port",
    int,
    0,
    "Port clients are told to connect to (0: the bound Kafka port).",
    min=0,
    max=65535,
    dynamic=False,
)
NODE_ID = ConfigKey(
    "node.id", int, 1, "This broker's node id.", min=0, max=2**31 - 1, dynamic=False
)
CLUSTER_ID = ConfigKey(
    "cluster.id",
    str,
    "",
    "Cluster id (empty: generated once and stored in the data dir).",
    dynamic=False,
)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
THIRD_PARTY_LOG_LEVEL = "WARNING"
"""Where the libraries' loggers (pyiceberg, py4j, uvicorn, ...) log unless named."""


def log_levels(value: str) -> tuple[str, dict[str, str]]:
    """``log.level`` parsed: Floe's own level, and the level of each logger family it
    names (``INFO,pyiceberg=DEBUG,floe.tabletopic=DEBUG``).

    Raises:
        ConfigError: an unknown level, a family without a name, or no Floe level.
    """
    floe = ""
    families: dict[str, str] = {}
    for item in (part.strip() for part in value.split(",")):
        name, sep, level = item.rpartition("=")
        level = level.strip().upper()
        if level not in LOG_LEVELS:
            raise ConfigError(f"log.level: {item!r} is not one of {', '.join(LOG_LEVELS)}")
        if not sep:
            floe = level
        elif not name.strip():
            raise ConfigError(f"log.level: {item!r} names no logger")
        else:
            families[name.strip()] = level
    if not floe:
        raise ConfigError("log.level: no level for Floe's own logs (e.g. INFO,pyiceberg=DEBUG)")
    return floe, families


LOG_LEVEL = ConfigKey(
    "log.level",
    str,
    "INFO",
    "Floe's log level (DEBUG, INFO, WARNING, ERROR), then optional logger=LEVEL overrides "
    "for logger families, comma separated: INFO,pyiceberg=DEBUG,floe.tabletopic=DEBUG. "
    "Libraries' loggers (pyiceberg, py4j, uvicorn, botocore, ...) log at WARNING unless "
    "named.",
    check=check_with(log_levels),
)
LOG_FORMAT = ConfigKey(
    "log.format",
    str,
    "text",
    "Log lines on stderr: text, or json (one object per line with timestamp, level, "
    "logger, event and the message's key=value fields; docs/operations.md).",
    choices=("text", "json"),
    dynamic=False,
)

AUTO_CREATE_TOPICS = ConfigKey(
    "auto.create.topics.enable",
    bool,
    True,
    "Create a topic when a client asks for metadata of an unknown topic and may create "
    "it (CREATE on the cluster or the topic). A Produce never creates one, as in Kafka.",
)
NUM_PARTITIONS = ConfigKey(
    "num.partitions", int, 1, "Partition count of auto-created topics.", min=1, max=10000
)
CREATE_TOPIC_MAX_PARTITIONS = ConfigKey(
    "create.topic.max.partitions",
    int,
    1000,
    "Most partitions one topic may have (each holds open files): CreateTopics, "
    "CreatePartitions, auto-creation and the admin API refuse more with INVALID_PARTITIONS.",
    min=1,
    max=10000,
)
CREATE_REQUEST_MAX_PARTITIONS = ConfigKey(
    "create.request.max.partitions",
    int,
    2000,
    "Most partitions one CreateTopics or CreatePartitions request may create in all; a "
    "larger request creates nothing and every topic in it gets POLICY_VIOLATION.",
    min=1,
    max=1000000,
)
AUTO_CREATE_TOPICS_MAX = ConfigKey(
    "auto.create.topics.max",
    int,
    1000,
    "Auto-creation (by Metadata) creates a topic only while the broker holds fewer "
    "topics than this, internal ones included; past it the topic gets POLICY_VIOLATION. "
    "CreateTopics is not limited by it. 0 disables auto-creation.",
    min=0,
    max=1000000,
)
SOCKET_REQUEST_MAX_BYTES = ConfigKey(
    "socket.request.max.bytes",
    int,
    104857600,
    "Largest request frame accepted; a larger one closes the connection.",
    min=1024,
    max=2**31 - 1,
    dynamic=False,
)
SOCKET_REQUEST_READ_TIMEOUT_MS = ConfigKey(
    "socket.request.read.timeout.ms",
    int,
    30000,
    "Time a client has to send a whole request frame once its first byte arrived; a "
    "slower one (a slowloris trickling bytes) is disconnected.",
    min=1,
    dynamic=False,
)
SOCKET_RESPONSE_WRITE_TIMEOUT_MS = ConfigKey(
    "socket.response.write.timeout.ms",
    int,
    60000,
    "Time responses may wait for a client that reads none of their bytes (its socket "
    "buffer full) before the connection is closed.",
    min=1,
    dynamic=False,
)
CONNECTIONS_MAX_QUEUED_BYTES = ConfigKey(
    "connections.max.queued.bytes",
    int,
    32 * 1024 * 1024,
    "Per connection: bytes of requests read but not answered plus responses not yet sent. "
    "Beyond it the broker reads no more requests from that connection until its responses "
    "drain (one larger request or response still passes alone).",
    min=64 * 1024,
    max=2**31 - 1,
    dynamic=False,
)
CONNECTIONS_MAX_IDLE_MS = ConfigKey(
    "connections.max.idle.ms",
    int,
    600000,
    "A connection with no request, response or request in progress for this long is "
    "closed; -1 never.",
    min=-1,
    dynamic=False,
    check=lambda v: "use -1 (never) or a positive time" if v == 0 else None,
)
MAX_CONNECTIONS = ConfigKey(
    "max.connections",
    int,
    2147483647,
    "Kafka connections open at once; a new one beyond it is closed at once.",
    min=1,
    max=2**31 - 1,
    dynamic=False,
)
MAX_CONNECTIONS_PER_IP = ConfigKey(
    "max.connections.per.ip",
    int,
    2147483647,
    "Kafka connections open at once from one IP address; a new one beyond it is closed.",
    min=1,
    max=2**31 - 1,
    dynamic=False,
)
FETCH_MAX_BYTES = ConfigKey(
    "fetch.max.bytes",
    int,
    55 * 1024 * 1024,
    "Most record bytes one Fetch response carries, whatever the client asks (the first "
    "batch of the first non-empty partition still comes whole: KIP-74).",
    min=1024,
    max=2**31 - 1,
    dynamic=False,
)
MESSAGE_MAX_BYTES = ConfigKey(
    "message.max.bytes",
    int,
    1048588,
    "Default largest record batch a topic accepts (topic key max.message.bytes).",
    min=0,
    max=2**31 - 1,
)
MESSAGE_DECOMPRESSED_MAX_RATIO = ConfigKey(
    "message.decompressed.max.ratio",
    int,
    16,
    "A compressed batch may decompress to at most its topic's max.message.bytes times "
    "this; past it the batch is refused with MESSAGE_TOO_LARGE, without decompressing "
    "further (a few KB of zstd cannot become gigabytes in memory).",
    min=1,
    max=1024,
)
LOG_SEGMENT_BYTES = ConfigKey(
    "log.segment.bytes",
    int,
    1073741824,
    "Default segment size before a new segment is rolled (topic key segment.bytes).",
    min=14,
    max=2**31 - 1,
)
LOG_SEGMENT_MS = ConfigKey(
    "log.roll.ms",
    int,
    7 * _DAY_MS,
    "Default age after which a segment is rolled (topic key segment.ms).",
    min=1,
)
LOG_RETENTION_MS = ConfigKey(
    "log.retention.ms",
    int,
    7 * _DAY_MS,
    "Default time records are kept, -1 forever (topic key retention.ms).",
    min=-1,
)
LOG_RETENTION_BYTES = ConfigKey(
    "log.retention.bytes",
    int,
    -1,
    "Default partition size cap, -1 unbounded (topic key retention.bytes).",
    min=-1,
)
LOG_CLEANUP_POLICY = ConfigKey(
    "log.cleanup.policy",
    str,
    "delete",
    "Default cleanup policy (topic key cleanup.policy).",
    choices=("delete", "compact"),
    is_list=True,
)
LOG_RETENTION_CHECK_INTERVAL_MS = ConfigKey(
    "log.retention.check.interval.ms",
    int,
    300000,
    "How often retention and compaction run.",
    min=100,
)
LOG_INDEX_INTERVAL_BYTES = ConfigKey(
    "log.index.interval.bytes",
    int,
    4096,
    "Bytes of log between two offset-index entries (topic key index.interval.bytes).",
    min=0,
)
LOG_MESSAGE_TIMESTAMP_TYPE = ConfigKey(
    "log.message.timestamp.type",
    str,
    "CreateTime",
    "Default timestamp type (topic key message.timestamp.type).",
    choices=("CreateTime", "LogAppendTime"),
)
LOG_MESSAGE_TIMESTAMP_BEFORE_MAX_MS = ConfigKey(
    "log.message.timestamp.before.max.ms",
    int,
    2**63 - 1,
    "Default of how far a CreateTime record timestamp may be behind the broker's clock "
    "(topic key message.timestamp.before.max.ms); older records get INVALID_TIMESTAMP.",
    min=0,
)
LOG_MESSAGE_TIMESTAMP_AFTER_MAX_MS = ConfigKey(
    "log.message.timestamp.after.max.ms",
    int,
    3600000,
    "Default of how far a CreateTime record timestamp may be ahead of the broker's clock "
    "(topic key message.timestamp.after.max.ms); later records get INVALID_TIMESTAMP.",
    min=0,
)
LOG_CLEANER_DELETE_RETENTION_MS = ConfigKey(
    "log.cleaner.delete.retention.ms",
    int,
    _DAY_MS,
    "How long compaction keeps tombstones (topic key delete.retention.ms).",
    min=0,
)
LOG_CLEANER_MIN_COMPACTION_LAG_MS = ConfigKey(
    "log.cleaner.min.compaction.lag.ms",
    int,
    0,
    "Minimum age of a record before compaction may remove it.",
    min=0,
)

LOG_FLUSH_POLICY = ConfigKey(
    "log.flush.policy",
    str,
    "acks",
    "When the log is fsynced. 'acks': acks=all produce requests are answered only after "
    "an fsync (shared by all requests waiting at that moment: group commit); acks=1 and "
    "acks=0 are answered once written to the OS. 'interval': fsync every "
    "log.flush.interval.ms, every ack is answered once written to the OS. In every policy "
    "an answered write survives kill -9 of the broker; only 'acks' also survives a power "
    "loss for acks=all.",
    choices=("acks", "interval"),
    dynamic=False,
)
LOG_FLUSH_INTERVAL_MS = ConfigKey(
    "log.flush.interval.ms",
    int,
    1000,
    "fsync period of the 'interval' flush policy (and of idle partitions in 'acks').",
    min=1,
)
LOG_MAX_OPEN_FILES = ConfigKey(
    "log.max.open.files",
    int,
    10000,
    "Most segment and index files the store keeps open at once (a least-recently-used "
    "cache; the others are reopened when used), capped at half the process's open-file "
    "limit, which floe up raises to its hard limit at start.",
    min=8,
    max=1048576,
    dynamic=False,
)

CLUSTER_METADATA_URL = ConfigKey(
    "cluster.metadata.url",
    str,
    "",
    "Where the cluster's brokers, partition ownership and leases live: empty for one "
    "broker without a cluster (the embedded default); etcd://host:port[,host:port] "
    "(etcd 3.5.5 or later), postgresql://user@host:port/database (a libpq URI), or "
    "sqlite:///path/cluster.db (one machine). Needs storage.type = s3.",
    dynamic=False,
    sensitive=True,
    check=lambda v: (
        None
        if not v or v.split("://", 1)[0] in ("etcd", "postgresql", "postgres", "sqlite")
        else "not an etcd://, postgresql:// or sqlite:/// URL"
    ),
)
CLUSTER_METADATA_NAMESPACE = ConfigKey(
    "cluster.metadata.namespace",
    str,
    "floe",
    "This cluster's part of the metadata store: the etcd key prefix (namespace + '/') or "
    "the PostgreSQL schema; clusters sharing a store need different ones.",
    dynamic=False,
    check=lambda v: (
        None
        if v.isidentifier() and v.islower()
        else "not a lowercase identifier (letters, digits, _)"
    ),
)
CLUSTER_SESSION_TIMEOUT_MS = ConfigKey(
    "cluster.session.timeout.ms",
    int,
    6000,
    "A broker that has not renewed its lease in the metadata store for this long is "
    "dead to the cluster, and stops acknowledging writes itself a little before "
    "(etcd rounds it up to whole seconds).",
    min=2000,
    max=300_000,
    dynamic=False,
)
CLUSTER_SHARE_PARTITIONS = ConfigKey(
    "cluster.share.partitions",
    bool,
    True,
    "Brokers other than the writer lead partitions too: the writer spreads each new "
    "topic's partitions over the live brokers, balances them by bytes per second in and "
    "out (by count when the cluster is idle; a joining broker takes its share), and takes "
    "over a dead broker's; transactions span every broker. "
    "A group's and a transactional id's coordinator is the leader of its internal "
    "partition, a table topic's the leader of its partition 0 (its rounds and Spark run "
    "there); the other internal topics, dead-letter topics and table topics routed by "
    "record name or with a dead-letter topic stay with the writer. Every "
    "broker of a cluster must set it alike. Off: the other brokers are standbys, serving "
    "nothing until the writer dies.",
    dynamic=False,
)
CLUSTER_REASSIGNMENT_HOLD_MS = ConfigKey(
    "cluster.reassignment.hold.ms",
    int,
    3_600_000,
    "A partition moved by Kafka's reassignment API (Admin.alterPartitionReassignments, "
    "kafka-reassign-partitions.sh) stays where it was put for this long: the writer's "
    "balancing leaves it alone, then counts it again. Held by the writer: a new writer "
    "starts with none held.",
    min=0,
    max=30 * 24 * 3_600_000,
    dynamic=False,
)

STORAGE_TYPE = ConfigKey(
    "storage.type",
    str,
    "local",
    "Where partition data lives. 'local': segment files under data.dir (the embedded "
    "default). 's3': an S3-compatible bucket (storage.s3.*), with data.dir as a local "
    "cache; acks=all is answered once the records are in the bucket (docs/architecture.md).",
    choices=("local", "s3"),
    dynamic=False,
)
STORAGE_S3_BUCKET = ConfigKey(
    "storage.s3.bucket", str, "", "Bucket holding the log (storage.type = s3).", dynamic=False
)
STORAGE_S3_PREFIX = ConfigKey(
    "storage.s3.prefix",
    str,
    "floe",
    "Key prefix of everything this cluster writes in the bucket.",
    dynamic=False,
    check=lambda v: None if "//" not in v and not v.startswith("/") else "not a key prefix",
)
STORAGE_S3_ENDPOINT = ConfigKey(
    "storage.s3.endpoint",
    str,
    "",
    "S3 endpoint URL (http(s)://host:port) for S3-compatible stores; empty: AWS S3 of "
    "storage.s3.region.",
    dynamic=False,
)
STORAGE_S3_REGION = ConfigKey(
    "storage.s3.region", str, "us-east-1", "Region of the bucket.", dynamic=False
)
STORAGE_S3_ACCESS_KEY_ID = ConfigKey(
    "storage.s3.access.key.id",
    str,
    "",
    "Access key id; empty: the AWS_* environment variables (and instance credentials).",
    dynamic=False,
)
STORAGE_S3_SECRET_ACCESS_KEY = ConfigKey(
    "storage.s3.secret.access.key",
    str,
    "",
    "Secret access key (with storage.s3.access.key.id).",
    dynamic=False,
    sensitive=True,
)
STORAGE_S3_REQUEST_TIMEOUT_MS = ConfigKey(
    "storage.s3.request.timeout.ms",
    int,
    30_000,
    "Longest a request to the bucket may take, retries included (start-up fails, and an "
    "acks=all produce waiting for an upload gets NOT_ENOUGH_REPLICAS_AFTER_APPEND, after it: "
    "its records stay queued for the next upload, and clients retry them as possibly written).",
    min=1000,
    dynamic=False,
)
STORAGE_S3_WAL_MAX_BYTES = ConfigKey(
    "storage.s3.wal.max.bytes",
    int,
    8 * 1024 * 1024,
    "Largest WAL object: one upload carries the records appended to every partition "
    "since the last one, up to this size (more goes in the next upload).",
    min=64 * 1024,
    max=1024 * 1024 * 1024,
    dynamic=False,
)
STORAGE_S3_WAL_INTERVAL_MS = ConfigKey(
    "storage.s3.wal.interval.ms",
    int,
    250,
    "How often records acknowledged before upload (acks=0 and acks=1) are uploaded: "
    "the most such records a lost broker disk can take with it.",
    min=1,
    dynamic=False,
)
STORAGE_S3_WAL_MIN_INTERVAL_MS = ConfigKey(
    "storage.s3.wal.min.interval.ms",
    int,
    0,
    "Least time between the starts of two WAL uploads. 0: the next upload starts as soon "
    "as the last returns (lowest acks=all latency). Raising it trades latency for fewer "
    "PUT requests under steady load (at most 1000 / this many per second).",
    min=0,
    max=10_000,
    dynamic=False,
)
STORAGE_S3_UPLOAD_INTERVAL_MS = ConfigKey(
    "storage.s3.upload.interval.ms",
    int,
    10_000,
    "How often each partition's records are copied from the WAL objects into its own "
    "objects (then the WAL objects are deleted) and retention deletes objects; sooner once "
    "100 WAL objects wait for it, as a broker taking over reads each of them.",
    min=100,
    dynamic=False,
)
STORAGE_S3_OBJECT_TARGET_BYTES = ConfigKey(
    "storage.s3.object.target.bytes",
    int,
    64 * 1024 * 1024,
    "Size a partition's objects grow to: a partition's newest object smaller than this "
    "is replaced by a larger one at each upload (fewer objects to list and read).",
    min=64 * 1024,
    dynamic=False,
)

STORAGE_S3_SNAPSHOT_INTERVAL_BYTES = ConfigKey(
    "storage.s3.snapshot.interval.bytes",
    int,
    2 * 1024 * 1024,
    "With a bounded cache (storage.s3.cache.max.bytes), bytes of a partition's objects "
    "after its newest producer-state snapshot in the bucket that make the upload pass "
    "snapshot it again (put in the bucket at the next pass). A broker taking the "
    "partition over, or restoring it on a new disk, copies into its cache what follows "
    "the newest snapshot: about this much and the records of the last two upload passes, "
    "whatever the partition's history. Smaller: faster takeovers, one more small PUT and "
    "DELETE per this many bytes.",
    min=64 * 1024,
    dynamic=False,
)

STORAGE_S3_CACHE_MAX_BYTES = ConfigKey(
    "storage.s3.cache.max.bytes",
    int,
    -1,
    "Most bytes of partition data kept in data.dir, the local cache of the bucket. Past "
    "it, the oldest segments already in partition objects leave the cache (checked every "
    "log.retention.check.interval.ms); reads of them are served from the bucket. Kept "
    "whatever the budget: active segments, compacted topics, records of open "
    "transactions, and data a table topic has not materialized yet. -1: keep everything. "
    "Default: -1 on one node, 8 GiB in a cluster (cluster.metadata.url set), where a "
    "broker taking a partition over restores it from the bucket's newest producer-state "
    "snapshot on rather than copying its whole history.",
    min=-1,
    dynamic=False,
)
CLUSTER_CACHE_MAX_BYTES = 8 * 1024**3
"""``storage.s3.cache.max.bytes`` in a cluster when not set (see its doc)."""

STORAGE_S3_READ_CACHE_BYTES = ConfigKey(
    "storage.s3.read.cache.bytes",
    int,
    64 * 1024 * 1024,
    "Memory for blocks of partition objects read back from the bucket (4 MiB range GETs "
    "for data no longer in the local cache), most recently used kept: a consumer reading "
    "old data in order GETs each block once.",
    min=0,
    dynamic=False,
)

PRODUCER_ID_EXPIRATION_MS = ConfigKey(
    "producer.id.expiration.ms",
    int,
    _DAY_MS,
    "How long an idle producer's sequence state is kept per partition.",
    min=1,
)
REGISTRY_ENABLE = ConfigKey(
    "registry.enable",
    bool,
    True,
    "Run the built-in Schema Registry (Confluent REST API) inside floe up.",
    dynamic=False,
)
REGISTRY_HOST = ConfigKey(
    "registry.host",
    str,
    "",
    "Interface the Schema Registry binds to (empty: the broker host).",
    dynamic=False,
)
REGISTRY_PORT = ConfigKey(
    "registry.port",
    int,
    8081,
    "Schema Registry HTTP port (0 = any free port).",
    min=0,
    max=65535,
    dynamic=False,
)
REGISTRY_MAX_BODY_BYTES = ConfigKey(
    "registry.max.body.bytes",
    int,
    16 * 1024 * 1024,
    "Largest Schema Registry request body accepted (larger: HTTP 413).",
    min=1024,
    max=2**31 - 1,
    dynamic=False,
)

ADMIN_ENABLE = ConfigKey(
    "admin.enable",
    bool,
    True,
    "Run the admin HTTP API (JSON: table-topic status; floe table status uses it) inside floe up.",
    dynamic=False,
)
ADMIN_HOST = ConfigKey(
    "admin.host",
    str,
    "",
    "Interface the admin HTTP API and console bind to (empty: the broker host). Without "
    "admin.authentication anyone who reaches it may use it: keep it on loopback or turn "
    "authentication on (docs/security.md).",
    dynamic=False,
)
ADMIN_PORT = ConfigKey(
    "admin.port",
    int,
    8080,
    "Admin HTTP API port (0 = any free port, printed at start).",
    min=0,
    max=65535,
    dynamic=False,
)
ADMIN_HISTORY_INTERVAL_MS = ConfigKey(
    "admin.history.interval.ms",
    int,
    10_000,
    "How often the console's charts sample traffic, group lag and table topics (the last "
    "15 minutes are kept in memory).",
    min=500,
    max=60_000,
    dynamic=False,
)
ADMIN_MAX_BODY_BYTES = ConfigKey(
    "admin.max.body.bytes",
    int,
    1024 * 1024,
    "Largest admin HTTP API request body accepted (larger: HTTP 413).",
    min=1024,
    max=2**31 - 1,
    dynamic=False,
)

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_namespace(value: str) -> str | None:
    """An Iceberg namespace Spark SQL can name without quoting: ``a`` or ``a.b``
    (the empty string passes: callers decide whether it means "the default")."""
    if value == "" or all(_IDENT.fullmatch(level) for level in value.split(".")):
        return None
    return (
        f"{value!r} is not a namespace: use letters, digits and '_' "
        "(not starting with a digit), levels separated by '.'"
    )


TABLE_TOPIC_NAMESPACE = ConfigKey(
    "table.topic.namespace",
    str,
    "default",
    "Iceberg namespace of table topics that do not set table.topic.namespace.",
    check=lambda v: check_namespace(v) if v else "the broker's table namespace cannot be empty",
)

SPARK_MASTER = ConfigKey(
    "spark.master",
    str,
    "local[2]",
    "Spark master running the table-topic pipeline: local[N] in the broker process, or a "
    "cluster URL (spark://host:7077, yarn, k8s://...).",
    dynamic=False,
)
SPARK_DRIVER_MEMORY = ConfigKey(
    "spark.driver.memory",
    str,
    "1g",
    "Heap of the Spark driver JVM Floe starts (Java size: 512m, 1g, 4g).",
    dynamic=False,
    check=lambda v: None if re.fullmatch(r"[0-9]+[kKmMgGtT]?", v) else "use a size like 1g",
)
SPARK_JARS_PACKAGES = ConfigKey(
    "spark.jars.packages",
    str,
    "",
    "Maven coordinates Spark downloads at start (needs internet), e.g. "
    "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.0; empty: the Iceberg runtime "
    "jar bundled in the snowpark-connect-deps-iceberg package.",
    dynamic=False,
)

CATALOG_NAME = ConfigKey(
    "catalog.name",
    str,
    "floe",
    "Iceberg catalog name, the same in Spark SQL (floe.<namespace>.<table>) and pyiceberg.",
    dynamic=False,
    check=lambda v: None if _IDENT.fullmatch(v) else f"{v!r} is not an identifier",
)
CATALOG_TYPE = ConfigKey(
    "catalog.type",
    str,
    "jdbc",
    "Iceberg catalog implementation: jdbc (SQLite by default, or PostgreSQL), rest, hive "
    "or hadoop.",
    choices=("jdbc", "rest", "hive", "hadoop"),
    dynamic=False,
)
CATALOG_URI = ConfigKey(
    "catalog.uri",
    str,
    "",
    "Catalog URI: a JDBC URL (jdbc), http(s) URL (rest) or thrift URI (hive). Empty with "
    "jdbc: jdbc:sqlite:<data.dir>/catalog/iceberg.db?journal_mode=WAL&busy_timeout=10000.",
    dynamic=False,
    sensitive=True,  # a JDBC or http URL may carry a user and password
)
CATALOG_WAREHOUSE = ConfigKey(
    "catalog.warehouse",
    str,
    "",
    "Where table data and metadata files go (a path or s3:// URL; for rest, what the "
    "server expects). Empty with jdbc or hadoop: <data.dir>/warehouse.",
    dynamic=False,
)
CATALOG_S3_ENDPOINT = ConfigKey(
    "catalog.s3.endpoint",
    str,
    "",
    "S3 API endpoint of the object store holding s3:// table files, for both engines "
    "(http://127.0.0.1:8333 for SeaweedFS or MinIO); empty: AWS S3. Setting it, or an "
    "s3:// or s3a:// catalog.warehouse, makes Spark load Hadoop's S3A jars.",
    dynamic=False,
    check=lambda v: None if not v or "://" in v else "use a URL like http://host:port",
)
CATALOG_S3_REGION = ConfigKey(
    "catalog.s3.region",
    str,
    "",
    "Region of the object store (us-east-1); empty: the AWS SDKs' default "
    "(AWS_REGION, the profile).",
    dynamic=False,
)
CATALOG_S3_ACCESS_KEY_ID = ConfigKey(
    "catalog.s3.access.key.id",
    str,
    "",
    "Access key id for the object store; empty: the AWS SDKs' default credential chain "
    "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, the profile, an instance role).",
    dynamic=False,
    sensitive=True,
)
CATALOG_S3_SECRET_ACCESS_KEY = ConfigKey(
    "catalog.s3.secret.access.key",
    str,
    "",
    "Secret access key going with catalog.s3.access.key.id.",
    dynamic=False,
    sensitive=True,
)
CATALOG_S3_PATH_STYLE_ACCESS = ConfigKey(
    "catalog.s3.path.style.access",
    bool,
    False,
    "Address buckets as <endpoint>/<bucket> instead of <bucket>.<endpoint>: most "
    "S3-compatible servers (SeaweedFS, MinIO) need true.",
    dynamic=False,
)

BROKER_KEYS = KeySet(
    [
        DATA_DIR,
        HOST,
        KAFKA_PORT,
        ADVERTISED_HOST,
        ADVERTISED_PORT,
        *SECURITY_KEYS,
        NODE_ID,
        CLUSTER_ID,
        LOG_LEVEL,
        LOG_FORMAT,
        AUTO_CREATE_TOPICS,
        NUM_PARTITIONS,
        CREATE_TOPIC_MAX_PARTITIONS,
        CREATE_REQUEST_MAX_PARTITIONS,
        AUTO_CREATE_TOPICS_MAX,
        SOCKET_REQUEST_MAX_BYTES,
        SOCKET_REQUEST_READ_TIMEOUT_MS,
        SOCKET_RESPONSE_WRITE_TIMEOUT_MS,
        CONNECTIONS_MAX_QUEUED_BYTES,
        CONNECTIONS_MAX_IDLE_MS,
        MAX_CONNECTIONS,
        MAX_CONNECTIONS_PER_IP,
        FETCH_MAX_BYTES,
        MESSAGE_MAX_BYTES,
        MESSAGE_DECOMPRESSED_MAX_RATIO,
        LOG_SEGMENT_BYTES,
        LOG_SEGMENT_MS,
        LOG_RETENTION_MS,
        LOG_RETENTION_BYTES,
        LOG_CLEANUP_POLICY,
        LOG_RETENTION_CHECK_INTERVAL_MS,
        LOG_INDEX_INTERVAL_BYTES,
        LOG_MESSAGE_TIMESTAMP_TYPE,
        LOG_MESSAGE_TIMESTAMP_BEFORE_MAX_MS,
        LOG_MESSAGE_TIMESTAMP_AFTER_MAX_MS,
        LOG_CLEANER_DELETE_RETENTION_MS,
        LOG_CLEANER_MIN_COMPACTION_LAG_MS,
        LOG_FLUSH_POLICY,
        LOG_FLUSH_INTERVAL_MS,
        LOG_MAX_OPEN_FILES,
        CLUSTER_METADATA_URL,
        CLUSTER_METADATA_NAMESPACE,
        CLUSTER_SESSION_TIMEOUT_MS,
        CLUSTER_SHARE_PARTITIONS,
        CLUSTER_REASSIGNMENT_HOLD_MS,
        STORAGE_TYPE,
        STORAGE_S3_BUCKET,
        STORAGE_S3_PREFIX,
        STORAGE_S3_ENDPOINT,
        STORAGE_S3_REGION,
        STORAGE_S3_ACCESS_KEY_ID,
        STORAGE_S3_SECRET_ACCESS_KEY,
        STORAGE_S3_REQUEST_TIMEOUT_MS,
        STORAGE_S3_WAL_MAX_BYTES,
        STORAGE_S3_WAL_INTERVAL_MS,
        STORAGE_S3_WAL_MIN_INTERVAL_MS,
        STORAGE_S3_UPLOAD_INTERVAL_MS,
        STORAGE_S3_OBJECT_TARGET_BYTES,
        STORAGE_S3_SNAPSHOT_INTERVAL_BYTES,
        STORAGE_S3_CACHE_MAX_BYTES,
        STORAGE_S3_READ_CACHE_BYTES,
        *COORDINATOR_KEYS,
        PRODUCER_ID_EXPIRATION_MS,
        REGISTRY_ENABLE,
        REGISTRY_HOST,
        REGISTRY_PORT,
        REGISTRY_MAX_BODY_BYTES,
        ADMIN_ENABLE,
        ADMIN_HOST,
        ADMIN_PORT,
        ADMIN_MAX_BODY_BYTES,
        ADMIN_HISTORY_INTERVAL_MS,
        TABLE_TOPIC_NAMESPACE,
        SPARK_MASTER,
        SPARK_DRIVER_MEMORY,
        SPARK_JARS_PACKAGES,
        CATALOG_NAME,
        CATALOG_TYPE,
        CATALOG_URI,
        CATALOG_WAREHOUSE,
        CATALOG_S3_ENDPOINT,
        CATALOG_S3_REGION,
        CATALOG_S3_ACCESS_KEY_ID,
        CATALOG_S3_SECRET_ACCESS_KEY,
        CATALOG_S3_PATH_STYLE_ACCESS,
        *CLI_KEYS,
    ]
)
