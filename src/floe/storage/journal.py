"""Journals: state kept as key/value records on an internal compacted topic.

The group coordinator (``__consumer_offsets``), the transaction coordinator
(``__transaction_state``) and the schema registry (``_schemas``) keep their state the
same way: every change is a record appended here, and the in-memory state is what
replaying those records gives, at start-up and after each append alike (the same code
path). Compaction keeps the latest record per key, so a key must identify the piece of
state its value replaces; a ``None`` value (tombstone) deletes it.

A journal never stops its owner from starting. As Apache Kafka's coordinators do when
loading, whatever cannot be used is logged with its offset and a reason, counted in
:attr:`Journal.skipped`, and skipped: :meth:`Journal.replay` skips batches that do not
decode (bad framing, CRC mismatch, unknown codec, malformed records), and the owner
calls :meth:`Journal.skip` for a record it cannot decode or apply. The first
:data:`SKIP_LOG_LIMIT` skips of a journal get one line each; after that only every
tenfold count is logged, so a journal full of garbage cannot flood the log.

Internal topics are created with :data:`JOURNAL_CONFIGS` (compacted, small segments so
that compaction has sealed segments to clean and a restart replays little), and an
existing journal topic is brought to those configs when it is opened.

Ownership: a :class:`Journal` belongs to the component whose state it stores and is
used from the broker's event loop only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence

import crc32c

from floe.errors import CorruptRecordError
from floe.protocol import batch
from floe.protocol.records import Record, decode_batch, encode_batch
from floe.storage.interface import PartitionLog, Store
from floe.types import Offset, PartitionId, TopicName

log = logging.getLogger("floe.storage.journal")

READ_CHUNK = 4 * 1024 * 1024
JOURNAL_SEGMENT_BYTES = 4 * 1024 * 1024
"""Small enough that the active segment (which compaction never touches) stays a small
part of a restart's replay, large enough that a busy journal rolls a few segments a
day rather than hundreds (compaction here does not merge small segments)."""
JOURNAL_CONFIGS: Mapping[str, str] = {
    "cleanup.policy": "compact",
    "segment.bytes": str(JOURNAL_SEGMENT_BYTES),
    "min.compaction.lag.ms": "0",
}
"""The topic configs of every journal (Floe has no ``min.cleanable.dirty.ratio``: each
maintenance run cleans every sealed segment)."""
SKIP_LOG_LIMIT = 100
"""Skips of one journal logged one line each; beyond, only every tenfold count."""
_REASON_CHARS = 200


def reason_of(exc: BaseException) -> str:
    """A one-line, bounded description of why a record was skipped."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:_REASON_CHARS]


class Journal:
    """Append-and-replay access to one partition of an internal compacted topic
    (``partition``; a topic it creates gets ``partitions``: a coordinator shards its
    state over them, one journal each).

    Attributes:
        skipped: batches and records skipped so far (at replay or when the owner could
            not apply a record it had just written), for the owner's metrics.
    """

    def __init__(
        self,
        store: Store,
        topic: TopicName,
        *,
        configs: Mapping[str, str] | None = None,
        partition: int = 0,
        partitions: int = 1,
    ) -> None:
        self._store = store
        self.topic = topic
        self.partition = PartitionId(partition)
        self.skipped = 0
        self._next_log = SKIP_LOG_LIMIT * 10
        wanted = dict(JOURNAL_CONFIGS if configs is None else configs)
        meta = store.topic(topic)
        if meta is None:
            store.create_topic(topic, partitions, wanted, internal=True)
        elif any(meta.configs.get(k) != v for k, v in wanted.items()):
            # Journal configs are the broker's own (clients cannot alter internal
            # topics): bring a data dir written by an older version up to date.
            store.set_topic_configs(topic, {**meta.configs, **wanted})
            log.info(
                "journal.configs.updated topic=%s configs=%s",
                topic, ",".join(f"{k}={v}" for k, v in sorted(wanted.items())),
            )  # fmt: skip

    @property
    def log(self) -> PartitionLog:
        return self._store.partition(self.topic, self.partition)

    def skip(self, offset: int, reason: str, *, last_offset: int | None = None) -> None:
        """Count (and, within the log budget, log) a record at ``offset``, or a batch
        spanning ``offset..last_offset``, that could not be used."""
        self.skipped += 1
        n = self.skipped
        if n <= SKIP_LOG_LIMIT:
            if last_offset is None:
                log.warning(
                    "journal.record.skipped topic=%s partition=%d offset=%d reason=%s",
                    self.topic, self.partition, offset, reason,
                )  # fmt: skip
            else:
                log.warning(
                    "journal.batch.skipped topic=%s partition=%d offset=%d last_offset=%d "
                    "reason=%s",
                    self.topic, self.partition, offset, last_offset, reason,
                )  # fmt: skip
            if n == SKIP_LOG_LIMIT:
                log.warning(
                    "journal.skipped.suppressed topic=%s partition=%d skipped=%d "
                    "(further skips are counted, and logged at every tenfold count)",
                    self.topic, self.partition, n,
                )  # fmt: skip
        elif n == self._next_log:
            self._next_log *= 10
            log.warning(
                "journal.skipped.count topic=%s partition=%d skipped=%d offset=%d reason=%s",
                self.topic, self.partition, n, offset, reason,
            )  # fmt: skip

    def replay(self) -> Iterator[Record]:
        """Every record from the log start to the end, in offset order. Control
        batches are passed over; a batch that does not decode is skipped (see
        :meth:`skip`).

        Raises:
            StorageError: a segment could not be read (an I/O error, not bad data).
        """
        plog = self.log
        offset = int(plog.log_start_offset)
        end = int(plog.log_end_offset)
        while offset < end:
            data = plog.read(Offset(offset), READ_CHUNK)
            if not data:
                break
            start = offset
            pos = 0
            while pos + batch.HEADER_SIZE <= len(data):
                header = batch.read_header(data, pos)
                problem = _framing_problem(data, header)
                if problem is not None:
                    # Nothing after this point of the read can be located: go on from
                    # where the log's own framing says the next batch starts.
                    self.skip(header.base_offset, problem, last_offset=header.last_offset)
                    offset = max(offset + 1, header.next_offset)
                    break
                pos += header.size
                if header.next_offset <= offset:
                    continue
                if header.is_control:
                    offset = header.next_offset
                    continue
                yield from self._records(data, header, offset)
                offset = header.next_offset
            if offset == start:  # only a torn batch: nothing more can be read
                self.skip(offset, "incomplete batch at the end of the log", last_offset=end - 1)
                break

    def _records(self, data: bytes, header: batch.BatchHeader, offset: int) -> Iterator[Record]:
        try:
            crc_range = memoryview(data)[header.position + 21 : header.position + header.size]
            if crc32c.crc32c(crc_range) != header.crc:
                raise CorruptRecordError("record batch CRC32C mismatch")
            records = decode_batch(data, header)
        except Exception as exc:  # any undecodable batch is skipped, never fatal
            self.skip(header.base_offset, reason_of(exc), last_offset=header.last_offset)
            return
        for record in records:
            if record.offset >= offset:
                yield record

    def append(self, records: Sequence[tuple[bytes, bytes | None]]) -> Offset:
        """Append ``(key, value)`` records as one batch, written to the OS (not yet
        fsynced: await :meth:`durable` before acknowledging). Returns the last offset;
        the batch's records have the offsets up to it, in order.

        Raises:
            StorageError: the write failed.
        """
        now = int(time.time() * 1000)
        data = bytearray(
            encode_batch(
                [Record(i, now, key, value) for i, (key, value) in enumerate(records)],
                base_offset=0,
            )
        )
        return self.log.append(data, batch.scan(data), now).last_offset

    async def durable(self) -> None:
        """Return once everything appended so far is fsynced."""
        await self._store.wait_durable([self.log])


def _framing_problem(data: bytes, header: batch.BatchHeader) -> str | None:
    """Why the batch at ``header`` cannot be framed in ``data`` (None when it can)."""
    if header.magic != batch.MAGIC_V2:
        return f"unsupported record batch magic {header.magic}"
    if header.batch_length < batch.HEADER_SIZE - batch.LOG_OVERHEAD:
        return f"record batch length {header.batch_length} too small"
    if header.position + header.size > len(data):
        return "record batch length overruns the data"
    if header.last_offset_delta < 0 or header.record_count < 0:
        return "negative record count or offset delta"
    return None
