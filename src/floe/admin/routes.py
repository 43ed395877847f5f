"""The admin API's resource routes (topics, groups, schemas, table data, SQL, cluster),
registered by :func:`floe.admin.api.build_app` on its FastAPI app.

Handlers only translate HTTP to facade calls: validation of values happens in the
facade (its errors become 4xx bodies in :mod:`floe.admin.api`), request shapes are
checked by FastAPI (422). Every route is typed, so the OpenAPI document lists it.

Every route first asks the request's :class:`~floe.admin.access.Viewer` for the ACL
operation Kafka checks for the same thing (403 without it), and listings leave out
what the principal may not DESCRIBE: topics, groups, and a subject by its topic
(``<topic>-key``/``-value``, as the registry maps it). SQL needs its own grant.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

from fastapi import Depends, FastAPI, Query

from floe.admin import Admin, ClusterInfo, UnavailableError
from floe.admin.access import Viewer, viewer
from floe.admin.groups import GroupDetail, GroupSummary, ResetResult
from floe.admin.history import HistoryView
from floe.admin.lake import RowSet, SnapshotHistory
from floe.admin.schemas import (
    CompatibilityResult,
    SchemaDetail,
    SchemaDiff,
    SubjectDetail,
    SubjectSummary,
)
from floe.admin.topics import Message, TopicDetail, TopicSummary
from floe.config import tabletopic as tt
from floe.config.tabletopic import canonical_name
from floe.registry.api.authz import topic_of
from floe.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from floe.types import TopicName

Op, T, G = AclOperation, ResourceType.TOPIC, ResourceType.GROUP
WHO = Depends(viewer)

PREFIX = "/api/v1"


@dataclass(frozen=True)
class TopicList:
    topics: list[TopicSummary]


@dataclass
class NewTopic:
    """``configs``: topic config overrides, e.g. ``{"retention.ms": "60000"}``;
    ``replication_factor``: 1, or -1 for the default (one broker)."""

    name: str
    partitions: int = 1
    replication_factor: int = 1
    configs: dict[str, str] = field(default_factory=dict)


@dataclass
class ConfigChange:
    """Overrides to set and to delete (back to the default)."""

    set: dict[str, str] = field(default_factory=dict)
    delete: list[str] = field(default_factory=list)


@dataclass
class TableToggle:
    """Enable or disable the table topic. ``settings``: ``table.topic.*`` keys, with or
    without the prefix (``{"commit.interval.ms": "1000",
    "convert.value.type": "string"}``)."""

    enabled: bool
    settings: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Deleted:
    deleted: str


@dataclass(frozen=True)
class MessageList:
    topic: str
    messages: list[Message]


@dataclass
class OffsetResetRequest:
    """Where to move the group's committed offsets on ``topic`` (every partition, or
    ``partition``): ``earliest`` (the log start), ``latest`` (the high watermark),
    ``offset`` (``value``, clamped to the log) or ``timestamp`` (the first record at or
    after ``value`` epoch ms). ``dry_run``: answer the new offsets, change nothing."""

    topic: str
    to: str
    value: int | None = None
    partition: int | None = None
    dry_run: bool = False


@dataclass(frozen=True)
class GroupList:
    groups: list[GroupSummary]


@dataclass(frozen=True)
class SubjectList:
    subjects: list[SubjectSummary]


@dataclass
class CompatibilityCheck:
    """A schema to check against the subject's compatibility level."""

    schema: str
    schema_type: str = "AVRO"


@dataclass
class SqlQuery:
    """One read-only statement (a query, SHOW, DESCRIBE, EXPLAIN of a query), as Spark's
    parser and analyzer see it (:mod:`floe.tabletopic.spark.readonly`)."""

    statement: str
    limit: int = 100
    timeout_s: float = 30.0
    fresh: bool = False
    """Table topics include their records not committed yet (up to the log's last
    stable offset), each exactly once."""


@dataclass(frozen=True)
class TableLag:
    topic: str
    status: str
    lag_records: int | None


@dataclass(frozen=True)
class Overview:
    """Totals for the console's live numbers: rates are the deltas of ``produced``
    (sum of log end offsets) and ``consumed`` (sum of committed group offsets) between
    two answers, over ``time_ms``."""

    time_ms: int
    topics: int
    partitions: int
    produced: int
    consumed: int
    size_bytes: int
    groups: int
    tables: list[TableLag]


def visible_topics(admin: Admin, who: Viewer, *, internal: bool = False) -> list[TopicSummary]:
    """Every topic ``who`` may DESCRIBE (the internal ones too with ``internal``)."""
    return [t for t in admin.topics.all(internal=internal) if who.may(Op.DESCRIBE, T, t.topic)]


def overview_of(
    admin: Admin, topics: list[TopicSummary], tables: list[Any], who: Viewer
) -> Overview:
    """The totals over what ``who`` may describe (``topics``: :func:`visible_topics`)."""
    groups = [g for g in admin.groups.all() if who.may(Op.DESCRIBE, G, g.group)]
    tables = [t for t in tables if who.may(Op.DESCRIBE, T, t.topic)]
    consumed = 0
    for g in groups:
        detail = admin.groups.describe(g.group)
        consumed += sum(p.committed_offset or 0 for p in detail.partitions)
    lags = [
        TableLag(
            t.topic,
            t.status,
            None
            if any(p.lag_records is None for p in t.partitions)
            else sum(p.lag_records or 0 for p in t.partitions),
        )
        for t in tables
    ]
    return Overview(
        int(time.time() * 1000),
        len(topics),
        sum(t.partitions for t in topics),
        sum(t.log_end_offsets for t in topics),
        consumed,
        sum(t.size_bytes for t in topics),
        len(groups),
        lags,
    )


def register(app: FastAPI, admin: Admin, errors: dict[int | str, dict[str, Any]]) -> None:
    """Add the resource routes to ``app``; ``errors`` documents the error bodies."""

    @app.get(f"{PREFIX}/cluster", tags=["broker"])
    async def cluster(who: Viewer = WHO) -> ClusterInfo:
        """Cluster id, version, listeners, counts; the live brokers, and in a cluster
        this broker's lease and the ownership of every partition (DESCRIBE on the
        cluster)."""
        who.require(Op.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
        return admin.cluster()

    @app.get(f"{PREFIX}/overview", tags=["broker"])
    async def overview(who: Viewer = WHO) -> Overview:
        """Totals the console turns into live rates (messages in/out per second)."""
        await admin.groups.refreshed()
        return overview_of(admin, visible_topics(admin, who), await admin.tables.status(), who)

    @app.get(f"{PREFIX}/history", tags=["broker"])
    async def history(who: Viewer = WHO) -> HistoryView:
        """The last 15 minutes of traffic per topic, lag per group and lag, freshness and
        round time per table topic, sampled every ``admin.history.interval.ms`` (what
        the console charts); only what the principal may DESCRIBE."""
        if admin.history is None:
            raise UnavailableError("no history is kept")
        await admin.groups.refreshed()
        groups = admin.groups.names()
        store = admin.broker.store

        def visible(kind: str, name: str) -> bool:  # a series of what exists and may be seen
            if kind == "groups":
                return name in groups and who.may(Op.DESCRIBE, G, name)
            return store.topic(TopicName(name)) is not None and who.may(Op.DESCRIBE, T, name)

        return admin.history.view(visible)

    # -- topics ----------------------------------------------------------------------
    @app.get(f"{PREFIX}/topics", tags=["topics"])
    async def topics(internal: bool = False, who: Viewer = WHO) -> TopicList:
        """Every topic with its partitions, message count and size."""
        return TopicList(visible_topics(admin, who, internal=internal))

    @app.post(f"{PREFIX}/topics", tags=["topics"], status_code=201, responses=errors)
    async def create_topic(body: NewTopic, who: Viewer = WHO) -> TopicDetail:
        """Create a topic (CREATE on the cluster or the topic, and ALTER_CONFIGS on it
        for a table topic); 400 with the config error for a bad config, 409 if it
        exists."""
        if not who.may(Op.CREATE, ResourceType.CLUSTER, CLUSTER_NAME):
            who.require(Op.CREATE, T, body.name)
        if any(
            canonical_name(k) == tt.ENABLE.name and v.strip().lower() == "true"
            for k, v in body.configs.items()
        ):
            who.require(Op.ALTER_CONFIGS, T, body.name)
        return admin.topics.create(
            body.name, body.partitions, body.configs, body.replication_factor
        )

    @app.get(f"{PREFIX}/topics/{{topic}}", tags=["topics"], responses=errors)
    async def topic(topic: str, who: Viewer = WHO) -> TopicDetail:
        """Partitions (offsets, sizes) and every config with its source (the configs
        only with DESCRIBE_CONFIGS)."""
        who.require(Op.DESCRIBE, T, topic)
        detail = admin.topics.describe(topic)
        if who.may(Op.DESCRIBE_CONFIGS, T, topic):
            return detail
        return dataclasses.replace(detail, configs=[], overrides={})

    @app.patch(f"{PREFIX}/topics/{{topic}}/configs", tags=["topics"], responses=errors)
    async def alter_topic(topic: str, body: ConfigChange, who: Viewer = WHO) -> TopicDetail:
        """Set and delete config overrides (validated as AlterConfigs does)."""
        who.require(Op.ALTER_CONFIGS, T, topic)
        return admin.topics.alter(topic, body.set, body.delete)

    @app.delete(f"{PREFIX}/topics/{{topic}}", tags=["topics"], responses=errors)
    async def delete_topic(topic: str, who: Viewer = WHO) -> Deleted:
        """Delete a topic (a table topic's table is kept)."""
        who.require(Op.DELETE, T, topic)
        admin.topics.delete(topic)
        return Deleted(topic)

    @app.get(f"{PREFIX}/topics/{{topic}}/messages", tags=["topics"], responses=errors)
    async def messages(
        topic: str,
        partition: int | None = None,
        limit: int = Query(20, ge=1, le=200),
        who: Viewer = WHO,
    ) -> MessageList:
        """The newest records, newest first: decoded through the registry when they
        carry the Confluent wire format, else UTF-8 text, else hex."""
        who.require(Op.READ, T, topic)
        return MessageList(topic, admin.topics.messages(topic, partition, limit, admin.decode))

    @app.put(f"{PREFIX}/topics/{{topic}}/table", tags=["table topics"], responses=errors)
    async def toggle_table(topic: str, body: TableToggle, who: Viewer = WHO) -> TopicDetail:
        """Enable or disable the table topic and set its ``table.topic.*`` settings."""
        who.require(Op.ALTER_CONFIGS, T, topic)
        return admin.topics.set_table(topic, body.enabled, body.settings)

    # -- groups ----------------------------------------------------------------------
    @app.get(f"{PREFIX}/groups", tags=["groups"])
    async def groups(who: Viewer = WHO) -> GroupList:
        """Every consumer group with its state, member count and total lag."""
        await admin.groups.refreshed()
        return GroupList([g for g in admin.groups.all() if who.may(Op.DESCRIBE, G, g.group)])

    @app.get(f"{PREFIX}/groups/{{group}}", tags=["groups"], responses=errors)
    async def group(group: str, who: Viewer = WHO) -> GroupDetail:
        """Members, assignments, committed offsets and lag per partition."""
        who.require(Op.DESCRIBE, G, group)
        await admin.groups.refreshed()
        return admin.groups.describe(group)

    @app.post(f"{PREFIX}/groups/{{group}}/offsets/reset", tags=["groups"], responses=errors)
    async def reset_offsets(group: str, body: OffsetResetRequest, who: Viewer = WHO) -> ResetResult:
        """Reset an empty group's committed offsets (READ on the group and the topic, as
        AlterConsumerGroupOffsets): 409 while it has members, 404 for an unknown topic
        or partition."""
        who.require(Op.READ, G, group)
        who.require(Op.READ, T, body.topic)
        return await admin.groups.reset_offsets(
            group,
            body.topic,
            body.to,
            value=body.value,
            partition=body.partition,
            dry_run=body.dry_run,
        )

    # -- schemas ---------------------------------------------------------------------
    @app.get(f"{PREFIX}/schemas/subjects", tags=["schemas"])
    async def subjects(who: Viewer = WHO) -> SubjectList:
        """Every subject with its latest version, id, type and compatibility level."""
        listed = admin.schemas.subjects()
        return SubjectList([s for s in listed if who.may(Op.DESCRIBE, T, topic_of(s.subject))])

    @app.get(f"{PREFIX}/schemas/subjects/{{subject}}", tags=["schemas"], responses=errors)
    async def subject(subject: str, who: Viewer = WHO) -> SubjectDetail:
        """Every version of a subject, with schema text."""
        who.require(Op.READ, T, topic_of(subject))
        return admin.schemas.subject(subject)

    @app.get(
        f"{PREFIX}/schemas/subjects/{{subject}}/versions/{{version}}",
        tags=["schemas"],
        responses=errors,
    )
    async def schema_version(subject: str, version: str, who: Viewer = WHO) -> SchemaDetail:
        """One version (``latest`` for the newest)."""
        who.require(Op.READ, T, topic_of(subject))
        return admin.schemas.version(subject, version)

    @app.get(f"{PREFIX}/schemas/subjects/{{subject}}/diff", tags=["schemas"], responses=errors)
    async def schema_diff(
        subject: str,
        from_: str = Query(alias="from"),
        to: str = Query("latest"),
        who: Viewer = WHO,
    ) -> SchemaDiff:
        """A unified diff between two versions of a subject."""
        who.require(Op.READ, T, topic_of(subject))
        return admin.schemas.diff(subject, from_, to)

    @app.post(
        f"{PREFIX}/schemas/subjects/{{subject}}/compatibility",
        tags=["schemas"],
        responses=errors,
    )
    async def schema_check(
        subject: str, body: CompatibilityCheck, who: Viewer = WHO
    ) -> CompatibilityResult:
        """Whether a schema is compatible with the subject under its level."""
        who.require(Op.READ, T, topic_of(subject))
        return admin.schemas.check(subject, body.schema, body.schema_type)

    # -- table data and SQL ----------------------------------------------------------
    @app.get(f"{PREFIX}/tables/{{topic}}/snapshots", tags=["table topics"], responses=errors)
    async def snapshots(
        topic: str, limit: int = Query(100, ge=1, le=1000), who: Viewer = WHO
    ) -> SnapshotHistory:
        """The table's snapshot history, newest first (pyiceberg)."""
        who.require(Op.DESCRIBE, T, topic)
        return await admin.lake.snapshots(topic, limit)

    @app.get(f"{PREFIX}/tables/{{topic}}/sample", tags=["table topics"], responses=errors)
    async def sample(
        topic: str, limit: int = Query(20, ge=1, le=1000), who: Viewer = WHO
    ) -> RowSet:
        """Up to ``limit`` rows of the table (a pyiceberg scan)."""
        who.require(Op.READ, T, topic)
        return await admin.lake.sample(topic, limit)

    @app.post(f"{PREFIX}/sql", tags=["sql"], responses=errors)
    async def sql(body: SqlQuery, who: Viewer = WHO) -> RowSet:
        """Run one read-only Spark SQL statement (a query, SHOW, DESCRIBE, EXPLAIN of a
        query, decided by Spark's parser and analyzer; else 400) with a row limit
        (1..10000) and a timeout (504 when exceeded); ``fresh`` adds each table topic's
        records not committed yet. Needs the SQL grant (``admin.sql.principals``)."""
        who.require_sql()
        return await admin.lake.sql(body.statement, body.limit, body.timeout_s, body.fresh)
