"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31): the ACLs, as Kafka's
``kafka-acls`` tool and AdminClients manage them, kept by
:class:`floe.security.acls.AclStore`.

Errors are Kafka's. Without an ACL store (``authorizer.enable`` off) every item gets
SECURITY_DISABLED, as a Kafka broker without an authorizer answers. A creation Kafka
would refuse (:func:`floe.security.acl.validate`: an ANY or UNKNOWN type, a CLUSTER not
named ``kafka-cluster``, an empty name, a principal not ``Type:name``...) gets
INVALID_REQUEST with the reason, per creation; a filter with an UNKNOWN element (a
number this broker does not know) gets INVALID_REQUEST, for the whole DescribeAcls or
for that DeleteAcls filter. A failed write is UNKNOWN_SERVER_ERROR for the items it
held, logged with its stack.

Versions: kio, which decodes the requests, has schemas for v1 to v3 only (Kafka marks
v0, which had no pattern type, deprecated), so v0 never reaches these handlers; v3 only
adds the USER resource type, which :class:`~floe.security.acl.ResourceType` has anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from floe.broker import authz
from floe.broker.build import build
from floe.broker.core import Broker, Reply, RequestContext
from floe.errors import ErrorCode
from floe.security.acl import (
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
    validate,
    validate_filter,
)
from floe.security.acls import AclStore

log = logging.getLogger("floe.broker.acls")

Outcome = tuple[ErrorCode, str | None]
_OK: Outcome = (ErrorCode.none, None)
_DENIED: Outcome = (ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
"""Describing the ACLs needs DESCRIBE on the cluster, changing them ALTER (as Kafka)."""


def handle_describe(broker: Broker, ctx: RequestContext, req: Any) -> Reply:
    store = broker.acls
    if store is not None and not authz.on_cluster(broker, ctx, AclOperation.DESCRIBE):
        return _describe_response(ctx, _DENIED, [])
    if store is None:
        return _describe_response(
            ctx, (ErrorCode.security_disabled, "No Authorizer is configured on the broker"), []
        )
    acl_filter = _filter(req)
    problem = validate_filter(acl_filter)
    if problem is not None:
        return _describe_response(ctx, (ErrorCode.invalid_request, problem), [])
    return _describe_response(ctx, _OK, _resources(store.matching(acl_filter)))


def handle_create(broker: Broker, ctx: RequestContext, req: Any) -> Reply:
    store = broker.acls
    if store is not None and not authz.on_cluster(broker, ctx, AclOperation.ALTER):
        return _create_response(ctx, [_DENIED] * len(req.creations))
    if store is None:
        disabled = (ErrorCode.security_disabled, "No Authorizer is configured.")
        return _create_response(ctx, [disabled] * len(req.creations))
    outcome: list[Outcome] = []
    valid: dict[int, AclBinding] = {}
    for i, c in enumerate(req.creations):
        binding = AclBinding(
            ResourceType.from_code(c.resource_type),
            c.resource_name,
            PatternType.from_code(c.resource_pattern_type),
            c.principal,
            c.host,
            AclOperation.from_code(c.operation),
            AclPermission.from_code(c.permission_type),
        )
        problem = validate(binding)
        if problem is None:
            valid[i] = binding
        outcome.append(_OK if problem is None else (ErrorCode.invalid_request, problem))
    if not valid:
        return _create_response(ctx, outcome)
    return _create(ctx, store, valid, outcome)


async def _create(
    ctx: RequestContext, store: AclStore, valid: dict[int, AclBinding], outcome: list[Outcome]
) -> Any:
    try:
        await store.create(valid.values())
    except Exception:
        log.exception("acls.create_failed peer=%s", ctx.peer)
        for i in valid:
            outcome[i] = (ErrorCode.unknown_server_error, "the ACLs were not stored")
    return _create_response(ctx, outcome)


def handle_delete(broker: Broker, ctx: RequestContext, req: Any) -> Reply:
    store = broker.acls
    if store is not None and not authz.on_cluster(broker, ctx, AclOperation.ALTER):
        return _delete_response(ctx, [(_DENIED, [])] * len(req.filters))
    if store is None:
        disabled = (ErrorCode.security_disabled, "No Authorizer is configured.")
        return _delete_response(ctx, [(disabled, [])] * len(req.filters))
    results: list[tuple[Outcome, Sequence[AclBinding]]] = []
    valid: dict[int, AclFilter] = {}
    for i, f in enumerate(req.filters):
        acl_filter = _filter(f)
        problem = validate_filter(acl_filter)
        if problem is None:
            valid[i] = acl_filter
        results.append((_OK if problem is None else (ErrorCode.invalid_request, problem), []))
    if not valid:
        return _delete_response(ctx, results)
    return _delete(ctx, store, valid, results)


async def _delete(
    ctx: RequestContext,
    store: AclStore,
    valid: dict[int, AclFilter],
    results: list[tuple[Outcome, Sequence[AclBinding]]],
) -> Any:
    try:
        deleted = await store.delete(list(valid.values()))
    except Exception:
        log.exception("acls.delete_failed peer=%s", ctx.peer)
        for i in valid:
            results[i] = ((ErrorCode.unknown_server_error, "the ACLs were not deleted"), [])
    else:
        for i, bindings in zip(valid, deleted, strict=True):
            results[i] = (_OK, bindings)
    return _delete_response(ctx, results)


def _filter(f: Any) -> AclFilter:
    """The filter of a DescribeAcls request or of one DeleteAcls filter (their fields
    have the same names); unknown numbers become UNKNOWN, as in Kafka."""
    return AclFilter(
        ResourceType.from_code(f.resource_type_filter),
        f.resource_name_filter,
        PatternType.from_code(f.pattern_type_filter),
        f.principal_filter,
        f.host_filter,
        AclOperation.from_code(f.operation),
        AclPermission.from_code(f.permission_type),
    )


def _resources(bindings: Sequence[AclBinding]) -> list[dict[str, Any]]:
    """DescribeAcls' resources: the bindings grouped by resource pattern, patterns
    and their ACLs sorted so that the answer is stable."""
    by_pattern: dict[tuple[int, str, int], list[AclBinding]] = {}
    for b in bindings:
        key = (int(b.resource_type), b.resource_name, int(b.pattern_type))
        by_pattern.setdefault(key, []).append(b)
    return [
        {
            "resource_type": rtype,
            "resource_name": name,
            "pattern_type": ptype,
            "acls": [
                {
                    "principal": b.principal,
                    "host": b.host,
                    "operation": int(b.operation),
                    "permission_type": int(b.permission),
                }
                for b in sorted(acls, key=_entry_order)
            ],
        }
        for (rtype, name, ptype), acls in sorted(by_pattern.items())
    ]


def _entry_order(b: AclBinding) -> tuple[str, str, int, int]:
    return b.principal, b.host, int(b.operation), int(b.permission)


def _describe_response(
    ctx: RequestContext, outcome: Outcome, resources: list[dict[str, Any]]
) -> Any:
    code, message = outcome
    return build(
        ctx.response_class,
        {
            "throttle_time": timedelta(0),
            "error_code": code,
            "error_message": message,
            "resources": resources,
        },
    )


def _create_response(ctx: RequestContext, outcome: list[Outcome]) -> Any:
    results = [{"error_code": code, "error_message": message} for code, message in outcome]
    return build(ctx.response_class, {"throttle_time": timedelta(0), "results": results})


def _delete_response(
    ctx: RequestContext, results: list[tuple[Outcome, Sequence[AclBinding]]]
) -> Any:
    filter_results = [
        {
            "error_code": code,
            "error_message": message,
            "matching_acls": [
                {
                    "error_code": ErrorCode.none,
                    "error_message": None,
                    "resource_type": int(b.resource_type),
                    "resource_name": b.resource_name,
                    "pattern_type": int(b.pattern_type),
                    "principal": b.principal,
                    "host": b.host,
                    "operation": int(b.operation),
                    "permission_type": int(b.permission),
                }
                for b in bindings
            ],
        }
        for (code, message), bindings in results
    ]
    return build(
        ctx.response_class, {"throttle_time": timedelta(0), "filter_results": filter_results}
    )
