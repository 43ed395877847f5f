"""The ACL checks Kafka's brokers make for each API (``authorizer.enable``).

Handlers ask :func:`allowed` (or :func:`on_cluster`) before they act: an item the
principal may not touch gets Kafka's error code for it (TOPIC_AUTHORIZATION_FAILED,
GROUP_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
CLUSTER_AUTHORIZATION_FAILED) and no side effect; topics a principal may not describe
are left out of Metadata as if they did not exist. Without an authorizer everything is
allowed, as in Kafka.

Denials are counted in the responses' error codes (``kafka_network_requestmetrics_errors``)
and logged at DEBUG (``authz.denied``): a client retrying a refused request must not
flood the log.
"""

from __future__ import annotations

import logging

from floe.broker.core import SECURITY_TOPIC, Broker, RequestContext
from floe.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from floe.security.session import ANONYMOUS

log = logging.getLogger("floe.broker.authz")


NO_AUTHORIZED_OPERATIONS = -(2**31)
"""The authorized-operations fields' value when the request did not ask for them."""


def _permits(
    broker: Broker,
    ctx: RequestContext,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
) -> bool:
    if resource_type is ResourceType.TOPIC and name == SECURITY_TOPIC:
        return False
    authorizer = broker.authorizer
    if authorizer is None:
        return True
    principal, host = _who(ctx)
    return authorizer.authorize(principal, host, operation, resource_type, name)


def allowed(
    broker: Broker,
    ctx: RequestContext,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
) -> bool:
    """Whether the request's principal may do ``operation`` on the resource (never, on
    :data:`SECURITY_TOPIC`: Kafka keeps users and ACLs in its metadata log, which no
    client API serves)."""
    if _permits(broker, ctx, operation, resource_type, name):
        return True
    principal, host = _who(ctx)
    log.debug(
        "authz.denied principal=%s host=%s operation=%s resource=%s:%s",
        principal, host, operation.name, resource_type.name, name,
    )  # fmt: skip
    return False


def _who(ctx: RequestContext) -> tuple[str, str]:
    """The request's principal and the client's IP address (as ACL hosts name it)."""
    principal = ANONYMOUS if ctx.session is None else ctx.session.principal
    return principal, ctx.peer.rsplit(":", 1)[0].strip("[]")


def authorized_operations(
    broker: Broker, ctx: RequestContext, resource_type: ResourceType, name: str
) -> int:
    """Kafka's authorized-operations bit field for the resource: bit ``op`` set for each
    operation the resource type has (:data:`SUPPORTED_OPERATIONS`) that the principal
    may do, implied ones included; all of them without an authorizer, as in Kafka.
    Denials are not logged: nothing was refused."""
    bits = 0
    for op in SUPPORTED_OPERATIONS[resource_type]:
        if _permits(broker, ctx, op, resource_type, name):
            bits |= 1 << op
    return bits


def cluster_operations(broker: Broker, ctx: RequestContext, wanted: bool) -> int:
    """The cluster's authorized-operations field as Kafka fills it in Metadata and
    DescribeCluster: not asked for, :data:`NO_AUTHORIZED_OPERATIONS`; asked by a principal
    without DESCRIBE on the cluster, 0 (nothing said); otherwise the bit field."""
    if not wanted:
        return NO_AUTHORIZED_OPERATIONS
    if not _permits(broker, ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return 0
    return authorized_operations(broker, ctx, ResourceType.CLUSTER, CLUSTER_NAME)


def on_cluster(broker: Broker, ctx: RequestContext, operation: AclOperation) -> bool:
    """Whether the request's principal may do ``operation`` on the cluster."""
    return allowed(broker, ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def on_topic(broker: Broker, ctx: RequestContext, operation: AclOperation, topic: str) -> bool:
    return allowed(broker, ctx, operation, ResourceType.TOPIC, topic)


def on_group(broker: Broker, ctx: RequestContext, operation: AclOperation, group: str) -> bool:
    return allowed(broker, ctx, operation, ResourceType.GROUP, group)


def on_transactional_id(
    broker: Broker, ctx: RequestContext, operation: AclOperation, transactional_id: str
) -> bool:
    return allowed(broker, ctx, operation, ResourceType.TRANSACTIONAL_ID, transactional_id)


def may_write_idempotently(broker: Broker, ctx: RequestContext) -> bool:
    """Kafka's check of an idempotent producer's InitProducerId: IDEMPOTENT_WRITE on the
    cluster, or WRITE on some topic (an ALLOW of WRITE or ALL on any topic pattern for
    the principal or ``User:*``, which a DENY of WRITE on every topic, the literal
    ``*`` or the empty prefix, takes back)."""
    if on_cluster(broker, ctx, AclOperation.IDEMPOTENT_WRITE):
        return True
    if broker.acls is None:
        return False
    principal, host = _who(ctx)
    writes = (AclOperation.WRITE, AclOperation.ALL)
    mine = [
        b
        for b in broker.acls.bindings()
        if b.resource_type is ResourceType.TOPIC
        and b.principal in (principal, "User:*")
        and b.host in (host, "*")
        and b.operation in writes
    ]
    everything = [
        b
        for b in mine
        if (b.pattern_type is PatternType.LITERAL and b.resource_name == "*")
        or (b.pattern_type is PatternType.PREFIXED and b.resource_name == "")
    ]
    if any(b.permission is AclPermission.DENY for b in everything):
        return False
    return any(b.permission is AclPermission.ALLOW for b in mine)
