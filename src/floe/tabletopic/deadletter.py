"""Dead-letter topics: the records a table topic's rounds skipped, sent on exactly once.

A round whose topic has ``table.topic.errors.dlq.topic`` set reports the records it
skipped (partition, offset, why: :class:`~floe.tabletopic.model.DeadRecord`). Before the
round commits, :meth:`DeadLetters.send` copies each of them from the source topic's log
into the dead-letter topic, byte-identical (key, value, timestamp, headers), with these
headers added:

* ``floe.dlq.topic``, ``floe.dlq.partition``, ``floe.dlq.offset``: where it came from;
* ``floe.dlq.error.class`` and ``floe.dlq.error.reason``: what failed and why;
* ``floe.dlq.schema.id``: the Confluent schema id of the value, when it has the wire
  format's prefix.

**Exactly once.** The dead-letter topic has one partition; a source partition's records
go there in offset order, round after round. Before sending, the tail of the dead-letter
topic says how far each source partition got (the highest ``floe.dlq.offset`` sent, read
once and then followed); a record at or below it was sent by an earlier attempt of the
same round (one that failed or crashed after sending, before its commit) and is not
sent again. The records are durable before the round commits, so a commit never
outruns its dead letters. (A record that a redone round converts after all, because its
schema was registered in between, stays in the dead-letter topic too.)

The topic is created when first needed, with ``table.topic.errors.dlq.source`` naming
the table topic (in a cluster its partition then stays with the broker running the
pipeline). Owned by the broker's event loop; :meth:`send` is called from a round's
worker thread and waits for the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from floe.config.tabletopic import DLQ_SOURCE
from floe.protocol import batch
from floe.protocol.records import Record, decode_batch, encode_batch
from floe.storage.interface import (
    NotCachedError,
    PartitionLog,
    Store,
    TopicExistsError,
)
from floe.tabletopic.model import (
    DLQ_ERROR_CLASS_HEADER,
    DLQ_LAST_OFFSET_HEADER,
    DLQ_OFFSET_HEADER,
    DLQ_PARTITION_HEADER,
    DLQ_REASON_HEADER,
    DLQ_SCHEMA_ID_HEADER,
    DLQ_TOPIC_HEADER,
    DeadRecord,
)
from floe.types import Offset, PartitionId, TopicName

log = logging.getLogger("floe.tabletopic.deadletter")

READ_BYTES = 1024 * 1024
"""Bytes read from a log at a time (a larger batch is read whole)."""
SEND_TIMEOUT_S = 120.0


@dataclass
class _Followed:
    """How far a dead-letter topic was read, the highest source offset sent per (topic,
    partition), and how many dead letters it holds."""

    offset: int = 0
    sent: dict[tuple[str, int], int] = field(default_factory=dict)
    letters: int = 0


class DeadLetters:
    """See the module docstring."""

    def __init__(self, store: Store, loop: asyncio.AbstractEventLoop) -> None:
        self.store = store
        self._loop = loop
        # dead-letter topic -> (offset read up to, source partition -> highest offset sent)
        self._followed: dict[TopicName, _Followed] = {}
        self._lock = asyncio.Lock()

    def send(self, source: TopicName, dlq: TopicName, dead: Sequence[DeadRecord]) -> int:
        """Copy ``dead`` (in offset order per partition) to ``dlq``, those not sent yet,
        and return once they are durable; returns how many were sent now. Called from a
        worker thread.

        Raises:
            StorageError: the dead-letter topic could not be written.
            OffsetOutOfRangeError: a record is no longer in the source log.
        """
        future = asyncio.run_coroutine_threadsafe(self._send(source, dlq, dead), self._loop)
        return future.result(SEND_TIMEOUT_S)

    async def _send(self, source: TopicName, dlq: TopicName, dead: Sequence[DeadRecord]) -> int:
        async with self._lock:
            plog = self._partition(source, dlq)
            followed = await self._follow(dlq, plog)
            sent = followed.sent
            records: list[Record] = []
            for d in dead:
                if d.offset <= sent.get((source, d.partition), -1):
                    continue
                if d.last is None:
                    original = await self._record(source, d)
                else:  # an unusable batch: as stored
                    original = await self._batch(source, d)
                records.append(_dead_letter(len(records), source, d, original))
            if not records:
                return 0
            data = bytearray(encode_batch(records, base_offset=0))
            plog.append(data, batch.scan(data), int(time.time() * 1000))
            await self.store.wait_durable([plog])
            for d in dead:
                key = (source, d.partition)
                sent[key] = max(sent.get(key, -1), d.end)
            followed.offset = int(plog.log_end_offset)
            followed.letters += len(records)
            log.info(
                "tabletopic.dead_lettered topic=%s dlq=%s records=%d",
                source, dlq, len(records),
            )  # fmt: skip
            return len(records)

    def _partition(self, source: TopicName, dlq: TopicName) -> PartitionLog:
        if self.store.topic(dlq) is None:
            try:
                self.store.create_topic(dlq, 1, {DLQ_SOURCE.name: source})
                log.info("tabletopic.dlq_created topic=%s dlq=%s", source, dlq)
            except TopicExistsError:  # created meanwhile
                pass
        return self.store.partition(dlq, PartitionId(0))

    async def count(self, dlq: TopicName) -> int:
        """Dead letters in ``dlq`` (not counting replay markers); 0 before it exists.

        Raises:
            KafkaError: another broker leads it (a cluster).
        """
        async with self._lock:
            if self.store.topic(dlq) is None:
                return 0
            plog = self.store.partition(dlq, PartitionId(0))
            return (await self._follow(dlq, plog)).letters

    async def _follow(self, dlq: TopicName, plog: PartitionLog) -> _Followed:
        """What ``dlq`` holds, read on from where the last call stopped (the whole topic
        the first time)."""
        followed = self._followed.setdefault(dlq, _Followed())
        offset = max(followed.offset, int(plog.log_start_offset))
        end = int(plog.log_end_offset)
        while offset < end:
            data = await self._read(plog, Offset(offset))
            if not data:
                break
            for header in batch.scan(data):
                if not header.is_control:
                    for r in decode_batch(data, header):
                        where = _where(r)
                        if where is not None:
                            key = where[:2]
                            followed.sent[key] = max(followed.sent.get(key, -1), where[2])
                            followed.letters += 1
                offset = max(offset, int(header.next_offset))
        followed.offset = offset
        return followed

    async def _record(self, source: TopicName, d: DeadRecord) -> Record:
        """The record at ``d`` in the source log.

        Raises:
            OffsetOutOfRangeError: it is no longer there (retention).
            LookupError: no record has that offset (it was a control record).
        """
        plog = self.store.partition(source, PartitionId(d.partition))
        data = await self._read(plog, Offset(d.offset))
        for header in batch.scan(data):
            if header.base_offset <= d.offset <= header.last_offset and not header.is_control:
                for r in decode_batch(data, header):
                    if r.offset == d.offset:
                        return r
        raise LookupError(f"{source}-{d.partition} has no record at offset {d.offset}")

    async def _batch(self, source: TopicName, d: DeadRecord) -> Record:
        """The unusable batch at ``d`` as one record: its bytes as stored (no key, the
        header's newest timestamp, no headers of its own).

        Raises:
            OffsetOutOfRangeError: it is no longer there (retention).
            LookupError: no batch starts at that offset.
        """
        plog = self.store.partition(source, PartitionId(d.partition))
        data = await self._read(plog, Offset(d.offset))
        for header in batch.scan(data):
            if header.base_offset == d.offset:
                raw = bytes(data[header.position : header.position + header.size])
                return Record(d.offset, header.max_timestamp, None, raw, ())
        raise LookupError(f"{source}-{d.partition} has no batch at offset {d.offset}")

    @staticmethod
    async def _read(plog: PartitionLog, offset: Offset) -> bytes:
        while True:
            try:
                return plog.read(offset, READ_BYTES)
            except NotCachedError as exc:  # in the object store only: load it, read again
                await exc.load()


def _dead_letter(delta: int, source: TopicName, d: DeadRecord, original: Record) -> Record:
    headers: list[tuple[str, bytes | None]] = list(original.headers)
    headers += [
        (DLQ_TOPIC_HEADER, source.encode()),
        (DLQ_PARTITION_HEADER, str(d.partition).encode()),
        (DLQ_OFFSET_HEADER, str(d.offset).encode()),
        (DLQ_ERROR_CLASS_HEADER, d.error_class.encode()),
        (DLQ_REASON_HEADER, d.reason.encode()),
    ]
    if d.last is not None:
        headers.append((DLQ_LAST_OFFSET_HEADER, str(d.last).encode()))
    value = original.value
    if d.last is None and value is not None and len(value) >= 5 and value[0] == 0:
        headers.append((DLQ_SCHEMA_ID_HEADER, str(int.from_bytes(value[1:5], "big")).encode()))
    return Record(delta, original.timestamp, original.key, original.value, tuple(headers))


def _where(r: Record) -> tuple[str, int, int] | None:
    """(source topic, partition, last offset covered) of a dead letter, from its
    headers."""
    found = {
        k: v
        for k, v in r.headers
        if k in (DLQ_TOPIC_HEADER, DLQ_PARTITION_HEADER, DLQ_OFFSET_HEADER, DLQ_LAST_OFFSET_HEADER)
    }
    try:
        return (
            (found[DLQ_TOPIC_HEADER] or b"").decode(),
            int(found[DLQ_PARTITION_HEADER] or b""),
            int(found.get(DLQ_LAST_OFFSET_HEADER) or found[DLQ_OFFSET_HEADER] or b""),
        )
    except (KeyError, ValueError, UnicodeDecodeError):
        return None
