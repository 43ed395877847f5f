"""Per-partition producer state: idempotence, open transactions, aborted transactions.

The equivalent of Kafka's ``ProducerStateManager``. For every producer id that wrote to
the partition it remembers the epoch and the sequence ranges and offsets of its last
:data:`MAX_BATCHES` batches, so that

* a retried batch (same epoch, same sequence range) is recognised as a duplicate and
  answered with the offsets it got the first time, without appending anything;
* a batch whose first sequence does not follow the last one is refused
  (``OUT_OF_ORDER_SEQUENCE_NUMBER``), and a batch of an older epoch is fenced
  (``INVALID_PRODUCER_EPOCH``).

It also tracks, per producer, the first offset of its open transaction (the last
stable offset is the smallest of them) and the list of aborted transactions
(producer id, first offset, offset of the ABORT marker) that read_committed fetches
need.

Everything here is derived from batch headers (plus the type of control batches), so
the state can be rebuilt by replaying the headers of the log: the same
:meth:`ProducerStateManager.apply` runs at append time and at recovery. Like Kafka's
``.snapshot`` files, :func:`encode_snapshot` freezes the state as of an offset (at
segment roll and clean shutdown), so a start replays only the log after the newest
usable snapshot (:func:`decode_snapshot` refuses a damaged one).

A producer the partition has no state for is taken at sequence 0 only while the state
is :attr:`~ProducerStateManager.complete` (it knows every producer that ever wrote here):
a later first sequence means the producer's earlier batches never landed, and taking it
would let the client count them as written (librdkafka acknowledges a batch whose answer
it lost once a later one succeeds). Once the state may miss producers (some expired, or
rebuilt from a log whose head was deleted), an unknown producer may be one that was
forgotten, and it is taken at any sequence, as Kafka 2.5+ does (KIP-360): the broker
never returns ``UNKNOWN_PRODUCER_ID`` on produce.

Invariant: the module does no I/O.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass, field

import crc32c

from floe.errors import ErrorCode, KafkaError
from floe.protocol.batch import BatchHeader
from floe.protocol.control import ABORT

MAX_BATCHES = 5
"""Batches per producer remembered for duplicate detection (Kafka's
``max.in.flight.requests.per.connection`` limit for idempotence)."""

INT32_MAX = 2**31 - 1


class OutOfOrderSequenceError(KafkaError):
    code = ErrorCode.out_of_order_sequence_number


class InvalidProducerEpochError(KafkaError):
    code = ErrorCode.invalid_producer_epoch


class TransactionCoordinatorFencedError(KafkaError):
    code = ErrorCode.transaction_coordinator_fenced


@dataclass(frozen=True, slots=True)
class BatchMeta:
    """Sequence range and offsets of one appended batch."""

    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """An aborted transaction: data in [first_offset, last_offset] of producer_id is
    to be skipped by read_committed consumers (last_offset is the ABORT marker)."""

    producer_id: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerEntry:
    """What the partition knows about one producer id."""

    producer_id: int
    epoch: int
    batches: deque[BatchMeta] = field(default_factory=lambda: deque(maxlen=MAX_BATCHES))
    last_timestamp: int = -1
    txn_first_offset: int = -1
    """First offset of the open transaction, -1 when none is open."""
    coordinator_epoch: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A retried batch already in the log, with the offsets it got then."""

    base_offset: int
    last_offset: int


def _next_seq(last_seq: int, count: int) -> int:
    """The sequence following ``last_seq`` after ``count`` records (wraps at int32)."""
    return (last_seq + count) % (INT32_MAX + 1)


def _last_seq(header: BatchHeader) -> int:
    return _next_seq(header.base_sequence, header.last_offset_delta)


class ProducerStateManager:
    """Producer state of one partition.

    Ownership: one instance per partition log, owned (and only touched) by that log on
    the broker's event loop; built empty and filled by :meth:`apply` during the log's
    recovery scan, then kept up to date by every append. Idle producers are removed by
    :meth:`expire`, aborted transactions below the log start by :meth:`truncate_head`.
    """

    def __init__(self, *, complete: bool = True) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self.aborted: list[AbortedTxn] = []
        """Ordered by last offset (markers are appended in offset order)."""
        self.complete = complete
        """Every producer that wrote to the partition is in :attr:`producers`: the
        state was built from offset 0 (or from snapshots that were) and none expired."""

    # -- validation ----------------------------------------------------------------------

    def check(self, header: BatchHeader) -> Duplicate | None:
        """Validate a data batch of an idempotent or transactional producer before it
        is appended; returns the original offsets when it is a retried duplicate.

        Raises:
            InvalidProducerEpochError: the batch's epoch is older than the producer's.
            OutOfOrderSequenceError: the first sequence does not follow the last one
                (or a new epoch, or a producer never seen while the state is
                :attr:`complete`, does not start at 0).
        """
        entry = self.producers.get(header.producer_id)
        if entry is None:
            if self.complete and header.base_sequence != 0:
                raise OutOfOrderSequenceError(
                    f"producer {header.producer_id} never wrote here, yet its first batch "
                    f"starts at sequence {header.base_sequence}, not 0"
                )
            return None
        epoch = header.producer_epoch
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {header.producer_id} epoch {epoch} is older than {entry.epoch}"
            )
        first = header.base_sequence
        if epoch > entry.epoch:
            if first != 0:
                raise OutOfOrderSequenceError(
                    f"producer {header.producer_id} new epoch {epoch} starts at sequence "
                    f"{first}, not 0"
                )
            return None
        last = _last_seq(header)
        for b in entry.batches:
            if b.first_seq == first and b.last_seq == last:
                return Duplicate(b.base_offset, b.last_offset)
        if entry.batches and first != _next_seq(entry.last_seq, 1):
            raise OutOfOrderSequenceError(
                f"producer {header.producer_id} sequence {first} does not follow {entry.last_seq}"
            )
        return None

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int = -1) -> None:
        """Validate a transaction marker about to be written.

        Raises:
            InvalidProducerEpochError: the marker's epoch is older than the producer's.
            TransactionCoordinatorFencedError: the marker comes from an older transaction
                coordinator than the last marker of this producer here (a stale
                coordinator must not end the producer's next transaction).
        """
        entry = self.producers.get(producer_id)
        if entry is not None and epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"marker epoch {epoch} of producer {producer_id} is older than {entry.epoch}"
            )
        if entry is not None and coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker of producer {producer_id} from coordinator epoch {coordinator_epoch}, "
                f"older than {entry.coordinator_epoch}"
            )

    # -- state changes (append and recovery alike) ------------------------------------

    def apply(
        self,
        header: BatchHeader,
        timestamp_ms: int,
        control_type: int = -1,
        coordinator_epoch: int = -1,
    ) -> None:
        """Record an appended batch (offsets assigned); ``control_type`` is the marker
        type (:data:`~floe.protocol.control.ABORT` or ``COMMIT``) of a control batch,
        ``coordinator_epoch`` the epoch of the coordinator that wrote it."""
        pid = header.producer_id
        if pid < 0:
            return
        entry = self.producers.get(pid)
        if entry is None or header.producer_epoch > entry.epoch:
            old = entry
            entry = ProducerEntry(pid, header.producer_epoch)
            if old is not None:
                entry.txn_first_offset = old.txn_first_offset
            self.producers[pid] = entry
        entry.last_timestamp = max(entry.last_timestamp, timestamp_ms)
        if header.is_control:
            entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
            if entry.txn_first_offset >= 0 and control_type == ABORT:
                self.aborted.append(AbortedTxn(pid, entry.txn_first_offset, header.base_offset))
            entry.txn_first_offset = -1
            return
        if header.is_transactional and entry.txn_first_offset < 0:
            entry.txn_first_offset = header.base_offset
        if header.base_sequence >= 0:
            entry.batches.append(
                BatchMeta(header.base_sequence, _last_seq(header), header.base_offset,
                          header.last_offset)
            )  # fmt: skip

    # -- queries -----------------------------------------------------------------------

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction, None when none is open."""
        firsts = [e.txn_first_offset for e in self.producers.values() if e.txn_first_offset >= 0]
        return min(firsts) if firsts else None

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping offsets [start, end)."""
        return [a for a in self.aborted if a.last_offset >= start and a.first_offset < end]

    # -- housekeeping ------------------------------------------------------------------

    def expire(self, now_ms: int, max_idle_ms: int) -> int:
        """Forget producers idle for more than ``max_idle_ms`` without an open
        transaction (the state is no longer :attr:`complete`); returns how many were
        removed."""
        doomed = [
            pid
            for pid, e in self.producers.items()
            if e.txn_first_offset < 0 and now_ms - e.last_timestamp > max_idle_ms
        ]
        for pid in doomed:
            del self.producers[pid]
        if doomed:
            self.complete = False
        return len(doomed)

    def truncate_head(self, log_start: int) -> None:
        """Drop aborted transactions wholly below the new log start offset."""
        if self.aborted and self.aborted[0].last_offset < log_start:
            self.aborted = [a for a in self.aborted if a.last_offset >= log_start]


# -- snapshots ---------------------------------------------------------------------------

_SNAP_MAGIC = b"FPS2"
_SNAP_MAGIC_V1 = b"FPS1"
"""Snapshots written before :attr:`ProducerStateManager.complete` was kept: read as
not complete (Kafka's KIP-360 acceptance, as when they were written)."""
_SNAP_HEAD = struct.Struct(">4sIqII")  # magic, crc32c of the rest, offset, producers, aborted
_SNAP_FLAGS = struct.Struct(">B")  # version 2: bit 0 = complete
_SNAP_PRODUCER = struct.Struct(">qhqqiB")  # pid, epoch, last ts, txn first, coord epoch, n
_SNAP_BATCH = struct.Struct(">iiqq")
_SNAP_ABORTED = struct.Struct(">qqq")


def encode_snapshot(state: ProducerStateManager, offset: int) -> bytes:
    """The bytes of a snapshot of ``state`` as of ``offset`` (every batch below it
    applied, none at or above it), checksummed (big endian, CRC32C)."""
    body = bytearray()
    for e in state.producers.values():
        body += _SNAP_PRODUCER.pack(
            e.producer_id,
            e.epoch,
            e.last_timestamp,
            e.txn_first_offset,
            e.coordinator_epoch,
            len(e.batches),
        )
        for b in e.batches:
            body += _SNAP_BATCH.pack(b.first_seq, b.last_seq, b.base_offset, b.last_offset)
    for a in state.aborted:
        body += _SNAP_ABORTED.pack(a.producer_id, a.first_offset, a.last_offset)
    counts = struct.pack(">qII", offset, len(state.producers), len(state.aborted))
    flags = _SNAP_FLAGS.pack(1 if state.complete else 0)
    crc = crc32c.crc32c(counts + flags + body)
    return _SNAP_MAGIC + struct.pack(">I", crc) + counts + flags + bytes(body)


def decode_snapshot(data: bytes) -> tuple[int, ProducerStateManager] | None:
    """(offset, state) of a snapshot made by :func:`encode_snapshot`; None when the
    bytes are damaged (wrong magic, checksum or length)."""
    if len(data) < _SNAP_HEAD.size:
        return None
    magic, crc, offset, n_producers, n_aborted = _SNAP_HEAD.unpack_from(data)
    if magic not in (_SNAP_MAGIC, _SNAP_MAGIC_V1) or crc32c.crc32c(memoryview(data)[8:]) != crc:
        return None
    pos = _SNAP_HEAD.size
    try:
        complete = False
        if magic == _SNAP_MAGIC:
            complete = bool(_SNAP_FLAGS.unpack_from(data, pos)[0] & 1)
            pos += _SNAP_FLAGS.size
        state = ProducerStateManager(complete=complete)
        for _ in range(n_producers):
            pid, epoch, last_ts, txn_first, coord, n = _SNAP_PRODUCER.unpack_from(data, pos)
            pos += _SNAP_PRODUCER.size
            entry = ProducerEntry(
                pid, epoch, last_timestamp=last_ts, txn_first_offset=txn_first,
                coordinator_epoch=coord,
            )  # fmt: skip
            for _ in range(n):
                entry.batches.append(BatchMeta(*_SNAP_BATCH.unpack_from(data, pos)))
                pos += _SNAP_BATCH.size
            state.producers[pid] = entry
        for _ in range(n_aborted):
            state.aborted.append(AbortedTxn(*_SNAP_ABORTED.unpack_from(data, pos)))
            pos += _SNAP_ABORTED.size
    except struct.error:
        return None
    return (offset, state) if pos == len(data) else None
