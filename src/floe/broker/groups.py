"""Group membership APIs: FindCoordinator (10), JoinGroup (11), Heartbeat (12),
LeaveGroup (13), SyncGroup (14), DescribeGroups (15), ListGroups (16), DeleteGroups (42).

Thin edges over :class:`floe.coordinator.group.GroupCoordinator`: they translate kio
requests into coordinator calls and results into responses. A group-level failure is
that group's error code; an unexpected exception becomes UNKNOWN_SERVER_ERROR for that
group only, logged with its stack.

A group's coordinator is the leader of its ``__consumer_offsets`` partition
(:mod:`floe.coordinator.group.coordinator`): every group on one node, the groups of
the partitions each broker leads in a cluster that shares partitions. A transactional
id's is the writer (its cluster's controller).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from floe.broker import authz
from floe.broker.build import build
from floe.broker.core import Broker, RequestContext
from floe.broker.metadata import leaders
from floe.cluster.interface import BrokerInfo
from floe.coordinator.group import GroupCoordinator, partition_for
from floe.coordinator.group.api import JoinRequest, JoinResult, SyncResult
from floe.coordinator.group.coordinator import TOPIC as OFFSETS_TOPIC
from floe.coordinator.txn.coordinator import TOPIC as TXN_TOPIC
from floe.errors import ErrorCode, KafkaError
from floe.security.acl import AclOperation as Op
from floe.security.acl import ResourceType
from floe.types import TopicName

log = logging.getLogger("floe.broker.groups")

ZERO = timedelta(0)
KEY_TYPES = (0, 1)
"""FindCoordinator key types answered by this node: 0 group, 1 transaction."""

T = TypeVar("T")


def coordinator(broker: Broker) -> GroupCoordinator:
    """The broker's group coordinator (each of its calls raises NOT_COORDINATOR for a
    group whose partition another broker leads).

    Raises:
        KafkaError: NOT_COORDINATOR on a standby (the writer coordinates every group)
            or a fenced broker, COORDINATOR_NOT_AVAILABLE when the broker runs without
            one.
    """
    groups = broker.groups
    if groups is None or broker.fenced:
        broker.check_coordinator()
        raise KafkaError("no group coordinator", ErrorCode.coordinator_not_available)
    return groups


def coordinator_of(
    broker: Broker, topic: TopicName, key: str, listener: str | None
) -> BrokerInfo | None:
    """The broker that coordinates ``key`` (a group id, a transactional id) as clients
    of ``listener`` reach it: the writer, or in a cluster that shares partitions the
    leader of the key's partition of ``topic`` (``__consumer_offsets``,
    ``__transaction_state``; None while it has no live leader)."""
    if not broker.shares_partitions:
        return broker.writer(listener)
    meta = broker.store.topic(topic)
    if meta is None:  # the writer creates it as it starts
        return None
    node = leaders(broker)(topic, partition_for(key, meta.partitions))
    return next((b for b in broker.live_brokers(listener) if b.broker_id == node), None)


def ms(value: timedelta) -> int:
    return int(value.total_seconds() * 1000)


async def guarded(
    what: str, work: Callable[[], Awaitable[T]], fallback: Callable[[ErrorCode], T]
) -> T:
    """Await ``work``; a KafkaError gives ``fallback(its code)``, an unexpected
    exception ``fallback(UNKNOWN_SERVER_ERROR)``, logged with its stack."""
    try:
        return await work()
    except KafkaError as exc:
        return fallback(exc.code)
    except Exception:
        log.exception("group.request_failed api=%s", what)
        return fallback(ErrorCode.unknown_server_error)


def handle_find_coordinator(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    key_type = getattr(req, "key_type", 0)
    keys = list(req.coordinator_keys) if hasattr(req, "coordinator_keys") else [req.key]
    entries = []
    topic = TXN_TOPIC if key_type == 1 else OFFSETS_TOPIC
    for key in keys:
        entry: dict[str, Any] = {"key": key, "node_id": -1, "host": "", "port": -1}
        if key_type not in KEY_TYPES:
            entry["error_code"] = ErrorCode.invalid_request
            entry["error_message"] = f"unsupported key type {key_type}"
        elif key_type == 0 and not authz.on_group(broker, ctx, Op.DESCRIBE, key):
            entry["error_code"] = ErrorCode.group_authorization_failed
            entry["error_message"] = None
        elif key_type == 1 and not authz.on_transactional_id(broker, ctx, Op.DESCRIBE, key):
            entry["error_code"] = ErrorCode.transactional_id_authorization_failed
            entry["error_message"] = None
        elif (found := coordinator_of(broker, topic, key, ctx.listener)) is None:
            entry["error_code"] = ErrorCode.coordinator_not_available
            entry["error_message"] = "the coordinator is moving between brokers"
        else:
            entry.update(node_id=found.broker_id, host=found.host, port=found.port)
            entry.update(error_code=ErrorCode.none, error_message=None)
        entries.append(entry)
    fields: dict[str, Any] = {"throttle_time": ZERO, "coordinators": entries}
    if not hasattr(req, "coordinator_keys"):
        fields.update({k: v for k, v in entries[0].items() if k != "key"})
    return build(ctx.response_class, fields)


def handle_join(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    session = ms(req.session_timeout)
    rebalance = ms(getattr(req, "rebalance_timeout", req.session_timeout))
    join = JoinRequest(
        group_id=req.group_id,
        member_id=req.member_id,
        instance_id=getattr(req, "group_instance_id", None),
        client_id=ctx.client_id or "",
        client_host="/" + ctx.peer.rsplit(":", 1)[0],
        session_timeout_ms=session,
        rebalance_timeout_ms=rebalance if rebalance > 0 else session,
        protocol_type=req.protocol_type,
        protocols=[(p.name, p.metadata) for p in req.protocols],
        require_known_member_id=ctx.api_version >= 4,
    )
    denied = not authz.on_group(broker, ctx, Op.READ, req.group_id)

    async def run() -> Any:
        if denied:
            result = JoinResult(ErrorCode.group_authorization_failed, member_id=req.member_id)
        else:
            result = await guarded(
                "JoinGroup",
                lambda: coordinator(broker).join(join),
                lambda code: JoinResult(code, member_id=req.member_id),
            )
        return build(
            ctx.response_class,
            {
                "throttle_time": ZERO,
                "error_code": result.error,
                "generation_id": result.generation,
                "protocol_type": result.protocol_type,
                "protocol_name": result.protocol_name or ("" if ctx.api_version < 7 else None),
                "leader": result.leader,
                "member_id": result.member_id,
                "members": [
                    {"member_id": mid, "group_instance_id": iid, "metadata": md}
                    for mid, iid, md in result.members
                ],
            },
        )

    return run()


def handle_sync(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    denied = not authz.on_group(broker, ctx, Op.READ, req.group_id)

    async def run() -> Any:
        if denied:
            return build(
                ctx.response_class,
                {"throttle_time": ZERO, "error_code": ErrorCode.group_authorization_failed,
                 "assignment": b""},
            )  # fmt: skip
        result = await guarded(
            "SyncGroup",
            lambda: coordinator(broker).sync(
                req.group_id,
                generation=req.generation_id,
                member_id=req.member_id,
                instance_id=getattr(req, "group_instance_id", None),
                protocol_type=getattr(req, "protocol_type", None),
                protocol_name=getattr(req, "protocol_name", None),
                assignments={a.member_id: a.assignment for a in req.assignments},
            ),
            SyncResult,
        )
        return build(
            ctx.response_class,
            {
                "throttle_time": ZERO,
                "error_code": result.error,
                "protocol_type": result.protocol_type,
                "protocol_name": result.protocol_name,
                "assignment": result.assignment,
            },
        )

    return run()


def handle_heartbeat(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    if not authz.on_group(broker, ctx, Op.READ, req.group_id):
        return build(
            ctx.response_class,
            {"throttle_time": ZERO, "error_code": ErrorCode.group_authorization_failed},
        )
    try:
        error = coordinator(broker).heartbeat(
            req.group_id,
            req.generation_id,
            req.member_id,
            getattr(req, "group_instance_id", None),
        )
    except KafkaError as exc:
        error = exc.code
    return build(ctx.response_class, {"throttle_time": ZERO, "error_code": error})


def handle_leave(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    batch = hasattr(req, "members")
    members: list[tuple[str, str | None]] = (
        [(m.member_id, m.group_instance_id) for m in req.members]
        if batch
        else [(req.member_id, None)]
    )
    try:
        if not authz.on_group(broker, ctx, Op.READ, req.group_id):
            raise KafkaError("not authorized", ErrorCode.group_authorization_failed)
        results = coordinator(broker).leave(req.group_id, members)
    except KafkaError as exc:
        return build(
            ctx.response_class, {"throttle_time": ZERO, "error_code": exc.code, "members": []}
        )
    top = ErrorCode.none if batch else results[0][2]
    return build(
        ctx.response_class,
        {
            "throttle_time": ZERO,
            "error_code": top,
            "members": [
                {"member_id": mid, "group_instance_id": iid, "error_code": err}
                for mid, iid, err in results
            ],
        },
    )


def handle_list(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    states = {s.lower() for s in getattr(req, "states_filter", ())}
    types = {t.lower() for t in getattr(req, "types_filter", ())}
    if broker.groups is None or broker.fenced:  # admin clients ask every broker: a standby
        # coordinates none (a member, those of its __consumer_offsets partitions)
        return build(
            ctx.response_class, {"throttle_time": ZERO, "error_code": ErrorCode.none, "groups": []}
        )
    try:
        groups = coordinator(broker).list_groups()
        if not authz.on_cluster(broker, ctx, Op.DESCRIBE):  # only the groups it may see
            groups = [g for g in groups if authz.on_group(broker, ctx, Op.DESCRIBE, g.group_id)]
    except KafkaError as exc:
        return build(
            ctx.response_class, {"throttle_time": ZERO, "error_code": exc.code, "groups": []}
        )
    return build(
        ctx.response_class,
        {
            "throttle_time": ZERO,
            "error_code": ErrorCode.none,
            "groups": [
                {
                    "group_id": g.group_id,
                    "protocol_type": g.protocol_type,
                    "group_state": g.state.value,
                    "group_type": "classic",
                }
                for g in groups
                if (not states or g.state.value.lower() in states)
                and (not types or "classic" in types)
            ],
        },
    )


def handle_describe(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    out = []
    for group_id in req.groups:
        entry: dict[str, Any] = {
            "group_id": group_id,
            "error_code": ErrorCode.none,
            "group_state": "Dead",
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
            "authorized_operations": authz.NO_AUTHORIZED_OPERATIONS,
        }
        try:
            if not authz.on_group(broker, ctx, Op.DESCRIBE, group_id):
                raise KafkaError("not authorized", ErrorCode.group_authorization_failed)
            d = coordinator(broker).describe(group_id)
            entry.update(
                group_state=d.state.value,
                protocol_type=d.protocol_type,
                protocol_data=d.protocol_name,
                members=[
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata,
                        "member_assignment": m.assignment,
                    }
                    for m in d.members
                ],
            )
            if getattr(req, "include_authorized_operations", False):
                entry["authorized_operations"] = authz.authorized_operations(
                    broker, ctx, ResourceType.GROUP, group_id
                )
        except KafkaError as exc:
            entry["error_code"] = exc.code
        except Exception:
            log.exception("group.describe_failed group=%s", group_id)
            entry["error_code"] = ErrorCode.unknown_server_error
        out.append(entry)
    return build(ctx.response_class, {"throttle_time": ZERO, "groups": out})


def handle_delete(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    async def one(group_id: str) -> dict[str, Any]:
        if not authz.on_group(broker, ctx, Op.DELETE, group_id):
            return {"group_id": group_id, "error_code": ErrorCode.group_authorization_failed}
        error = await guarded(
            "DeleteGroups",
            lambda: coordinator(broker).delete_group(group_id),
            lambda code: code,
        )
        return {"group_id": group_id, "error_code": error}

    async def run() -> Any:
        results = [await one(g) for g in req.groups_names]
        return build(ctx.response_class, {"throttle_time": ZERO, "results": results})

    return run()
