"""Log compaction for ``cleanup.policy=compact`` partitions.

The cleanable range is the prefix of non-active segments whose newest record is at
least ``min.compaction.lag.ms`` old, ending before the first segment that holds an
offset at or above the partition's retention hold (a table topic's data not yet in the
table). Over it the cleaner keeps only the latest record of each key; a tombstone
(null value) is kept until ``delete.retention.ms`` after its segment was last
modified. Rewritten batches keep their base offset and lastOffsetDelta, so offsets
stay monotonic and consumers step over the gaps.

Control batches and transactional batches are copied untouched and their keys do not
shadow other records (dropping aborted transactions' records is not done yet). The
last batch of each idempotent producer is kept even when all its records are
superseded: the producer state is rebuilt from batch headers on open, and without that
batch the producer's next sequence would look out of order after a restart (Kafka's
cleaner keeps it for the same reason).

Each segment is rewritten to ``<base>.log.cleaned``, fsynced, then renamed over the
original (:meth:`LocalPartitionLog.replace_segment`).
"""

from __future__ import annotations

import logging
import os

from floe.protocol.batch import read_header
from floe.protocol.records import decode_batch, decode_keys, encode_batch
from floe.storage.local.log import LocalPartitionLog
from floe.storage.local.segment import Segment

log = logging.getLogger(__name__)


def compact(plog: LocalPartitionLog, now_ms: int) -> None:
    """Compact the cleanable segments of ``plog``.

    Raises:
        CorruptRecordError: a batch in a segment does not decode.
        OSError: the cleaned file cannot be written.
    """
    horizon = now_ms - plog.config.min_compaction_lag_ms
    hold = plog.retention_hold
    cleanable: list[Segment] = []
    for seg in plog.segments[:-1]:
        if seg.max_timestamp > horizon or (hold is not None and seg.next_offset > hold):
            break
        cleanable.append(seg)
    if not cleanable:
        return
    latest: dict[bytes, int] = {}
    for seg in cleanable:
        for h in seg.iter_headers():
            if h.is_control or h.is_transactional:
                continue
            data = seg.read_batch(h)
            for offset, key, _ in decode_keys(data, read_header(data)):
                if key is not None:
                    latest[key] = offset
    last_batches = {e.producer_id: e.batches[-1].last_offset for e in plog.producers() if e.batches}
    for seg in cleanable:
        _clean(plog, seg, latest, last_batches, now_ms)


def _clean(
    plog: LocalPartitionLog,
    seg: Segment,
    latest: dict[bytes, int],
    last_batches: dict[int, int],
    now_ms: int,
) -> None:
    """Rewrite ``seg`` keeping the latest record per key (``latest``) and each
    producer's last batch (``last_batches``: producer id -> last offset)."""
    stat = os.stat(seg.path)
    drop_tombstones = now_ms - stat.st_mtime_ns // 1_000_000 > plog.config.delete_retention_ms
    out_path = seg.path.with_name(seg.path.name + ".cleaned")
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    changed = False
    try:
        for h in seg.iter_headers():
            data = seg.read_batch(h)
            if h.is_control or h.is_transactional:
                _write_all(fd, data)
                continue
            header = read_header(data)
            mask = [
                key is None or (latest.get(key) == offset and not (tomb and drop_tombstones))
                for offset, key, tomb in decode_keys(data, header)
            ]
            keep_whole = last_batches.get(h.producer_id, -1) == h.last_offset
            if all(mask) or (keep_whole and not any(mask)):  # copied without decoding
                _write_all(fd, data)
                continue
            changed = True
            if any(mask):
                records = decode_batch(data, header)
                keep = [r for r, kept in zip(records, mask, strict=True) if kept]
                _write_all(
                    fd,
                    encode_batch(
                        keep,
                        base_offset=header.base_offset,
                        compression=header.compression,
                        producer_id=header.producer_id,
                        producer_epoch=header.producer_epoch,
                        base_sequence=header.base_sequence,
                        timestamp_type=1 if header.log_append_time else 0,
                        last_offset_delta=header.last_offset_delta,
                        partition_leader_epoch=header.partition_leader_epoch,
                    ),
                )
        if changed:
            os.fsync(fd)
    finally:
        os.close(fd)
    if not changed:
        out_path.unlink()
        return
    os.utime(out_path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    before = seg.size
    plog.replace_segment(seg, out_path)
    log.info(
        "log.compaction.cleaned topic=%s partition=%d base_offset=%d bytes_before=%d "
        "bytes_after=%d",
        plog.topic, plog.partition, seg.base_offset, before, os.stat(seg.path).st_size,
    )  # fmt: skip


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
