"""DeleteRecords (21) and OffsetForLeaderEpoch (23).

DeleteRecords on an internal topic is INVALID_TOPIC_EXCEPTION, as Kafka answers.

OffsetForLeaderEpoch answers every epoch up to the partition's current leader epoch
(:meth:`Broker.leader_epoch`) with the log end offset. Kafka answers an older epoch with
the offset where the next began, which tells a consumer whether the log it read was
truncated by a new leader; Floe's log never diverges between epochs (a new owner serves
what the bucket holds, and consumers never read past it), so the log end is never below
a consumer's position and it sees no truncation. An epoch above the current one is
answered with -1, -1, as Kafka does.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from floe.broker import authz
from floe.broker.build import build
from floe.broker.core import Broker, RequestContext
from floe.errors import ErrorCode, KafkaError
from floe.security.acl import AclOperation as Op
from floe.storage.interface import InvalidTopicError
from floe.types import Offset, PartitionId, TopicName

log = logging.getLogger("floe.broker.partitions")


def handle_delete_records(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            entry: dict[str, Any] = {
                "partition_index": p.partition_index,
                "low_watermark": -1,
                "error_code": ErrorCode.none,
            }
            try:
                if not authz.on_topic(broker, ctx, Op.DELETE, t.name):
                    raise KafkaError("not authorized", ErrorCode.topic_authorization_failed)
                if broker.is_internal(t.name):  # as Kafka's ReplicaManager refuses it
                    raise InvalidTopicError(f"cannot delete records of internal topic {t.name}")
                plog = broker.store.partition(TopicName(t.name), PartitionId(p.partition_index))
                entry["low_watermark"] = plog.delete_records(Offset(p.offset))
                log.info(
                    "records.deleted topic=%s partition=%d log_start_offset=%d",
                    t.name,
                    p.partition_index,
                    entry["low_watermark"],
                )
            except KafkaError as exc:
                entry["error_code"] = exc.code
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return build(ctx.response_class, {"throttle_time": timedelta(0), "topics": topics})


def handle_offset_for_leader_epoch(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            entry: dict[str, Any] = {
                "error_code": ErrorCode.none,
                "partition": p.partition,
                "leader_epoch": -1,
                "end_offset": -1,
            }
            try:
                if not authz.on_topic(broker, ctx, Op.DESCRIBE, t.topic):
                    raise KafkaError("not authorized", ErrorCode.topic_authorization_failed)
                name, partition = TopicName(t.topic), PartitionId(p.partition)
                plog = broker.store.partition(name, partition)
                current = getattr(p, "current_leader_epoch", -1)  # v2+
                epoch = broker.check_leader_epoch(name, partition, current)
                if 0 <= p.leader_epoch <= epoch:
                    entry["leader_epoch"] = p.leader_epoch
                    entry["end_offset"] = plog.log_end_offset
            except KafkaError as exc:
                entry["error_code"] = exc.code
            parts.append(entry)
        topics.append({"topic": t.topic, "partitions": parts})
    return build(ctx.response_class, {"throttle_time": timedelta(0), "topics": topics})
