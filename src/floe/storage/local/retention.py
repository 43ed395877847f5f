"""Time and size retention for ``cleanup.policy=delete`` partitions.

Only whole, non-active segments are removed, oldest first; the log start offset
moves to the first remaining segment. The active segment is never deleted, so the
high watermark and the offsets the next append needs always survive.
"""

from __future__ import annotations

from floe.storage.local.log import LocalPartitionLog


def apply_retention(log: LocalPartitionLog, now_ms: int) -> None:
    """Delete segments whose newest record is older than ``retention.ms``, then the
    oldest segments while the partition stays at or above ``retention.bytes``
    without them (Kafka's rule)."""
    config = log.config
    segments = log.segments
    retention_ms = config.retention_ms
    if retention_ms >= 0:
        while len(segments) > 1 and segments[0].max_timestamp < now_ms - retention_ms:
            log.drop_oldest_segment()
    retention_bytes = config.retention_bytes
    if retention_bytes >= 0:
        while len(segments) > 1 and log.size_bytes - segments[0].size >= retention_bytes:
            log.drop_oldest_segment()
