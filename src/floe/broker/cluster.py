"""DescribeCluster (60) and DescribeLogDirs (35)."""

from __future__ import annotations

import shutil
from datetime import timedelta
from typing import Any

from floe.broker import authz
from floe.broker.build import build
from floe.broker.core import Broker, RequestContext
from floe.broker.metadata import controller_id
from floe.errors import ErrorCode, KafkaError
from floe.security.acl import AclOperation as Op
from floe.types import PartitionId, TopicName


def handle_describe_cluster(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    """Answered to any principal, as Kafka does; the cluster's authorized operations only
    to one with DESCRIBE on it (:func:`authz.cluster_operations`)."""
    wanted = bool(getattr(req, "include_cluster_authorized_operations", False))
    return build(
        ctx.response_class,
        {
            "throttle_time": timedelta(0),
            "error_code": ErrorCode.none,
            "error_message": None,
            "endpoint_type": getattr(req, "endpoint_type", 1),
            "cluster_id": broker.cluster_id,
            "controller_id": controller_id(broker),
            "brokers": [
                {
                    "broker_id": b.broker_id,
                    "host": b.host,
                    "port": b.port,
                    "rack": b.rack,
                    "is_fenced": False,
                }
                for b in broker.live_brokers(ctx.listener)
            ],
            "cluster_authorized_operations": authz.cluster_operations(broker, ctx, wanted),
        },
    )


def handle_describe_log_dirs(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    store = broker.store
    if not authz.on_cluster(broker, ctx, Op.DESCRIBE):
        return build(
            ctx.response_class,
            {"throttle_time": timedelta(0),
             "error_code": ErrorCode.cluster_authorization_failed, "results": []},
        )  # fmt: skip
    if broker.passive:  # no log dir: it holds no partition
        return build(
            ctx.response_class,
            {"throttle_time": timedelta(0), "error_code": ErrorCode.none, "results": []},
        )
    wanted: dict[str, tuple[int, ...] | None]
    if req.topics is None:
        wanted = dict.fromkeys(store.topics(), None)
    else:
        wanted = {t.topic: tuple(t.partitions) for t in req.topics}
    topics = []
    for name, parts in wanted.items():
        meta = store.topic(TopicName(name))
        if meta is None:
            continue
        indexes = range(meta.partitions) if parts is None else parts
        entries = []
        for p in indexes:
            try:
                size = store.partition(meta.name, PartitionId(p)).size_bytes
            except KafkaError:
                continue
            entries.append(
                {
                    "partition_index": p,
                    "partition_size": size,
                    "offset_lag": 0,
                    "is_future_key": False,
                }
            )
        topics.append({"name": name, "partitions": entries})
    usage = shutil.disk_usage(store.log_dir())
    return build(
        ctx.response_class,
        {
            "throttle_time": timedelta(0),
            "error_code": ErrorCode.none,
            "results": [
                {
                    "error_code": ErrorCode.none,
                    "log_dir": store.log_dir(),
                    "topics": topics,
                    "total_bytes": usage.total,
                    "usable_bytes": usage.free,
                    "is_cordoned": False,
                }
            ],
        },
    )
