"""ListOffsets (API key 2): earliest, latest, by timestamp, max timestamp.

With ``isolation_level=1`` (read_committed) the latest offset is the last stable offset.
A timestamp lookup whose answer lies in records only the object store holds (they left
the local cache) is answered once those objects are read, off the synchronous path.
``EARLIEST_LOCAL`` (KIP-405) is the first offset the local disk holds, ``LATEST_TIERED``
(KIP-1005) the last one the object store holds.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from floe.broker import authz
from floe.broker.build import build
from floe.broker.core import Broker, Reply, RequestContext
from floe.errors import ErrorCode, KafkaError
from floe.security.acl import AclOperation as Op
from floe.storage.interface import NotCachedError
from floe.types import PartitionId, TopicName

log = logging.getLogger("floe.broker.list_offsets")

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5


Pending = list[tuple[dict[str, Any], Callable[[], Awaitable[Any]]]]


def _entry(partition: int, code: ErrorCode = ErrorCode.none) -> dict[str, Any]:
    return {
        "partition_index": partition,
        "error_code": code,
        "timestamp": -1,
        "offset": -1,
        "leader_epoch": -1,
    }


def _refused(partition: int) -> dict[str, Any]:
    """A partition of a topic the principal may not describe."""
    return _entry(partition, ErrorCode.topic_authorization_failed)


def _lookup(
    broker: Broker, name: TopicName, part: Any, pending: Pending, *, committed: bool
) -> dict[str, Any]:
    """One partition's entry; a lookup that must read the object store is added to
    ``pending`` (the entry is filled when it completes)."""
    entry = _entry(part.partition_index)
    try:
        partition = PartitionId(part.partition_index)
        plog = broker.store.partition(name, partition)
        current = getattr(part, "current_leader_epoch", -1)  # v4+
        entry["leader_epoch"] = broker.check_leader_epoch(name, partition, current)
        ts = part.timestamp
        found: tuple[int, int] | None
        if ts == LATEST:
            entry["offset"] = plog.last_stable_offset if committed else plog.high_watermark
        elif ts == EARLIEST:
            entry["offset"] = plog.log_start_offset
        elif ts == EARLIEST_LOCAL:
            entry["offset"] = plog.local_log_start_offset
        elif ts == LATEST_TIERED:
            entry["offset"] = plog.latest_tiered_offset
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
    except NotCachedError as exc:
        pending.append((entry, exc.load))
    except KafkaError as exc:
        entry["error_code"] = exc.code
    except Exception:
        log.exception("list_offsets.failed topic=%s partition=%d", name, part.partition_index)
        entry["error_code"] = ErrorCode.unknown_server_error
    return entry


def handle(broker: Broker, ctx: RequestContext, req: Any) -> Reply:
    committed = getattr(req, "isolation_level", 0) == 1
    pending: Pending = []
    topics = [
        {
            "name": t.name,
            "partitions": [
                _lookup(broker, TopicName(t.name), p, pending, committed=committed)
                if authz.on_topic(broker, ctx, Op.DESCRIBE, t.name)
                else _refused(p.partition_index)
                for p in t.partitions
            ],
        }
        for t in req.topics
    ]
    if pending:
        return _after_loads(ctx, topics, pending)
    return build(ctx.response_class, {"throttle_time": timedelta(0), "topics": topics})


async def _after_loads(ctx: RequestContext, topics: list[dict[str, Any]], pending: Pending) -> Any:
    """Fill the entries whose lookups read the object store, one after another."""
    for entry, load in pending:
        try:
            found = await load()
            if found is not None:
                entry["offset"], entry["timestamp"] = found
        except KafkaError as exc:
            entry["error_code"] = exc.code
        except Exception:
            log.exception("list_offsets.failed partition=%d", entry["partition_index"])
            entry["error_code"] = ErrorCode.unknown_server_error
    return build(ctx.response_class, {"throttle_time": timedelta(0), "topics": topics})
