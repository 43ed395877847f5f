"""The part of a partition below its cache: retention there, and the cache budget.

With a cache budget (``storage.s3.cache.max.bytes``, bounded by default in a cluster)
the oldest segments already in partition objects leave the cache (:func:`evict`) until
it fits; the records below a partition's cache start are then read from its objects (its
``tiered_start``: :func:`tiered_start` at open). Retention deletes them there by time
and size (:func:`remote_retention`) before the cache's own retention runs: it only moves
the log start, and the next upload pass deletes the objects below it and records it in
the bucket. A segment leaves the cache only once every record of it is in partition
objects, below the last stable offset, in its table when it is a table topic, and never
for a compacted topic (compaction rewrites the cache). Runs on the broker's event loop,
on the partitions it leads.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Collection, Iterable, Mapping

from floe.storage.interface import StorageError
from floe.storage.object.layout import PartObject
from floe.storage.object.partition import ObjectPartitionLog
from floe.storage.object.state import Key

log = logging.getLogger(__name__)


def tiered_start(objs: list[PartObject], bucket_start: int, cached: int) -> int | None:
    """The log start when the objects hold records below the cache start ``cached``
    without a gap up to it (segments that left the cache before a restart), else None."""
    start = max(bucket_start, objs[0].base) if objs else cached
    if start >= cached:
        return None
    reached = start
    for obj in objs:
        if obj.end <= start:
            continue
        if obj.base > reached:
            return None
        reached = obj.end
        if reached >= cached:
            return start
    return None


def remote_retention(logs: Iterable[ObjectPartitionLog], now_ms: int) -> None:
    """Retention below the cache start, with the local rule (Kafka's): oldest object
    first, while its newest record is older than ``retention.ms`` or the partition
    stays at or above ``retention.bytes`` without it, up to the retention hold. The
    log start moves; the next upload pass deletes the objects and records it."""
    for plog in logs:
        config = plog.config
        if plog.tiered_start is None or plog.closed or not config.delete:
            continue
        size = plog.size_bytes
        hold = plog.retention_hold
        cached = plog.local.log_start_offset
        start = None
        for obj in plog.remote_objects():
            # an object that also holds cached records stays (the start moves to the
            # cache start); the upload pass deletes it once the start passes its end
            stop = min(obj.end, cached)
            if hold is not None and stop > hold:
                break
            part = plog.remote_bytes(obj)
            old = config.retention_ms >= 0 and obj.max_timestamp < now_ms - config.retention_ms
            big = config.retention_bytes >= 0 and size - part >= config.retention_bytes
            if not (old or big):
                break
            size -= part
            start = stop
        if start is not None:
            plog.trim_remote(start)
            log.info(
                "storage.object.retention partition=%s-%d log_start_offset=%d",
                plog.topic, plog.partition, plog.log_start_offset,
            )  # fmt: skip


def evict(
    logs: Collection[ObjectPartitionLog], parts: Mapping[Key, list[PartObject]], budget: int
) -> None:
    """Drop the oldest evictable segments (by their newest record) from the cache
    until it holds at most ``budget`` (``storage.s3.cache.max.bytes``; below 0: no
    budget)."""
    if budget < 0:
        return
    cached = sum(plog.local.size_bytes for plog in logs)
    if cached <= budget:
        return
    heap: list[tuple[int, int, ObjectPartitionLog]] = []
    for i, plog in enumerate(logs):
        if (age := _evictable(plog, parts)) is not None:
            heap.append((age, i, plog))
    heapq.heapify(heap)
    evicted = freed = 0
    while cached > budget and heap:
        _, i, plog = heapq.heappop(heap)
        local = plog.local
        size = local.segments[0].size
        if plog.tiered_start is None:
            plog.tiered_start = int(local.log_start_offset)
        try:
            local.drop_oldest_segment(evicted=True)
        except StorageError:
            log.exception("storage.object.evict_failed partition=%s-%d", plog.topic, plog.partition)
            continue
        cached -= size
        evicted += 1
        freed += size
        if (age := _evictable(plog, parts)) is not None:
            heapq.heappush(heap, (age, i, plog))
    if evicted:
        log.info(
            "storage.object.evicted segments=%d bytes=%d cache_bytes=%d budget=%d",
            evicted, freed, cached, budget,
        )  # fmt: skip
    if cached > budget:
        log.warning(
            "storage.object.cache_over_budget cache_bytes=%d budget=%d (the rest is "
            "not in partition objects yet, compacted, in open transactions, not yet "
            "in a table, or active segments)",
            cached, budget,
        )  # fmt: skip


def _evictable(plog: ObjectPartitionLog, parts: Mapping[Key, list[PartObject]]) -> int | None:
    """The newest timestamp of ``plog``'s first cached segment when it may leave the
    cache, else None: not the active segment, every record of it in partition
    objects, below the last stable offset (no open transaction in it), already in its
    table (a table topic's retention hold), and not a compacted topic (compaction
    rewrites the cache). Aborted transactions stay in the cache's producer state."""
    local = plog.local
    segments = local.segments
    if plog.closed or local.offline or local.config.compact or len(segments) < 2:
        return None
    seg = segments[0]
    end = seg.next_offset
    objs = parts.get((plog.topic_id, int(plog.partition)), [])
    if not objs or objs[0].base > local.log_start_offset or objs[-1].end < end:
        return None
    hold = local.retention_hold
    if local.last_stable_offset < end or (hold is not None and hold < end):
        return None
    return int(seg.max_timestamp)
