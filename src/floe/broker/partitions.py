"""DeleteRecords (21) and OffsetForLeaderEpoch (23).

DeleteRecords on an internal topic is INVALID_TOPIC_EXCEPTION, as Kafka answers.

A single-node Floe keeps one leader epoch, 0, for every partition: every requested
epoch at or above it ends at the log end offset.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from floe.broker.build import build
from floe.broker.core import Broker, RequestContext
from floe.errors import ErrorCode, KafkaError
from floe.storage.interface import InvalidTopicError
from floe.types import Offset, PartitionId, TopicName

log = logging.getLogger("floe.broker.partitions")

LEADER_EPOCH = 0


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
                plog = broker.store.partition(TopicName(t.topic), PartitionId(p.partition))
                current = getattr(p, "current_leader_epoch", -1)
                if current > LEADER_EPOCH:
                    entry["error_code"] = ErrorCode.unknown_leader_epoch
                elif p.leader_epoch <= LEADER_EPOCH:
                    entry["leader_epoch"] = LEADER_EPOCH
                    entry["end_offset"] = plog.log_end_offset
            except KafkaError as exc:
                entry["error_code"] = exc.code
            parts.append(entry)
        topics.append({"topic": t.topic, "partitions": parts})
    return build(ctx.response_class, {"throttle_time": timedelta(0), "topics": topics})
