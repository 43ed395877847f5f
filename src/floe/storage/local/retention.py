"""Time and size retention for ``cleanup.policy=delete`` partitions.

Only whole, non-active segments are removed, oldest first; the log start offset
moves to the first remaining segment. The active segment is never deleted, so the
high watermark and the offsets the next append needs always survive.

A retention hold (:meth:`LocalPartitionLog.set_retention_hold`, set while a table
topic has not materialized the data) stops deletion before the first segment holding
an offset at or above it; the bytes kept that way are reported as ``held_bytes``.
"""

from __future__ import annotations

from floe.storage.local.log import LocalPartitionLog


def _expired(log: LocalPartitionLog, now_ms: int) -> int:
    """How many of the oldest segments retention deletes without a hold: those whose
    newest record is older than ``retention.ms``, then the oldest while the partition
    stays at or above ``retention.bytes`` without them (Kafka's rule)."""
    config = log.config
    if not config.delete:
        return 0
    segments = log.segments
    n = 0
    if config.retention_ms >= 0:
        while n < len(segments) - 1 and segments[n].max_timestamp < now_ms - config.retention_ms:
            n += 1
    if config.retention_bytes >= 0:
        size = log.size_bytes - sum(s.size for s in segments[:n])
        while n < len(segments) - 1 and size - segments[n].size >= config.retention_bytes:
            size -= segments[n].size
            n += 1
    return n


def apply_retention(log: LocalPartitionLog, now_ms: int) -> None:
    """Delete expired segments up to the retention hold, and record the size of the
    expired ones the hold keeps (0 for a policy without ``delete``)."""
    expired = log.segments[: _expired(log, now_ms)]
    hold = log.retention_hold
    held = [s for s in expired if hold is not None and s.next_offset > hold]  # a suffix
    for _ in range(len(expired) - len(held)):
        log.drop_oldest_segment()
    log.record_held_bytes(sum(s.size for s in held))
