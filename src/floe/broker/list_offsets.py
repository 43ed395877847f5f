"""ListOffsets (API key 2): earliest, latest, by timestamp, max timestamp.

With ``isolation_level=1`` (read_committed) the latest offset is the last stable offset.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from floe.broker.build import build
from floe.broker.core import Broker, RequestContext
from floe.errors import ErrorCode, KafkaError
from floe.types import PartitionId, TopicName

log = logging.getLogger("floe.broker.list_offsets")

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5


def _lookup(broker: Broker, name: TopicName, part: Any, *, committed: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "partition_index": part.partition_index,
        "error_code": ErrorCode.none,
        "timestamp": -1,
        "offset": -1,
        "leader_epoch": 0,
    }
    try:
        plog = broker.store.partition(name, PartitionId(part.partition_index))
        ts = part.timestamp
        found: tuple[int, int] | None
        if ts == LATEST:
            entry["offset"] = plog.last_stable_offset if committed else plog.high_watermark
        elif ts in (EARLIEST, EARLIEST_LOCAL):
            entry["offset"] = plog.log_start_offset
        elif ts == LATEST_TIERED:
            entry["offset"] = plog.log_start_offset - 1  # nothing is tiered yet
        elif ts == MAX_TIMESTAMP:
            found = plog.max_timestamp()
            if found is not None:
                entry["offset"], entry["timestamp"] = found
        elif ts >= 0:
            found = plog.offset_for_timestamp(ts)
            if found is not None:
                entry["offset"], entry["timestamp"] = found
        else:
            entry["error_code"] = ErrorCode.invalid_request
    except KafkaError as exc:
        entry["error_code"] = exc.code
    except Exception:
        log.exception("list_offsets.failed topic=%s partition=%d", name, part.partition_index)
        entry["error_code"] = ErrorCode.unknown_server_error
    return entry


def handle(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    committed = getattr(req, "isolation_level", 0) == 1
    topics = [
        {
            "name": t.name,
            "partitions": [
                _lookup(broker, TopicName(t.name), p, committed=committed) for p in t.partitions
            ],
        }
        for t in req.topics
    ]
    return build(ctx.response_class, {"throttle_time": timedelta(0), "topics": topics})
