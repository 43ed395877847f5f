"""Journals: state kept as key/value records on an internal compacted topic.

The group coordinator (``__consumer_offsets``), the transaction coordinator
(``__transaction_state``) and the schema registry (``_schemas``) keep their state the
same way: every change is a record appended here, and the in-memory state is what
replaying those records gives, at start-up and after each append alike (the same code
path). Compaction keeps the latest record per key, so a key must identify the piece of
state its value replaces; a ``None`` value (tombstone) deletes it.

Ownership: a :class:`Journal` belongs to the component whose state it stores and is
used from the broker's event loop only.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence

from floe.protocol import batch
from floe.protocol.records import Record, decode_batch, encode_batch
from floe.storage.interface import PartitionLog, Store
from floe.types import Offset, PartitionId, TopicName

READ_CHUNK = 4 * 1024 * 1024


class Journal:
    """Append-and-replay access to one partition of an internal compacted topic."""

    def __init__(
        self,
        store: Store,
        topic: TopicName,
        *,
        configs: Mapping[str, str] | None = None,
    ) -> None:
        self._store = store
        self.topic = topic
        if store.topic(topic) is None:
            store.create_topic(
                topic, 1, dict(configs or {"cleanup.policy": "compact"}), internal=True
            )

    @property
    def log(self) -> PartitionLog:
        return self._store.partition(self.topic, PartitionId(0))

    def replay(self) -> Iterator[Record]:
        """Every record from the log start to the end, in offset order (control
        batches skipped)."""
        log = self.log
        offset: int = log.log_start_offset
        end = log.log_end_offset
        while offset < end:
            data = log.read(Offset(offset), READ_CHUNK)
            if not data:
                break
            for header in batch.scan(data, verify_crc=False, partial_ok=True):
                if header.is_control:
                    offset = max(offset, header.next_offset)
                    continue
                for record in decode_batch(data, header):
                    if record.offset >= offset:
                        yield record
                offset = max(offset, header.next_offset)

    def append(self, records: Sequence[tuple[bytes, bytes | None]]) -> Offset:
        """Append ``(key, value)`` records as one batch, written to the OS (not yet
        fsynced: await :meth:`durable` before acknowledging). Returns the last offset.

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
        log = self.log
        result = log.append(data, batch.scan(data), now)
        return result.last_offset

    async def durable(self) -> None:
        """Return once everything appended so far is fsynced."""
        await self._store.wait_durable([self.log])
